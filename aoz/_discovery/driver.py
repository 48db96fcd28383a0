"""Runs the naming state machine (:mod:`aoz._discovery.state`) on the node's event loop.

The node starts a driver in its task group and waits until it is ready::

    driver = NamingDriver(settings)
    await tg.start(driver.run, links)    # returns once our own C came back
    ...
    await driver.goodbye()               # sends D; then the node cancels run()

Sockets (SPEC §5): a naming SUB subscribed to ``_NAMING`` and connected to every nsd
in ``settings.naming`` (ZeroMQ reconnects it every ``reconnect_interval`` and notices
a dead nsd through heartbeats), and a naming PUB connected to the XSUB endpoint named
by each welcome. Everything the state machine decides is applied to the node's
:class:`~aoz._discovery.links.DataLinks`. Malformed naming input is counted and dropped.

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

from .._mesh.endpoints import ipc_mesh
from .._mesh.errmap import mapped, tolerated, translate
from .._mesh.identity import IdentityTable
from .._mesh.sockopts import (
    GUARD_EVENTS,
    HANDSHAKE_FAILED,
    HandshakeGuard,
    apply_naming_options,
    finish_disconnects,
)
from .._protocol.naming import NamingType, decode_naming, encode_naming
from ..config import Settings
from ..errors import AozError, DecodeError, NamingTimeout
from .peers import Peer, PeerEvent
from .state import (
    Action,
    ConnectData,
    ConnectNamingPub,
    DisconnectData,
    DropNamingConnection,
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
#: naming PUB events that say an nsd's XSUB is not reachable now
_XSUB_DOWN = frozenset((zmq.EVENT_DISCONNECTED, zmq.EVENT_CONNECT_RETRIED, *HANDSHAKE_FAILED))


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
        #: curve_identity: the listed keys' identities; an announcement of a uuid no
        #: listed key owns is refused (``identity_refused``)
        self._identities = (
            IdentityTable({*(settings.curve_allow or ()), settings.curve_public or ""} - {""})
            if settings.curve_identity else None
        )

    # ---------------------------------------------------------------- public views

    @property
    def peers(self) -> list[Peer]:
        """Every node discovery knows, this one included (as OZ records itself)."""
        return [] if self._state is None else self._state.peers

    def uuid_at(self, endpoint: str) -> str | None:
        """The uuid announced at a data endpoint (:meth:`NamingState.uuid_at`)."""
        return None if self._state is None else self._state.uuid_at(endpoint)

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
            allow_ipc=ipc_mesh(s),
            wall_offset=self._wall_offset,
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
                case DropNamingConnection():
                    pass  # the receiving loop that judged the frame does it
                case Ready():
                    self._ready.set()
                case Failed():
                    self._failed = action
                    self._ready.set()

    def _decode_batch(
        self, batch: list[bytes], decode: Callable[[bytes], Any], now: float,
        *, first: bool = False,
    ) -> list[Action]:
        """Decode and judge a batch; ``first``: its first frame is the first of its
        naming connection (the only place a ``W`` is believed)."""
        state = self._state
        assert state is not None
        links = self._links
        assert links is not None
        actions: list[Action] = []
        for i, raw in enumerate(batch):
            try:
                frame = decode(raw)
            except DecodeError as exc:
                self._counters["naming_decode_errors"] += 1
                log.debug("dropped malformed %s input: %s", self.kind, exc)
                continue
            if (self._identities is not None and frame.type is not NamingType.WELCOME
                    and self._identities.key_of_uuid(frame.uuid) is None):
                self._counters["identity_refused"] = self._counters.get("identity_refused", 0) + 1
                log.debug("refused %s input from %s: no listed key owns that uuid",
                          self.kind, frame.uuid)
                continue
            if frame.type is not NamingType.WELCOME and state.knows_endpoint(frame.endpoint):
                # a D or a second uuid for a known endpoint is judged by the data link
                # (see state.py): tell the machine what that link is doing right now
                ep = frame.endpoint
                actions.extend(self._link_state(ep, now))
            actions.extend(state.received(frame, now, first=first and i == 0))
        return actions

    def _link_state(self, endpoint: str, now: float) -> list[Action]:
        """Tell the state machine what the data link to ``endpoint`` is doing now."""
        state, links = self._state, self._links
        assert state is not None and links is not None
        up = links.link_up(endpoint)
        return state.link_state(endpoint, up, now, silent=links.link_silent(endpoint))

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
                actions.extend(self._link_state(ep, now))
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

    def links_changed(self) -> None:
        """A data link's state changed (the node calls this as it happens): check the
        links at the next tick, so a peer whose link came back is listed again within
        ``connect_interval`` instead of the periodic check's 0.5 s."""
        self._next_link_check = 0.0

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
        self._monitors: list[tuple[zmq.Socket[bytes], HandshakeGuard]] = []  # naming PUB
        self._subs: list[_NamingSub] = []  # one naming SUB per nsd
        self._xsub_up: dict[str, bool] = {}  # naming PUB link per nsd XSUB endpoint

    def _poll_connections(self, now: float) -> None:
        """Feed the naming sockets' monitor events to the guards and the link tables.

        A naming SUB whose established connection dropped (its nsd stopped or
        restarted) is replaced by a fresh socket, so that the nsd's next welcome is
        the first frame of a socket, the only place a ``W`` is believed (state.py).
        """
        self._poll_pub(now)
        for conn in self._subs:
            conn.poll(now)
        if self._pub is not None:  # only sent on now and then: see sockopts
            finish_disconnects(self._pub)

    def _poll_pub(self, now: float) -> None:
        """The naming PUB's monitor: its guard, and which nsd XSUBs are up (a link that
        dropped, failed its handshake or is being retried is down; one not yet
        reported either way is neither)."""
        for mon, guard in self._monitors:
            for event, endpoint in _events(mon):
                guard.event(event, endpoint, now)
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self._xsub_up[endpoint] = True
                elif event in _XSUB_DOWN:
                    self._xsub_up[endpoint] = False
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
        self._poll_pub(time.monotonic())
        for old in self._state.xsub_endpoints:
            if old != new and self._xsub_up.get(old) is False:
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
        pub: zmq.Socket[bytes] = zmq.Context.shadow(actx.underlying).socket(zmq.PUB)
        mon: zmq.Socket[bytes] | None = None
        try:
            apply_naming_options(pub, s, hwm=_HWM)
            mon = _monitor(pub)
            guard = HandshakeGuard(pub, s, wanted=self._wanted_naming(False))
            self._monitors.append((mon, guard))
            pub.setsockopt(zmq.LINGER, int(max(s.linger, 0.1) * 1000))
            for ep in s.naming:
                self._subs.append(_NamingSub(ep, s))
            self._pub = pub
            self._apply(state.start(time.monotonic()))
            async with anyio.create_task_group() as tg:
                for conn in self._subs:
                    tg.start_soon(self._receive, conn, name="aoz-naming-recv")
                await self._tick_loop(task_status)
                tg.cancel_scope.cancel()
        finally:
            self._pub = None
            self._monitors = []
            for conn in self._subs:
                conn.close()
            self._subs = []
            with tolerated("cannot stop the naming PUB's monitor",
                           "the monitor may not have started"):
                pub.disable_monitor()
            if mon is not None:
                mon.close(linger=0)
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

    async def _receive(self, conn: _NamingSub) -> None:
        """Read one nsd's naming SUB for ever; open it afresh whenever it must be
        replaced (its connection dropped, or it delivered a ``W`` after its first
        frame although it reconnected: the nsd's new welcome)."""
        while True:
            with anyio.CancelScope() as conn.scope:
                await self._read(conn)
            conn.reopen()
            self._counters["naming_reopened"] = self._counters.get("naming_reopened", 0) + 1

    async def _read(self, conn: _NamingSub) -> None:
        sub = conn.sock
        while True:
            first_frame = await sub.recv()
            batch = [first_frame]
            try:
                while len(batch) < _BATCH:
                    # a NOBLOCK recv on an asyncio socket is a future that is already done
                    ready = cast("asyncio.Future[bytes]", sub.recv(zmq.NOBLOCK))
                    batch.append(ready.result())
            except zmq.Again:
                pass
            now = time.monotonic()
            first, conn.first = conn.first, False
            actions = self._decode_batch(batch, decode_naming, now, first=first)
            self._apply(actions)
            if any(isinstance(a, DropNamingConnection) for a in actions):
                conn.poll(now)  # libzmq reports a handshake before its first frame
                if conn.reconnected:
                    return  # a refused W on a reconnected socket: the nsd's new welcome
            await anyio.lowlevel.checkpoint()  # let the node's own tasks run between bursts


