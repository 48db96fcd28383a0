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

from ..config import Settings
from ..errors import DecodeError, NamingTimeout, TransportError
from ..protocol.naming import NamingType, decode_naming, encode_naming
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

__all__ = ["DriverCore", "NamingDriver"]

log = logging.getLogger("aoz.discovery")

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
                    log.debug("%s peer joined: %s %s", self.kind, peer.uuid, peer.endpoint)
                    links.peer_event(PeerEvent(kind="joined", peer=peer))
                case PeerLeft(peer=peer):
                    log.debug("%s peer left: %s %s", self.kind, peer.uuid, peer.endpoint)
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
        actions: list[Action] = []
        for raw in batch:
            try:
                frame = decode(raw)
            except DecodeError as exc:
                self._counters["naming_decode_errors"] += 1
                log.debug("dropped malformed %s input: %s", self.kind, exc)
                continue
            actions.extend(state.received(frame, now))
        return actions

    def _tick(self) -> None:
        state = self._state
        links = self._links
        assert state is not None and links is not None
        now = time.monotonic()
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

    def _socket_options(self, sock: zmq.Socket[Any]) -> None:
        s = self.settings
        sock.setsockopt(zmq.SNDHWM, _HWM)
        sock.setsockopt(zmq.RCVHWM, _HWM)
        sock.setsockopt(zmq.RECONNECT_IVL, max(1, int(s.reconnect_interval * 1000)))
        if s.heartbeat_interval > 0:
            ms = max(1, int(s.heartbeat_interval * 1000))
            sock.setsockopt(zmq.HEARTBEAT_IVL, ms)
            sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3 * ms)
            sock.setsockopt(zmq.HEARTBEAT_TTL, 3 * ms)

    def _send(self, ftype: NamingType) -> None:
        assert self._state is not None
        if self._pub is None:
            return
        data = self._frames.get(ftype)
        if data is None:
            data = self._frames[ftype] = encode_naming(self._state.frame(ftype))
        try:
            self._pub.send(data, zmq.NOBLOCK)
            self._counters["naming_out"] += 1
        except zmq.ZMQError as exc:  # PUB drops at the HWM instead; this is a closed socket
            log.debug("naming send failed: %s", exc)

    def _connect_naming(self, endpoint: str) -> None:
        if self._pub is None:
            return
        try:
            self._pub.connect(endpoint)
            log.debug("naming PUB connected to nsd XSUB %s", endpoint)
        except zmq.ZMQError as exc:
            self._counters["naming_connect_errors"] = (
                self._counters.get("naming_connect_errors", 0) + 1
            )
            log.warning("cannot connect naming PUB to %s: %s", endpoint, exc)

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
        actx = zmq.asyncio.Context.instance()
        sub = actx.socket(zmq.SUB)
        pub: zmq.Socket[bytes] = zmq.Context.shadow(actx.underlying).socket(zmq.PUB)
        try:
            self._socket_options(sub)
            self._socket_options(pub)
            sub.setsockopt(zmq.LINGER, 0)
            pub.setsockopt(zmq.LINGER, int(max(s.linger, 0.1) * 1000))
            sub.setsockopt(zmq.SUBSCRIBE, _NAMING)
            for ep in s.naming:
                try:
                    sub.connect(ep)
                except zmq.ZMQError as exc:
                    raise TransportError(
                        f"cannot connect to naming daemon {ep}: {exc}; "
                        "give tcp://host:port addresses in `naming`"
                    ) from exc
            self._pub = pub
            self._apply(state.start(time.monotonic()))
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._receive, sub, name="aoz-naming-recv")
                await self._tick_loop(task_status)
                tg.cancel_scope.cancel()
        finally:
            self._pub = None
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
