"""Peer links: the data SUB's connections to peers' publishers, and what each one is.

Owns, per endpoint the SUB connects to: whether aoz wants it connected, a pending
disconnect (a departed peer's link may still drain for a short grace), its state
as the SUB's monitor reports it (up after ``HANDSHAKE_SUCCEEDED``, down after
``DISCONNECTED``/``CLOSED``), whether it is *silent* (the last connection attempt got
no answer at all within the connect timeout: the network is cut, or the host is down;
a port nobody listens on answers at once, with a refusal); and the
:class:`~aoz._mesh.sockopts.HandshakeGuard` fed the same events, which stops libzmq's retry
loop after failed handshakes and reconnects on a back-off. Both directions of a link,
and the events users see, are :mod:`aoz._mesh.liveness`'s: this room only knows our SUB's
side.

It touches the SUB only to connect and disconnect it, and reads the SUB's monitor
socket; both are created and closed by the data plane (:mod:`aoz._mesh.dataplane`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import zmq
from zmq.utils.monitor import parse_monitor_message

from ..config import Settings
from ..errors import TransportError
from .errmap import drain_error, mapped, tolerated
from .sockopts import CONNECT_TIMEOUT, HandshakeGuard, finish_disconnects

__all__ = ["DISCONNECT_GRACE", "PeerLinkTable"]

log = logging.getLogger("aoz.node")

DISCONNECT_GRACE = 0.5  # seconds a departed peer's data link may still drain
_BATCH = 1024  # monitor events read per wake-up
#: an attempt that ends this long after it began timed out: nobody answered
_SILENT_AFTER = 0.8 * CONNECT_TIMEOUT
# what pyzmq's parse_monitor_message raises for an event it cannot read
_MALFORMED = (ValueError, KeyError, IndexError, UnicodeDecodeError, RuntimeError)


class PeerLinkTable:
    """The SUB's peer connections (see the module docstring)."""

    def __init__(self, settings: Settings, count: Callable[[str, int], None]) -> None:
        self.settings = settings
        self._count = count
        self.sub: zmq.Socket[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.connected: set[str] = set()
        self._pending: dict[str, asyncio.TimerHandle] = {}
        self._state: dict[str, bool] = {}
        self._attempt: dict[str, float] = {}  # endpoint -> when its connect attempt began
        self._silent: set[str] = set()  # endpoints whose last attempt got no answer
        self._guard: HandshakeGuard | None = None
        self.closing = False
        #: re-run the SUB's drain: a socket call may have eaten its fd signal
        self.kick: Callable[[], None] = lambda: None
        #: whether the SUB is held (not read: a full overflow="block" subscription)
        self.held: Callable[[], bool] = lambda: False
        #: a link's state changed (liveness pushes link events from it)
        self.on_change: Callable[[], None] = lambda: None
        #: called with an endpoint just before the SUB connects to it (curve_identity:
        #: names the peer's key, aoz._mesh.security.DataCurve.before_connect)
        self.before_connect: Callable[[str], None] = lambda endpoint: None
        #: connection file descriptor -> endpoint, from the monitor (curve_identity
        #: traces frames to their connection with it: aoz._mesh.security.VerifyingSub)
        self.fds: dict[int, str] = {}

    def attach(self, sub: zmq.Socket[bytes]) -> None:
        """Manage ``sub``'s connections (called by the data plane once it is set up)."""
        self.sub = sub
        self._loop = asyncio.get_running_loop()
        self._guard = HandshakeGuard(
            sub, self.settings, wanted=self.connected.__contains__,
            count=self._count_one,
        )
        self._guard.prepare = lambda endpoint: self.before_connect(endpoint)

    def _count_one(self, counter: str, n: int = 1) -> None:
        self._count(counter, n)

    def connect(self, endpoint: str) -> None:
        """Connect the SUB to ``endpoint`` now (raises aoz errors); idempotent."""
        assert self.sub is not None
        if endpoint in self.connected:
            return
        with mapped(f"cannot connect to {endpoint!r}"):
            self.before_connect(endpoint)
            self.sub.connect(endpoint)
        self.connected.add(endpoint)
        self.kick()

    def connect_peer(self, endpoint: str) -> None:
        """Connect to a peer's publisher (idempotent); a failure is counted and logged."""
        pending = self._pending.pop(endpoint, None)
        if pending is not None:
            pending.cancel()  # the peer is back (or a new one took its address)
            if not self._state.get(endpoint, False):
                # the old link is gone: connect afresh, not after its leftover back-off
                self._disconnect_now(endpoint)
                if self._guard is not None:
                    self._guard.reset(endpoint)
        if self.sub is None or self.closing or endpoint in self.connected:
            return
        try:
            self.connect(endpoint)
        except TransportError as exc:
            self._count("connect_errors", 1)
            log.warning("cannot connect to peer %s: %s", endpoint, exc)

    def disconnect_peer(self, endpoint: str) -> None:
        """Disconnect from a peer's publisher after a short grace period: a peer's
        goodbye travels through the nsd and can overtake its last data frames (a final
        reply, say), which would be lost if the link were cut at once."""
        if self.sub is None or endpoint not in self.connected or self._loop is None:
            return
        if endpoint not in self._pending:
            self._pending[endpoint] = self._loop.call_later(
                DISCONNECT_GRACE, self._disconnect_now, endpoint
            )

    def _disconnect_now(self, endpoint: str) -> None:
        self._pending.pop(endpoint, None)
        if self.sub is None or self.sub.closed or endpoint not in self.connected:
            return
        self.connected.discard(endpoint)
        self._state.pop(endpoint, None)
        self._attempt.pop(endpoint, None)
        self._silent.discard(endpoint)
        with tolerated(f"disconnect from {endpoint}", "the link is being dropped anyway"):
            self.sub.disconnect(endpoint)
        self.kick()

    def up(self, endpoint: str) -> bool:
        """Whether the SUB currently has a live connection to ``endpoint``."""
        return self._state.get(endpoint, False)

    def silent(self, endpoint: str) -> bool:
        """Whether the SUB's last attempt to connect to ``endpoint`` got no answer (no
        connection, no refusal) within the connect timeout: a cut network or a host
        that is down, not a process that has gone (its port refuses at once)."""
        return endpoint in self._silent

    def close(self) -> None:
        """Cancel pending disconnects (the sockets are closing)."""
        self.closing = True
        for handle in self._pending.values():
            handle.cancel()
        self._pending.clear()

    def _attempted(self, event: int, endpoint: str, now: float) -> None:
        """Whether connection attempts to ``endpoint`` are answered (:meth:`silent`):
        an attempt begins with ``CONNECT_DELAYED`` and ends with ``CLOSED`` (refused at
        once, or timed out after the connect timeout) or ``CONNECTED``."""
        if event == zmq.EVENT_CONNECT_DELAYED:
            self._attempt[endpoint] = now
        elif event == zmq.EVENT_CLOSED:
            began = self._attempt.pop(endpoint, None)
            if began is not None and now - began >= _SILENT_AFTER:
                self._silent.add(endpoint)
            else:
                self._silent.discard(endpoint)
        elif event in (zmq.EVENT_CONNECTED, zmq.EVENT_HANDSHAKE_SUCCEEDED):
            self._attempt.pop(endpoint, None)
            self._silent.discard(endpoint)

    def drain_monitor(self, sock: zmq.Socket[bytes]) -> int:
        """Read the SUB's monitor events: link state and the handshake guard."""
        n = 0
        changed = False
        try:
            while n < _BATCH:
                parts = sock.recv_multipart(zmq.NOBLOCK)
                n += 1
                try:
                    ev = parse_monitor_message(parts)
                    raw = ev["endpoint"]
                    endpoint = raw.decode() if isinstance(raw, bytes) else str(raw)
                except _MALFORMED as exc:
                    self._count("monitor_malformed", 1)
                    log.warning("ignored a malformed ZeroMQ monitor event: %r", exc)
                    continue
                if ev["event"] == zmq.EVENT_CONNECTED:
                    self.fds[ev["value"]] = endpoint
                elif (ev["event"] in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED)
                      and self.fds.get(ev["value"]) == endpoint):
                    del self.fds[ev["value"]]
                if endpoint not in self.connected:
                    continue  # a link already dropped: keep no state for it
                now = time.monotonic()
                if self._guard is not None:
                    self._guard.event(ev["event"], endpoint, now)
                self._attempted(ev["event"], endpoint, now)
                if ev["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    changed |= self._state.get(endpoint) is not True
                    self._state[endpoint] = True
                elif ev["event"] in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED):
                    changed |= self._state.get(endpoint) is not False
                    self._state[endpoint] = False
        except zmq.Again:
            pass
        except zmq.ZMQError as exc:
            drain_error(exc, "reading the data link monitor", closing=self.closing)
        if changed:
            self.on_change()
        if self._guard is not None:  # runs at least every second (the reader's safety)
            self._guard.tick(time.monotonic())
        if self.sub is not None and not self.closing and self.held():
            # a SUB held by a full blocking subscription is not read: let libzmq finish
            # its disconnects anyway (zeromq/libzmq#4052, see sockopts)
            finish_disconnects(self.sub)
        return n