def _monitor(sock: zmq.Socket[Any]) -> zmq.Socket[bytes]:
    """A PAIR receiving ``sock``'s guard events (a plain socket: polled, never awaited)."""
    shared = naming_context().underlying
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.shadow(shared)
    mon: zmq.Socket[bytes] = ctx.socket(zmq.PAIR)
    endpoint = f"inproc://aoz-naming-monitor-{id(sock):x}"
    sock.monitor(endpoint, GUARD_EVENTS)
    mon.connect(endpoint)
    return mon


def _events(mon: zmq.Socket[bytes]) -> list[tuple[int, str]]:
    """The monitor events waiting on ``mon`` (bounded by what is queued)."""
    out: list[tuple[int, str]] = []
    try:
        for _ in range(100_000):
            ev = parse_monitor_message(mon.recv_multipart(zmq.NOBLOCK))
            raw = ev["endpoint"]
            out.append((int(ev["event"]), raw.decode() if isinstance(raw, bytes) else ""))
    except zmq.Again:  # flow control: no more events queued
        pass
    except zmq.ZMQError as exc:  # the monitor closed with its socket: nothing to tell
        log.debug("%s", translate(exc, "naming monitor"))
    except (ValueError, KeyError, RuntimeError) as exc:  # an event the parser rejects
        log.debug("naming monitor: malformed event: %s", exc)
    return out


