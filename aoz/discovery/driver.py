"""Runs the naming state machine (:mod:`aoz.discovery.state`) on the node's event loop.

The node starts a driver in its task group and waits until it is ready::

    driver = NamingDriver(settings)
    await tg.start(driver.run, links)    # returns once our own C came back
    ...
    await driver.goodbye()               # sends D; then the node cancels run()

Sockets (SPEC §5): a naming SUB subscribed to ``_NAMING`` and connected to every nsd
in ``settings.naming`` (ZeroMQ reconnects it every ``reconnect_interval`` and notices
a dead nsd through heartbeats), and a naming PUB connected to the XSUB endpoint named
by each welcome. Everything the state machine decides is applied to the node's
:class:`~aoz.discovery.links.DataLinks`. Malformed naming input is counted and dropped.

:class:`DriverCore` holds what the naming and UDP drivers share: the peer table,
counters, the tick loop and how actions are applied.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.lowlevel
import zmq
import zmq.asyncio
from anyio.abc import TaskStatus
from zmq.utils.monitor import parse_monitor_message

from .._errmap import mapped, tolerated
from ..config import Settings
from ..endpoints import ipc_mesh
from ..errors import AozError, DecodeError, NamingTimeout
from ..protocol.naming import NamingType, decode_naming, encode_naming
from ..sockopts import GUARD_EVENTS, HANDSHAKE_FAILED, HandshakeGuard, apply_naming_options
from .peers import Peer, PeerEvent
from .state import (
    Action,
    ConnectData,
    ConnectNamingPub,
    DisconnectData,
    Failed,
    NamingState,
    PeerExpired,
    PeerJoined,
    PeerLeft,
    Ready,
    SendNaming,
)

if TYPE_CHECKING:
    from .links import DataLinks

__all__ = ["DriverCore", "NamingDriver", "flush_naming", "naming_context"]

log = logging.getLogger("aoz.discovery")

_context: zmq.asyncio.Context | None = None


def naming_context() -> zmq.asyncio.Context:
    """The ZeroMQ context of every naming socket in this process (aoz's own, not pyzmq's
    global instance, so :func:`flush_naming` touches nothing of the application's)."""
    global _context  # one context per process, made on first use
    if _context is None or _context.closed:
        _context = zmq.asyncio.Context()
    return _context


def flush_naming(linger_ms: int) -> None:
    """At process exit: let a just-sent ``D`` leave (up to ``linger_ms``), then end the
    naming context. Without it, exiting discards what its sockets still queue. Data
    sockets need no such call: each node terminates its own context when it closes."""
    global _context
    ctx, _context = _context, None
    if ctx is not None and not ctx.closed:
        ctx.destroy(linger=linger_ms)

_NAMING = b"_NAMING"
_BATCH = 512  # naming frames handled per wake-up before yielding to the loop
_HWM = 100_000  # a full mesh forming sends O(n^2) naming frames at once


class DriverCore:
    """The transport-independent half of a discovery driver."""

    #: "naming" or "udp"; used in log and error messages
    kind = "naming"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._state: NamingState | None = None
        self._links: DataLinks | None = None
        self._ready = anyio.Event()
        self._failed: Failed | None = None
        self._counters: dict[str, int] = {"naming_out": 0, "naming_decode_errors": 0}
        self._next_link_check = 0.0
        self._wall_offset = time.time() - time.monotonic()

    # ---------------------------------------------------------------- public views

    @property
    def peers(self) -> list[Peer]:
        """Every node discovery knows, this one included (as OZ records itself)."""
        return [] if self._state is None else self._state.peers

    def statistics(self) -> dict[str, int]:
        """Counters: naming_in, naming_out, naming_malformed, welcomes, peers_expired..."""
        out = dict(self._counters)
        if self._state is not None:
            for key, value in self._state.counters.items():
                out[key] = out.get(key, 0) + value
        # decode failures are malformed input too
        out["naming_malformed"] = out.get("naming_malformed", 0) + out["naming_decode_errors"]
        return out

    # ---------------------------------------------------------------- helpers

    def _make_state(self, links: DataLinks, *, require_welcome: bool) -> NamingState:
        s = self.settings
        return NamingState(
            uuid=links.uuid,
            endpoint=links.endpoint,
            program=links.program,
            host=links.host,
            pid=links.pid,
            connect_interval=s.connect_interval,
            connect_retries=s.connect_retries,
            beacon_interval=s.beacon_interval,
            expire_beacons=s.expire_beacons,
            require_welcome=require_welcome,
            wall_offset=self._wall_offset,
            allow_ipc=ipc_mesh(s),
        )

    def _send(self, ftype: NamingType) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _connect_naming(self, endpoint: str) -> None:
        """Only the nsd driver gets welcomes; others ignore them."""

    def _apply(self, actions: list[Action]) -> None:
        links = self._links
        assert links is not None
        sent: set[NamingType] = set()  # one C per batch is enough, however many joined
        for action in actions:
            match action:
                case SendNaming(type=ftype):
                    if ftype not in sent:
                        sent.add(ftype)
                        self._send(ftype)
                case ConnectData(endpoint=ep):
                    links.connect_peer(ep)
                case DisconnectData(endpoint=ep):
                    links.disconnect_peer(ep)
                case PeerJoined(peer=peer):
                    log.info("%s peer joined: %s %s", self.kind, peer.uuid, peer.endpoint)
                    links.peer_event(PeerEvent(kind="joined", peer=peer))
                case PeerLeft(peer=peer):
                    log.info("%s peer left: %s %s", self.kind, peer.uuid, peer.endpoint)
                    links.peer_event(PeerEvent(kind="left", peer=peer))
                case PeerExpired(peer=peer):
                    log.info("%s peer expired: %s %s", self.kind, peer.uuid, peer.endpoint)
                    links.peer_event(PeerEvent(kind="expired", peer=peer))
                case ConnectNamingPub(endpoint=ep):
                    self._connect_naming(ep)
                case Ready():
                    self._ready.set()
                case Failed():
                    self._failed = action
                    self._ready.set()

    def _decode_batch(
        self, batch: list[bytes], decode: Callable[[bytes], Any], now: float
    ) -> list[Action]:
        state = self._state
        assert state is not None
        links = self._links
        assert links is not None
        actions: list[Action] = []
        for raw in batch:
            try:
                frame = decode(raw)
            except DecodeError as exc:
                self._counters["naming_decode_errors"] += 1
                log.debug("dropped malformed %s input: %s", self.kind, exc)
                continue
            if frame.type is NamingType.WELCOME:
                self._poll_connections(now)
            elif state.knows_endpoint(frame.endpoint):
                # a D or a second uuid for a known endpoint is judged by the data link
                # (see state.py): tell the machine what that link is doing right now
                ep = frame.endpoint
                actions.extend(state.link_state(ep, links.link_up(ep), now))
            actions.extend(state.received(frame, now))
        return actions

    def _poll_connections(self, now: float) -> None:
        """Report naming-subscription (re)connections; only the nsd driver has any."""

    def _tick(self) -> None:
        state = self._state
        links = self._links
        assert state is not None and links is not None
        now = time.monotonic()
        self._poll_connections(now)
        actions: list[Action] = []
        if now >= self._next_link_check:
            self._next_link_check = now + min(state.expire_window / 3, 0.5)
            for ep in state.peer_endpoints():
                actions.extend(state.link_state(ep, links.link_up(ep), now))
        actions.extend(state.tick(now))
        self._apply(actions)

    async def _tick_loop(self, task_status: TaskStatus[None]) -> None:
        """Tick until stopped; report readiness once, return on failure."""
        interval = self.settings.connect_interval
        started = False
        while True:
            if started:
                await anyio.sleep(interval)
            else:
                with anyio.move_on_after(interval):
                    await self._ready.wait()
            self._tick()
            if self._failed is not None:
                return
            if not started and self._ready.is_set():
                started = True
                task_status.started()

    async def goodbye(self) -> None:
        """Send ``D`` so peers disconnect at once (best effort; the socket lingers)."""
        if self._state is None:
            return
        self._apply(self._state.stop())


class NamingDriver(DriverCore):
    """Discovery through one or more naming daemons (SPEC §5).

    >>> driver = NamingDriver(Settings(naming=["tcp://127.0.0.1:5756"]))
    >>> driver.peers
    []
    """

    kind = "naming"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._pub: zmq.Socket[bytes] | None = None
        self._frames: dict[NamingType, bytes] = {}
        self._monitors: list[tuple[zmq.Socket[bytes], HandshakeGuard]] = []
        self._sub_mon: zmq.Socket[bytes] | None = None
        self._xsub_up: dict[str, bool] = {}  # naming PUB link per nsd XSUB endpoint

    def _poll_connections(self, now: float) -> None:
        """Feed the naming sockets' monitor events to the state machine and the guards.

        A handshake that succeeded on the naming SUB vouches for the one ``W`` the nsd
        sends on that connection (state.py). Called before any ``W`` is judged: libzmq
        reports the handshake before it delivers the connection's first frame.
        """
        state = self._state
        for mon, guard in self._monitors:
            # the monitors close with the driver; a read after that has nothing to tell
            with tolerated("cannot read the naming monitor", "the driver is closing"):
                try:
                    while True:
                        ev = parse_monitor_message(mon.recv_multipart(zmq.NOBLOCK))
                        event = ev["event"]
                        raw = ev["endpoint"]
                        endpoint = raw.decode() if isinstance(raw, bytes) else ""
                        guard.event(event, endpoint, now)
                        if mon is not self._sub_mon:  # the naming PUB: which XSUBs are up
                            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                                self._xsub_up[endpoint] = True
                            elif event == zmq.EVENT_DISCONNECTED or event in HANDSHAKE_FAILED:
                                self._xsub_up[endpoint] = False
                        ours = mon is self._sub_mon and state is not None
                        if ours and event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                            assert state is not None
                            state.subscription_connected(now)
                except zmq.Again:  # flow control: no more events queued
                    pass
                except (ValueError, KeyError) as exc:  # an event libzmq's parser rejects
                    log.debug("naming monitor: malformed event: %s", exc)
            guard.tick(now)

    def _wanted_naming(self, is_sub: bool) -> Callable[[str], bool]:
        if is_sub:
            return lambda ep: ep in self.settings.naming
        return lambda ep: self._state is not None and ep in self._state.xsub_endpoints

    def _send(self, ftype: NamingType) -> None:
        assert self._state is not None
        if self._pub is None:
            return
        data = self._frames.get(ftype)
        if data is None:
            data = self._frames[ftype] = encode_naming(self._state.frame(ftype))
        # a PUB drops at its HWM instead of failing, so a failure is a closed socket
        with tolerated("cannot send a naming frame", "the naming PUB is closing"):
            self._pub.send(data, zmq.NOBLOCK)
            self._counters["naming_out"] += 1

    def _connect_naming(self, endpoint: str) -> None:
        if self._pub is None:
            return
        self._drop_dead_xsubs(endpoint)
        try:
            with mapped(f"cannot connect the naming PUB to the nsd XSUB {endpoint}"):
                self._pub.connect(endpoint)
            log.debug("naming PUB connected to nsd XSUB %s", endpoint)
        except AozError as exc:  # one bad welcome must not stop the node: count, go on
            self._counters["naming_connect_errors"] = (
                self._counters.get("naming_connect_errors", 0) + 1
            )
            log.warning("%s", exc)

    def _drop_dead_xsubs(self, new: str) -> None:
        """A new welcome: an XSUB we were told about earlier whose link is down belongs to
        an nsd that restarted (a restart gives a new XSUB port). Disconnect it, or the
        naming PUB would keep reconnecting to a dead port for ever."""
        if self._pub is None or self._state is None:
            return
        for old in self._state.xsub_endpoints:
            if old != new and not self._xsub_up.get(old, False):
                with tolerated(f"cannot disconnect the naming PUB from {old}",
                               "libzmq may have dropped the dead link already"):
                    self._pub.disconnect(old)
                self._state.forget_xsub(old)
                self._xsub_up.pop(old, None)
                self._counters["xsubs_dropped"] = self._counters.get("xsubs_dropped", 0) + 1
                log.info("naming PUB dropped %s (its nsd restarted on a new XSUB)", old)

    async def run(
        self, links: DataLinks, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Join the mesh and keep the peer table; ``task_status.started()`` once ready.

        Raises :class:`aoz.NamingTimeout` when no nsd forwards our ``C`` within
        ``connect_retries x connect_interval`` seconds.
        """
        s = self.settings
        self._links = links
        self._state = state = self._make_state(links, require_welcome=True)
        # The naming sockets live in their own context (not the data sockets' one):
        # naming must keep working even if a data socket misbehaves in its io thread.
        actx = naming_context()
        sub = actx.socket(zmq.SUB)
        pub: zmq.Socket[bytes] = zmq.Context.shadow(actx.underlying).socket(zmq.PUB)
        monitors: list[zmq.Socket[bytes]] = []
        try:
            apply_naming_options(sub, s, hwm=_HWM)
            apply_naming_options(pub, s, hwm=_HWM)
            for sock in (sub, pub):
                mon: zmq.Socket[bytes] = zmq.Context.shadow(actx.underlying).socket(zmq.PAIR)
                monitors.append(mon)
                endpoint = f"inproc://aoz-naming-monitor-{id(sock):x}"
                sock.monitor(endpoint, GUARD_EVENTS)
                mon.connect(endpoint)
                wanted = self._wanted_naming(sock is sub)
                self._monitors.append((mon, HandshakeGuard(sock, s, wanted=wanted)))
            self._sub_mon = monitors[0]
            sub.setsockopt(zmq.LINGER, 0)
            pub.setsockopt(zmq.LINGER, int(max(s.linger, 0.1) * 1000))
            sub.setsockopt(zmq.SUBSCRIBE, _NAMING)
            for ep in s.naming:
                with mapped(f"cannot connect to naming daemon {ep}"):
                    sub.connect(ep)
            self._pub = pub
            self._apply(state.start(time.monotonic()))
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._receive, sub, name="aoz-naming-recv")
                await self._tick_loop(task_status)
                tg.cancel_scope.cancel()
        finally:
            self._pub = None
            self._monitors = []
            for sock in (sub, pub):
                with tolerated("cannot stop a naming socket's monitor",
                               "the monitor may not have started"):
                    sock.disable_monitor()
            for mon in monitors:
                mon.close(linger=0)
            sub.close(linger=0)
            pub.close()  # keeps the socket's linger so a just-sent D still leaves
        if self._failed is not None:
            timeout = s.connect_retries * s.connect_interval
            where = ", ".join(s.naming)
            if self._failed.welcomed:
                msg = (
                    f"the naming daemon at {where} welcomed this node but did not forward its "
                    f"announcement within {timeout:.1f} s; check that the nsd's XSUB address "
                    f"({', '.join(state.xsub_endpoints)}) is reachable from this host"
                )
            else:
                msg = (
                    f"no naming daemon answered at {where} within {timeout:.1f} s; "
                    "start one with `aoz nsd`"
                )
            raise NamingTimeout(msg, endpoints=list(s.naming), timeout=timeout)

    async def _receive(self, sub: zmq.asyncio.Socket) -> None:
        while True:
            first = await sub.recv()
            batch = [first]
            try:
                while len(batch) < _BATCH:
                    # a NOBLOCK recv on an asyncio socket is a future that is already done
                    ready = cast("asyncio.Future[bytes]", sub.recv(zmq.NOBLOCK))
                    batch.append(ready.result())
            except zmq.Again:
                pass
            self._apply(self._decode_batch(batch, decode_naming, time.monotonic()))
            await anyio.lowlevel.checkpoint()  # let the node's own tasks run between bursts
