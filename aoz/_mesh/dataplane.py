"""The data plane: a node's ZeroMQ sockets, their lifecycle and their readers.

Owns the sockets, as in OZ: an XPUB that this node's frames leave from (bound; peers'
SUBs connect to it) and a SUB that connects to every peer's publisher, this node's own
included (self-delivery). It is an XPUB so that the node sees which filters have
reached it (:class:`~aoz._mesh.interest.InterestSet`, fed by :meth:`DataPlane._drain_interest`).
A monitor on the SUB reports each peer link; with CURVE and an allow-list a ZAP socket
answers authentication requests. It creates, configures (:mod:`aoz._mesh.sockopts`), binds,
connects and closes them, and runs one reader per socket.

The work on those sockets lives in rooms of its own, which this module wires together
and hands to the node:

- :mod:`aoz._mesh.receive` (``plane.receive``): the receive path, drain -> routing -> mailboxes;
- :mod:`aoz._mesh.send` (``plane.send``): every frame the node publishes, back-pressure;
- :mod:`aoz._mesh.peerlinks` (``plane.links``): the SUB's connections to peers, link state;
- :mod:`aoz._mesh.security` (:class:`~aoz._mesh.security.DataCurve`): CURVE and ZAP;
- :mod:`aoz._mesh.hotpath`: the per-frame code of the receive and send paths, compiled or pure.

How a frame flows from the socket to ``async for``: ZeroMQ exposes a file descriptor
that signals "look at ZMQ_EVENTS"; the loop watches it with ``add_reader`` and the
callback runs the receive path's drain (up to ``BATCH`` frames with non-blocking
``recv``), in the same loop turn (no task hop). The descriptor is edge-like: any socket
call may consume its signal, so calls that touch a socket are followed by a kick that
re-runs the drain, and sockets that are also written to have a safety re-run.

Failures are not swallowed: an exception in a drain callback (other than a closed
socket while closing) ends the reader task with it, which fails the node; the node
then ends every subscription with an error. ZeroMQ's errors become aoz's in one place,
:mod:`aoz._mesh.errmap`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import cast

import anyio
import anyio.abc
import zmq

from .._protocol import heartbeat
from .._protocol.builder import FrameBuilder
from ..config import Settings
from ._hotpath import BATCH
from .cache import PublishCache
from .endpoints import bind_endpoint, connectable
from .errmap import drain_error, mapped
from .interest import InterestSet
from .message import Responder
from .peerlinks import PeerLinkTable
from .receive import Receiver
from .routing import RoutingTable
from .security import DataCurve, VerifyingSub
from .send import SendPath
from .sockopts import DATA_MONITOR_EVENTS, apply_data_options
from .subscription import Subscription

__all__ = ["DataPlane"]

log = logging.getLogger("aoz.node")

#: how long closing waits for the XPUB to see this node's own SUB leave (see
#: DataPlane._own_link_gone); about a millisecond when the self-link is up
_OWN_LINK_WAIT = 0.25


class DataPlane:
    """Sockets and readers of one node, and its rooms (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        routes: RoutingTable[Subscription],
        interest: InterestSet,
        on_reply: Callable[[bytes, bytes, int, float], None],
        responder: Responder,
        inbox_filter: bytes,
        builder: FrameBuilder,
        uuid: str,
    ) -> None:
        self.settings = settings
        self._interest = interest
        self._inbox_filter = inbox_filter
        self._uuid = uuid  # names an ipc endpoint (aoz._mesh.endpoints.bind_endpoint)
        #: set whenever the interest set changes (wait_for_interest waits on it)
        self.interest_changed = asyncio.Event()
        #: called when the interest set changes (liveness: a peer's inbox filter came or
        #: went), as it happens; the peer links' monitor calls its own on_change
        self.on_interest: Callable[[], None] = lambda: None
        self.endpoint = ""
        self.endpoints: list[str] = []
        self.counters: dict[str, int] = {}
        #: the rooms (see the module docstring)
        self.receive = Receiver(routes, responder, on_reply)
        blocking = settings.send_policy == "block"
        #: the publisher cache (aoz._mesh.cache), None when publish_cache is 0
        self.cache = (PublishCache(settings.publish_cache, settings.publish_cache_bytes)
                      if settings.publish_cache else None)
        self.send = SendPath(builder, blocking=blocking, cache=self.cache)
        self.links = PeerLinkTable(settings, self.count)

        # A context of its own: closing the node can then wait (in a worker thread,
        # bounded by the linger) until what is queued has left, and a CURVE node has
        # its own ZAP handler.
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        curve = settings.curve_server_public is not None or settings.curve_identity
        self._curve = DataCurve(self._ctx, settings, self.count) if curve else None
        self._pub: zmq.Socket[bytes] | None = None
        self._sub: zmq.Socket[bytes] | None = None
        self._mon: zmq.Socket[bytes] | None = None
        self._drainers: dict[int, Callable[[], None]] = {}
        self._kick_pub: Callable[[], None] = lambda: None
        self._loop: asyncio.AbstractEventLoop | None = None

    def count(self, counter: str, n: int = 1) -> None:
        """Add to a counter of ``node.statistics().discovery``."""
        self.counters[counter] = self.counters.get(counter, 0) + n

    @property
    def closed(self) -> bool:
        return self._pub is None or self._pub.closed

    # ------------------------------------------------------------------ open / close
    def open(self) -> None:
        """Create, configure, bind and connect the sockets (raises aoz errors)."""
        s = self.settings
        self._loop = asyncio.get_running_loop()
        with mapped("cannot set up the data sockets"):
            pub: zmq.Socket[bytes] = self._ctx.socket(zmq.XPUB)
            sub: zmq.Socket[bytes] = self._ctx.socket(zmq.SUB)
            self._pub, self._sub = pub, sub
            self.send.attach(pub)
            if self._curve is not None:
                self._curve.apply(pub, sub)
                curve = self._curve
                self.links.before_connect = lambda endpoint: curve.before_connect(sub, endpoint)
            # every option and why: aoz/_mesh/sockopts.py (sizes, handshakes, back-off, liveness)
            apply_data_options(pub, sub, s)
            self.links.attach(sub)
            # every mode: the handshake guard needs the events (link state: naming/udp)
            self._mon = sub.get_monitor_socket(DATA_MONITOR_EVENTS)
        kick = self._kicker(sub)
        self._kick_pub = self._kicker(pub)
        self.receive.kick = self.links.kick = kick
        self.links.held = lambda: self.receive.holds > 0
        if s.mode in ("naming", "udp"):
            # the transport seam: tcp on publish_address, or ipc (aoz._mesh.endpoints)
            self._bind(bind_endpoint(s, self._uuid))
        elif s.mode == "static":
            for ep in s.bind:
                self._bind(ep)
            for ep in self.endpoints:  # self-delivery
                self.links.connect(connectable(ep))
            for ep in s.connect:
                self.links.connect(ep)
        else:  # broker
            assert s.broker_pub and s.broker_sub
            with mapped(f"cannot connect to the broker at {s.broker_pub}"):
                pub.connect(s.broker_pub)
            self.endpoint = s.broker_pub
            self.links.connect(s.broker_sub)
        with mapped("cannot subscribe to this node's inbox"):
            sub.setsockopt(zmq.SUBSCRIBE, self._inbox_filter)
            # publisher heartbeats (aoz._protocol.heartbeat): every aoz node takes them,
            # whatever it subscribes to (docs/PROTOCOL.md says why)
            sub.setsockopt(zmq.SUBSCRIBE, heartbeat.FILTER)

    def _bind(self, endpoint: str) -> None:
        assert self._pub is not None
        with mapped(f"cannot bind data publisher to {endpoint!r} (is the address in use "
                    "or not local?)"):
            self._pub.bind(endpoint)
            last = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.endpoints.append(last)
        if not self.endpoint:
            self.endpoint = last

    async def close(self) -> None:
        """Close every socket (with the configured linger); idempotent."""
        self.receive.closing = True
        self.links.close()
        if self._curve is not None:
            self._curve.closing = True
        linger = int(self.settings.linger * 1000)
        if self._sub is not None and self._mon is not None and not self._sub.closed:
            # Stop monitoring first: libzmq's I/O thread would otherwise block forever
            # reporting the SUB's disconnects to a monitor nobody reads, freezing every
            # socket of the shared context.
            self._sub.disable_monitor()
        # Only what we publish is worth waiting for; a SUB's queue holds subscriptions
        # for peers that may be gone, which would hold term() for the whole linger.
        zap = self._curve.zap if self._curve is not None else None
        for sock in (self._mon, self._sub):
            if sock is not None and not sock.closed:
                sock.close(linger=0)
        await self._own_link_gone()
        for sock, wait in ((self._pub, linger), (zap, 0)):
            if sock is not None and not sock.closed:
                sock.close(linger=wait)
        if not self._ctx.closed:
            # term() returns once what was queued has left, or the linger ran out;
            # it blocks, so not on the event loop
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._ctx.term)

    async def _own_link_gone(self) -> None:
        """With the SUB closed and before the XPUB closes: wait, bounded, until the XPUB
        has seen this node's own SUB leave (our inbox filter withdrawn).

        libzmq aborts the process (``Assertion failed: !_io_error``,
        stream_engine_base.cpp) when a ZMTP heartbeat timer fires on a connection whose
        input stopped and then failed. A subscription change that reaches an XPUB
        while the XPUB is closing stops that connection's input (its pipe is gone),
        and the peer's close then fails it. Our own SUB sends exactly that when a
        subscription is closed just before the node (measured with 1 ms heartbeats:
        61 aborts in 700 processes; 0 in 1,000 with this wait). Once the withdrawal has
        come, the self-connection was torn down while the XPUB was open, where nothing
        stops it.
        """
        pub = self._pub
        if (pub is None or pub.closed or self.settings.heartbeat_interval <= 0
                or self._inbox_filter not in self._interest):  # no self-link to wait for
            return
        # On the loop, as every other use of the XPUB; the interest set says when our
        # filter has gone (a drain the loop still had scheduled may have read it first)
        loop = asyncio.get_running_loop()
        fd = cast(int, pub.getsockopt(zmq.FD))
        woken = asyncio.Event()
        loop.add_reader(fd, woken.set)
        try:
            with anyio.move_on_after(_OWN_LINK_WAIT):
                while True:
                    woken.clear()
                    while self._drain_interest(pub) >= BATCH:  # the fd only signals what
                        pass  # is new: all that is there first (errors: ignored, closing)
                    if self._inbox_filter not in self._interest:
                        break
                    await woken.wait()
        finally:
            loop.remove_reader(fd)
        seen = self._inbox_filter not in self._interest
        # statistics().discovery: how each close went (a timeout means a slower close)
        self.count("own_link_gone" if seen else "own_link_wait_timeout")

    # ------------------------------------------------------------------ readers
    async def run(self, tg: anyio.abc.TaskGroup) -> None:
        """Start one reader task per socket in ``tg`` (the node's group)."""
        assert self._sub is not None and self._pub is not None
        # the SUB too gets a safety re-run (1 s): a missed fd edge must never stall the
        # receive path for good (a benchmark round once went silent under heavy load)
        tg.start_soon(self._reader, self._sub, self._sub_drain(), 1.0, name="aoz-recv")
        tg.start_soon(self._reader, self._pub, self._drain_interest, 0.1, name="aoz-xpub")
        if self._mon is not None:
            tg.start_soon(self._reader, self._mon, self.links.drain_monitor, 1.0,
                          name="aoz-monitor")
        if self._curve is not None and self._curve.zap is not None:
            tg.start_soon(self._reader, self._curve.zap, self._curve.drain_zap, 1.0,
                          name="aoz-zap")

    def _sub_drain(self) -> Callable[[zmq.Socket[bytes]], int]:
        """The SUB's drain: the receive path's, through a :class:`VerifyingSub` when
        identities are bound to keys (every frame traced to its connection's key)."""
        curve = self._curve
        if curve is None or curve.identities is None or self._sub is None:
            return self.receive.drain
        mon = self._mon
        links = self.links

        def refresh() -> None:
            if mon is not None and not mon.closed:
                links.drain_monitor(mon)

        verifying = VerifyingSub(
            self._sub, curve.identities, curve.permissions, fd_endpoint=links.fds,
            key_at=lambda endpoint: curve.key_at(endpoint), refresh=refresh,
            count=self.count,
        )
        verifying.kick = self.receive.kick
        # the hot path reads the SUB through its recv only: the verifier stands in for it
        sock = cast("zmq.Socket[bytes]", verifying)
        return lambda _sub: self.receive.drain(sock)

    def name_peers(self, uuid_at: Callable[[str], str | None]) -> None:
        """``curve_identity``: ``uuid_at`` names the uuid announced at an endpoint (the
        discovery driver's table); the key connected there is the one that uuid names."""
        curve = self._curve
        if curve is None or curve.identities is None:
            return
        table = curve.identities

        def key_at(endpoint: str) -> str | None:
            uuid = uuid_at(endpoint)
            return None if uuid is None else table.key_of_uuid(uuid)

        curve.key_at = key_at

    def _kicker(self, sock: zmq.Socket[bytes]) -> Callable[[], None]:
        """Re-run the drain of ``sock``: a socket call may have eaten its fd signal."""
        key = id(sock)

        def kick() -> None:
            drain = self._drainers.get(key)
            if drain is not None and self._loop is not None:
                self._loop.call_soon(drain)

        return kick

    async def _reader(
        self,
        sock: zmq.Socket[bytes],
        drain: Callable[[zmq.Socket[bytes]], int],
        safety: float | None,
    ) -> None:
        """Own the drain of ``sock`` for the node's lifetime.

        The drain runs straight from the loop's fd callback, ``BATCH`` frames at a
        time; a full batch re-schedules it with ``call_soon`` so other callbacks and
        tasks run in between. ``safety`` re-runs it at that interval, for sockets that
        other code sends on. An exception in the callback ends this task with it.
        """
        loop = asyncio.get_running_loop()
        key = id(sock)
        fd = cast(int, sock.getsockopt(zmq.FD))
        fault: list[BaseException] = []
        woken = asyncio.Event()

        def on_readable() -> None:
            if sock.closed or fault:
                return
            try:
                if drain(sock) >= BATCH:
                    loop.call_soon(on_readable)
            except Exception as exc:
                fault.append(exc)
                woken.set()

        self._drainers[key] = on_readable
        loop.add_reader(fd, on_readable)
        try:
            on_readable()  # frames that arrived before the reader was registered
            while not fault:
                with anyio.move_on_after(3600.0 if safety is None else safety):
                    await woken.wait()
                on_readable()
            raise fault[0]
        finally:
            loop.remove_reader(fd)
            self._drainers.pop(key, None)

    def _drain_interest(self, sock: zmq.Socket[bytes]) -> int:
        n = 0
        changed = False
        apply = self._interest.apply
        recv: Callable[[int], bytes] = sock.recv
        curve = self._curve
        if curve is not None and curve.gate is not None:  # subscribe permissions
            def recv(flags: int) -> bytes:  # the gated read
                return curve.read_subscription(sock, flags)

        try:
            while n < BATCH:
                if apply(recv(zmq.NOBLOCK)):
                    changed = True
                n += 1
        except zmq.Again:
            pass
        except zmq.ZMQError as exc:
            drain_error(exc, "reading subscriptions on the data publisher",
                        closing=self.receive.closing)
        finally:
            if changed:
                self.interest_changed.set()
                self.on_interest()
            self.send.room()  # any XPUB event may mean room again: re-check
        return n

    def send_control(self, frame: bytes) -> bool:
        """Send one of aoz's control frames (a publisher heartbeat) now or not at all:
        False when the publisher is closed or, with ``send_policy="block"``, a
        subscriber's queue is full. Never waits, never counted as a publish."""
        pub = self._pub
        if pub is None or pub.closed or self.receive.closing:
            return False
        try:
            with mapped("cannot send a heartbeat"):
                try:
                    pub.send(frame, zmq.NOBLOCK)
                except zmq.Again:
                    return False
        finally:
            self._kick_pub()  # the send may have taken the XPUB's fd signal
        return True

    def read_interest(self) -> None:
        """Fold in the subscription events waiting on the XPUB now."""
        if self._pub is not None and not self._pub.closed:
            self._drain_interest(self._pub)

    # ------------------------------------------------------------------ filters
    def add_filter(self, prefix: bytes) -> None:
        """Subscribe the data SUB to frames starting with ``prefix``."""
        assert self._sub is not None
        with mapped("cannot subscribe"):
            self._sub.setsockopt(zmq.SUBSCRIBE, prefix)
        self.receive.kick()

    def remove_filter(self, prefix: bytes) -> None:
        if self._sub is None or self._sub.closed or self.receive.closing:
            return
        with mapped("cannot unsubscribe"):
            self._sub.setsockopt(zmq.UNSUBSCRIBE, prefix)
        self.receive.kick()