class _NamingSub:
    """The naming SUB of one nsd, as a socket of its own, so that "the first frame of
    this socket" names one connection: the only frame that may be a believed ``W``.

    ``reconnected``: libzmq re-established the connection under this socket (the nsd
    restarted): its next welcome cannot be the socket's first frame, so the socket is
    replaced (``reopen``). A refused ``W`` on a socket that did not reconnect is a
    forgery relayed by a working nsd: counted, and the socket kept.
    """

    def __init__(self, endpoint: str, settings: Settings) -> None:
        self.endpoint = endpoint
        self.settings = settings
        self.scope: anyio.CancelScope | None = None
        self.sock, self.mon, self.guard = self._open()
        self.first = True  # no frame read yet
        self.handshakes = 0
        self.reconnected = False

    def _open(self) -> tuple[zmq.asyncio.Socket, zmq.Socket[bytes], HandshakeGuard]:
        s = self.settings
        sock = naming_context().socket(zmq.SUB)
        try:
            with mapped(f"cannot connect to naming daemon {self.endpoint}"):
                apply_naming_options(sock, s, hwm=_HWM)
                sock.setsockopt(zmq.LINGER, 0)
                mon = _monitor(sock)
                guard = HandshakeGuard(sock, s, wanted=lambda ep: ep == self.endpoint)
                sock.setsockopt(zmq.SUBSCRIBE, _NAMING)
                sock.connect(self.endpoint)
        except AozError:
            sock.close(linger=0)
            raise
        return sock, mon, guard

    def poll(self, now: float) -> None:
        """Monitor events: the guard's, and whether the connection was re-established
        (a drop after a handshake, or a second handshake)."""
        for event, endpoint in _events(self.mon):
            self.guard.event(event, endpoint, now)
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.handshakes += 1
                if self.handshakes > 1:
                    self.reconnected = True
            elif event == zmq.EVENT_DISCONNECTED and self.handshakes:
                self.reconnected = True
        if self.reconnected and self.scope is not None:
            self.scope.cancel()  # the reading task reopens the socket
        self.guard.tick(now)

    def reopen(self) -> None:
        self.close()
        self.sock, self.mon, self.guard = self._open()
        self.first, self.handshakes, self.reconnected = True, 0, False

    def close(self) -> None:
        with tolerated("cannot stop a naming SUB's monitor", "the monitor may be gone"):
            self.sock.disable_monitor()
        self.mon.close(linger=0)
        self.sock.close(linger=0)
