"""The node: aoz's I/O layer over the pure protocol core.

Theory of operation
-------------------
A node has two data sockets, as in OZ: an XPUB that publishers' frames leave from
(bound; peers' SUBs connect to it) and a SUB that connects to every peer's PUB,
itself included (self-delivery). The XPUB is an XPUB rather than a plain PUB so the
node sees which subscription filters have reached it: that is what
:meth:`Node.wait_for_interest` waits on and how :meth:`Node.request` fails fast with
:class:`~aoz.NoResponders`.

Everything runs on one asyncio loop. The node starts one root task that owns an anyio
task group; every other task of the node (the receive loop, the interest loop, the
housekeeping loop, the discovery driver) lives in that group, and closing the node
cancels and awaits them all. The root task exists so that a node may be opened in
one task and closed in another (pytest fixtures, FastAPI lifespans) without tying
anyio cancel scopes to the caller's task.

Receiving does not pay an await per message. ZeroMQ exposes a file descriptor that
signals "look at ZMQ_EVENTS"; the loop watches it with ``add_reader`` and the receive
task, once woken, drains up to ``_BATCH`` frames with non-blocking ``recv`` calls,
parses each and pushes it into every matching subscription's bounded queue. The
descriptor is edge-like: any socket call (connect, subscribe) may consume the
signal, so every such call is followed by a kick that re-runs the drain.

Publishing never waits either: a PUB/XPUB socket does not block on send (ZeroMQ
drops for a subscriber whose high-water mark is full), so ``publish`` encodes, sends
and returns; every ``_YIELD_EVERY`` sends it yields once so a tight publishing loop
cannot starve the receive task.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, cast

import anyio
import msgspec
import zmq
from zmq.utils.monitor import parse_monitor_message

from .config import Overflow, Settings, load_settings
from .discovery.peers import Peer, PeerEvent
from .errors import (
    AozError,
    ClosedError,
    DecodeError,
    NoResponders,
    RequestTimeout,
    SubjectError,
    TransportError,
    WaitTimeout,
)
from .message import Message
from .protocol.codecs import Codec, encode_payload
from .protocol.frames import Kind, decode_frame, encode_reply, encode_request, publish_header
from .protocol.inbox import InboxTable
from .protocol.subjects import compile_pattern, is_reserved, subject_bytes
from .security import ZAP_ENDPOINT, keypair, zap_reply
from .sockopts import DATA_MONITOR_EVENTS, HandshakeGuard, apply_data_options
from .subscription import Mailbox, Subscription, SubscriptionStatistics

__all__ = ["DataLinks", "Node", "NodeStatistics", "PeerEventStream", "ReplyStream", "connect"]

log = logging.getLogger("aoz.node")

_BATCH = 1024  # frames drained per wake-up before yielding to other tasks
_YIELD_EVERY = 256  # publishes between forced yields
_CACHE_MAX = 8192  # subject caches are cleared when they grow past this
_COPY_THRESHOLD = 65536
_KINDS = (None, Kind.PUBLISH, Kind.REQUEST, Kind.REPLY)
_REPLY_QUEUE = 4096
_DISCONNECT_GRACE = 0.5  # seconds a departed peer's data link may still drain
_REPLY_ROUTE_WAIT = 2.0  # seconds a reply waits for the requester's inbox filter


class NodeStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of a node's counters (see :meth:`Node.statistics`)."""

    uuid: str
    mode: str
    messages_in: int
    bytes_in: int
    messages_out: int
    bytes_out: int
    malformed_in: int
    requests: int
    request_timeouts: int
    no_responders: int
    replies_dropped: int
    peers: int
    subscriptions: list[SubscriptionStatistics]
    discovery: dict[str, int]


class DataLinks(Protocol):
    """What a discovery driver may do to the node (see docs/ARCHITECTURE.md)."""

    uuid: str
    endpoint: str
    settings: Settings
    program: str
    host: str
    pid: int

    def connect_peer(self, endpoint: str) -> None: ...
    def disconnect_peer(self, endpoint: str) -> None: ...
    def link_up(self, endpoint: str) -> bool: ...
    def peer_event(self, event: PeerEvent) -> None: ...
    def count(self, counter: str, n: int = 1) -> None: ...


class _Driver(Protocol):
    @property
    def peers(self) -> list[Peer]: ...
    async def run(self, links: Any, *, task_status: Any = ...) -> None: ...
    async def goodbye(self) -> None: ...
    def statistics(self) -> dict[str, int]: ...


class ReplyStream(Mailbox[Message]):
    """Replies to one request, until the deadline or ``max_replies``.

    Both an async iterator and an async context manager::

        async with node.request_many("SVC.quote", b"IBM", timeout=0.5) as replies:
            async for reply in replies:
                ...
    """

    __slots__ = ("_deadline", "_max", "_seen", "subject")

    def __init__(
        self, subject: str, deadline: float, max_replies: int | None, on_close: Callable[[], None]
    ) -> None:
        super().__init__(max_replies or _REPLY_QUEUE, "drop_newest", on_close)
        self.subject = subject
        self._deadline = deadline
        self._max = max_replies
        self._seen = 0

    def __aiter__(self) -> ReplyStream:
        return self

    async def __anext__(self) -> Message:
        if self._max is not None and self._seen >= self._max:
            self.close()
            raise StopAsyncIteration
        remaining = self._deadline - time.monotonic()
        if not self._queue and remaining <= 0:
            self.close()
            raise StopAsyncIteration
        try:
            async with asyncio.timeout(max(remaining, 0.0)):
                msg = await self._get()
        except TimeoutError:
            self.close()
            raise StopAsyncIteration from None
        self._seen += 1
        return msg

    async def __aenter__(self) -> ReplyStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def aclose(self) -> None:
        self.close()

    def __del__(self) -> None:
        # A caller that breaks out of a plain `async for` must not leave its inbox entry.
        if not self._closed:
            self.close()


class Node:
    """A participant in an aoz mesh. Create it with :func:`aoz.connect`.

    >>> async with aoz.connect() as node:  # doctest: +SKIP
    ...     await node.publish("MD.NYSE.IBM", {"bid": 1.0, "ask": 1.1})
    """

    def __init__(self, settings: Settings | None = None, **overrides: Any) -> None:
        self.settings = settings if settings is not None else load_settings(overrides)
        if settings is not None and overrides:
            self.settings = settings.replace(**overrides)
        s = self.settings
        self.uuid = str(uuidlib.uuid4())
        self.program = s.program or _program_name()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.endpoint = ""
        self.endpoints: list[str] = []
        self._closed = False
        self._started = False
        self._runner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

        # CURVE authentication is per context (one ZAP handler each), so a secured node
        # gets a context of its own; every other node shares the process's instance.
        self._curve = s.curve_server_public is not None
        self._ctx: zmq.Context[zmq.Socket[bytes]] = (
            zmq.Context() if self._curve else zmq.Context.instance()
        )
        self._zap: zmq.Socket[bytes] | None = None
        self._curve_allowed: set[str] = set()
        self._pub: zmq.Socket[bytes] | None = None
        self._sub: zmq.Socket[bytes] | None = None
        self._mon: zmq.Socket[bytes] | None = None
        self._fds: list[int] = []
        self._drainers: dict[int, Callable[[], None]] = {}

        self._exact: dict[bytes, tuple[Subscription, ...]] = {}
        self._wild: tuple[Subscription, ...] = ()
        self._subject_cache: dict[bytes, str] = {}
        self._header_cache: dict[str, bytes] = {}
        self._raw_headers: dict[str, bytes] = {}  # header + the raw codec byte
        self._inbox: InboxTable[asyncio.Future[Message] | ReplyStream] = InboxTable(self.uuid)
        self._interest: set[bytes] = set()
        self._interest_changed: asyncio.Event | None = None
        self._peer_listeners: set[Mailbox[PeerEvent]] = set()
        self._connected: set[str] = set()
        self._pending_disconnects: dict[str, asyncio.TimerHandle] = {}
        self._link_state: dict[str, bool] = {}
        self._driver: _Driver | None = None
        self._default_codec = Codec.JSON if s.default_codec == "json" else Codec.MSGPACK
        self._sends_since_yield = 0

        self._messages_in = 0
        self._bytes_in = 0
        self._messages_out = 0
        self._bytes_out = 0
        self._malformed = 0
        self._requests = 0
        self._timeouts = 0
        self._no_responders = 0
        self._replies_dropped = 0
        self._counters: dict[str, int] = {}

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Open sockets, start the node's tasks and (in naming/udp mode) join the mesh.

        Returns once the node is usable; raises :class:`aoz.NamingTimeout` when no
        naming daemon forwards the announcement in time.
        """
        if self._started:
            raise AozError("node already started; create a new node instead")
        self._started = True
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop = asyncio.Event()
        self._interest_changed = asyncio.Event()
        started: asyncio.Future[None] = loop.create_future()
        self._runner = loop.create_task(self._run(started), name=f"aoz-node-{self.uuid[:8]}")
        try:
            await asyncio.shield(started)
        except BaseException:
            self._closed = True
            self._stop.set()
            if not started.done():
                started.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
            raise

    async def _run(self, started: asyncio.Future[None]) -> None:
        try:
            self._open_sockets()
            async with anyio.create_task_group() as tg:
                assert self._sub is not None and self._pub is not None
                tg.start_soon(self._reader, self._sub, self._drain_sub, None, name="aoz-recv")
                tg.start_soon(self._reader, self._pub, self._drain_interest, 0.1, name="aoz-xpub")
                if self._mon is not None:
                    tg.start_soon(self._reader, self._mon, self._drain_monitor, 1.0,
                                  name="aoz-monitor")
                if self._zap is not None:
                    tg.start_soon(self._reader, self._zap, self._drain_zap, 1.0, name="aoz-zap")
                tg.start_soon(self._housekeeping, name="aoz-housekeeping")
                self._driver = self._make_driver()
                if self._driver is not None:
                    await tg.start(self._driver.run, self)
                if not started.done():
                    started.set_result(None)
                assert self._stop is not None
                await self._stop.wait()
                tg.cancel_scope.cancel()
        except BaseException as exc:
            err = _unwrap(exc)
            if not started.done():
                started.set_exception(err)
            elif not isinstance(err, asyncio.CancelledError):
                log.error("aoz node %s failed: %r", self.uuid, err)
                self._shutdown(ClosedError(f"node failed: {err!r}"))
        finally:
            self._close_sockets()

    def _make_driver(self) -> _Driver | None:
        mode = self.settings.mode
        if mode == "naming":
            from .discovery.driver import NamingDriver

            return NamingDriver(self.settings)
        if mode == "udp":
            from .discovery.udp import UdpDriver

            return UdpDriver(self.settings)
        return None

    async def aclose(self) -> None:
        """Leave the mesh and release everything; safe to call twice and from any task.

        Ends every ``async for`` over the node's subscriptions, fails pending requests
        with :class:`aoz.ClosedError`, sends the naming goodbye (``D``) and closes the
        sockets with a short linger.
        """
        if self._runner is None:
            self._closed = True
            return
        if not self._closed:
            self._shutdown(ClosedError("the node was closed while waiting for a reply"))
            if self._driver is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                    try:
                        await self._driver.goodbye()
                    except Exception as exc:  # the goodbye is best effort
                        log.debug("goodbye failed: %r", exc)
        assert self._stop is not None
        self._stop.set()
        with anyio.CancelScope(shield=True):
            await asyncio.gather(self._runner, return_exceptions=True)

    def _shutdown(self, error: ClosedError) -> None:
        """Synchronous part of closing: end consumers and fail waiters."""
        self._closed = True
        subs = {s for group in self._exact.values() for s in group} | set(self._wild)
        for sub in subs:
            sub.close()
        self._exact = {}
        self._wild = ()
        for waiter in self._inbox.drain():
            if isinstance(waiter, ReplyStream):
                waiter.close(error)
            elif not waiter.done():
                waiter.set_exception(error)
        for listener in list(self._peer_listeners):
            listener.close()
        if self._stop is not None:
            self._stop.set()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this node is closed; open a new one with aoz.connect()")
        if self._pub is None:
            raise ClosedError("this node is not started; use `async with aoz.connect() as node`")

    # ------------------------------------------------------------------ sockets
    def _open_sockets(self) -> None:
        s = self.settings
        pub: zmq.Socket[bytes] = self._ctx.socket(zmq.XPUB)
        sub: zmq.Socket[bytes] = self._ctx.socket(zmq.SUB)
        self._pub, self._sub = pub, sub
        if self._curve:
            self._setup_curve(pub, sub)
        # socket options (sizes, handshake timeout, back-off): aoz/sockopts.py
        apply_data_options(pub, sub, s)
        self._guard = HandshakeGuard(sub, s, wanted=self._connected.__contains__, count=self.count)
        self._mon = sub.get_monitor_socket(DATA_MONITOR_EVENTS)  # every mode: back-off
        try:
            if s.mode in ("naming", "udp"):
                self._bind(f"tcp://{s.publish_address}:*")
            elif s.mode == "static":
                for ep in s.bind:
                    self._bind(ep)
                for ep in self.endpoints:  # self-delivery
                    self._connect_sub(_connectable(ep))
                for ep in s.connect:
                    self._connect_sub(ep)
            else:  # broker
                assert s.broker_pub and s.broker_sub
                pub.connect(s.broker_pub)
                self.endpoint = s.broker_pub
                self._connect_sub(s.broker_sub)
            sub.setsockopt(zmq.SUBSCRIBE, self._inbox.prefix[:-1])
        except zmq.ZMQError as exc:
            raise TransportError(f"cannot set up data sockets: {exc}") from exc

    def _setup_curve(self, pub: zmq.Socket[bytes], sub: zmq.Socket[bytes]) -> None:
        s = self.settings
        assert s.curve_server_public and s.curve_server_secret
        public, secret = s.curve_public, s.curve_secret
        if public is None or secret is None:
            public, secret = keypair()
        if s.curve_allow is not None:
            self._curve_allowed = {*s.curve_allow, public}  # self-delivery is always allowed
            zap: zmq.Socket[bytes] = self._ctx.socket(zmq.REP)
            zap.setsockopt(zmq.LINGER, 0)
            zap.bind(ZAP_ENDPOINT)
            self._zap = zap
        pub.setsockopt(zmq.CURVE_SERVER, 1)
        pub.setsockopt(zmq.CURVE_SECRETKEY, s.curve_server_secret.encode("ascii"))
        pub.setsockopt(zmq.ZAP_DOMAIN, b"aoz")
        sub.setsockopt(zmq.CURVE_SERVERKEY, s.curve_server_public.encode("ascii"))
        sub.setsockopt(zmq.CURVE_PUBLICKEY, public.encode("ascii"))
        sub.setsockopt(zmq.CURVE_SECRETKEY, secret.encode("ascii"))

    def _drain_zap(self, sock: zmq.Socket[bytes]) -> int:
        n = 0
        try:
            while n < _BATCH:
                request = sock.recv_multipart(zmq.NOBLOCK)
                n += 1
                reply, allowed = zap_reply(request, self._curve_allowed)
                if not allowed:
                    self.count("auth_denied")
                    log.info("denied a data subscriber: %s", reply[3].decode())
                sock.send_multipart(reply)
        except zmq.Again:
            pass
        except zmq.ZMQError as exc:
            if not self._closed:
                log.warning("authentication socket error: %s", exc)
        return n

    def _bind(self, endpoint: str) -> None:
        assert self._pub is not None
        try:
            self._pub.bind(endpoint)
        except zmq.ZMQError as exc:
            raise TransportError(
                f"cannot bind data publisher to {endpoint!r}: {exc} "
                "(is the address in use or not local?)"
            ) from exc
        last = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.endpoints.append(last)
        if not self.endpoint:
            self.endpoint = last

    def _connect_sub(self, endpoint: str) -> None:
        assert self._sub is not None
        if endpoint in self._connected:
            return
        self._sub.connect(endpoint)
        self._connected.add(endpoint)
        self._kick(self._sub)

    def _close_sockets(self) -> None:
        for handle in self._pending_disconnects.values():
            handle.cancel()
        self._pending_disconnects.clear()
        loop = self._loop
        for fd in self._fds:
            if loop is not None and not loop.is_closed():
                loop.remove_reader(fd)
        self._fds.clear()
        linger = int(self.settings.linger * 1000)
        if self._sub is not None and self._mon is not None and not self._sub.closed:
            # Stop monitoring first: libzmq's I/O thread would otherwise block forever
            # reporting the SUB's disconnects to a monitor nobody reads, freezing every
            # socket of the shared context.
            self._sub.disable_monitor()
        for sock in (self._mon, self._sub, self._pub, self._zap):
            if sock is not None and not sock.closed:
                sock.close(linger=linger)
        if self._curve and not self._ctx.closed:
            self._ctx.term()  # its sockets are closed; waits at most their linger
        self._closed = True

    # ------------------------------------------------------------------ readers
    def _kick(self, sock: zmq.Socket[bytes]) -> None:
        """Re-run the drain of ``sock``: a socket call may have eaten its fd signal."""
        drain = self._drainers.get(id(sock))
        if drain is not None and self._loop is not None:
            self._loop.call_soon(drain)

    async def _reader(
        self,
        sock: zmq.Socket[bytes],
        drain: Callable[[zmq.Socket[bytes]], int],
        safety: float | None,
    ) -> None:
        """Own the drain of ``sock`` for the node's lifetime.

        The drain runs straight from the loop's fd callback, ``_BATCH`` frames at a
        time: a reply or a request is handled in the same loop turn that saw the
        socket become readable, with no hop through a task. A full batch re-schedules
        the drain with ``call_soon`` so other callbacks and tasks run in between.
        ``safety`` also re-runs it at that interval, for sockets that other code sends
        on (a send can consume the fd signal).
        """
        loop = asyncio.get_running_loop()
        key = id(sock)
        fd = cast(int, sock.getsockopt(zmq.FD))

        def on_readable() -> None:
            if sock.closed:
                return
            if drain(sock) >= _BATCH:
                loop.call_soon(on_readable)

        self._drainers[key] = on_readable
        loop.add_reader(fd, on_readable)
        self._fds.append(fd)
        try:
            on_readable()  # frames that arrived before the reader was registered
            while True:
                await asyncio.sleep(3600.0 if safety is None else safety)
                on_readable()
        finally:
            loop.remove_reader(fd)
            self._drainers.pop(key, None)
            if fd in self._fds:
                self._fds.remove(fd)

    def _drain_sub(self, sock: zmq.Socket[bytes]) -> int:
        # The hot path: a publish frame whose subject has exact subscribers costs one
        # find, one slice, one dict lookup and one Message. Everything else goes
        # through _other_frame.
        recv = sock.recv
        noblock = zmq.NOBLOCK
        exact = self._exact
        wild = self._wild
        publish = Kind.PUBLISH
        now = time.time()
        n = 0
        nbytes = 0
        try:
            while n < _BATCH:
                frame = recv(noblock)
                n += 1
                nbytes += len(frame)
                # One search finds the end of a publish frame's header. Exact keys are
                # valid subjects (no NUL), so a hit proves frame[:nul] is the whole
                # subject and the frame is a well-formed publish frame.
                nul = frame.find(b"\0\x01\0", 1, 259)
                subs = exact.get(frame[:nul]) if nul > 0 else None
                if subs is not None:
                    msg = Message(frame, nul, nul + 3, publish, None, now, self)
                    for s in subs:
                        s.push(msg)
                    if wild:
                        self._match_wild(frame, nul, nul + 3, publish, None, now, msg)
                else:
                    self._other_frame(frame, now)
        except zmq.Again:
            pass
        except zmq.ZMQError as exc:
            if not self._closed:
                log.warning("data socket error: %s", exc)
        self._messages_in += n
        self._bytes_in += nbytes
        return n

    def _subject_of(self, sb: bytes) -> str | None:
        cache = self._subject_cache
        subject = cache.get(sb)
        if subject is None:
            try:
                subject = sb.decode()
            except UnicodeDecodeError:
                return None
            if len(cache) >= _CACHE_MAX:
                cache.clear()
            cache[sb] = subject
        return subject

    def _match_wild(
        self,
        frame: bytes,
        nul: int,
        start: int,
        kind: Kind,
        reply: str | None,
        now: float,
        msg: Message | None,
    ) -> None:
        subject = self._subject_of(frame[:nul])
        if subject is None:
            self._malformed += 1
            return
        if is_reserved(subject):
            return
        for w in self._wild:
            if w.pattern.matches(subject):
                if msg is None:
                    msg = Message(frame, nul, start, kind, reply, now, self, subject)
                w.push(msg)

    def _other_frame(self, frame: bytes, now: float) -> None:
        """Frames with no exact subscriber: wildcard matches, requests, replies and
        anything malformed (validated by the protocol core)."""
        try:
            fr = decode_frame(frame)
        except DecodeError as exc:
            self._malformed += 1
            log.debug("dropped malformed frame (%s): %r", exc, frame[:64])
            return
        sb, kind, start = fr.subject, fr.kind, fr.payload_start
        nul = len(sb)
        if kind is Kind.REPLY:
            self._on_reply(sb, frame, nul, start, now)
            return
        if self._subject_of(sb) is None:
            self._malformed += 1
            return
        reply = fr.reply.decode("ascii") if fr.reply is not None else None
        msg = None
        subs = self._exact.get(sb)
        if subs is not None:
            msg = Message(frame, nul, start, kind, reply, now, self)
            for s in subs:
                s.push(msg)
        if self._wild:
            self._match_wild(frame, nul, start, kind, reply, now, msg)

    def _on_reply(self, sb: bytes, frame: bytes, nul: int, start: int, now: float) -> None:
        try:
            serial = self._inbox.serial_of(sb)
        except DecodeError:
            self._replies_dropped += 1  # someone else's reply or garbage
            return
        waiter = self._inbox.lookup(serial)
        if waiter is None:
            self._replies_dropped += 1
            return
        msg = Message(frame, nul, start, Kind.REPLY, None, now, self)
        if isinstance(waiter, ReplyStream):
            waiter.push(msg)
        else:
            self._inbox.close(serial)
            if not waiter.done():
                waiter.set_result(msg)

    def _drain_interest(self, sock: zmq.Socket[bytes]) -> int:
        n = 0
        changed = False
        try:
            while n < _BATCH:
                ev = sock.recv(zmq.NOBLOCK)
                n += 1
                if not ev:
                    continue
                if ev[0] == 1:
                    if ev[1:] not in self._interest:
                        self._interest.add(ev[1:])
                        changed = True
                elif ev[0] == 0 and ev[1:] in self._interest:
                    self._interest.discard(ev[1:])
                    changed = True
        except zmq.Again:
            pass
        except zmq.ZMQError as exc:
            if not self._closed:
                log.warning("publisher socket error: %s", exc)
        if changed and self._interest_changed is not None:
            self._interest_changed.set()
        return n

    def _drain_monitor(self, sock: zmq.Socket[bytes]) -> int:
        n = 0
        try:
            while n < _BATCH:
                parts = sock.recv_multipart(zmq.NOBLOCK)
                n += 1
                try:
                    ev = parse_monitor_message(parts)
                except Exception:  # a malformed monitor message is not worth a crash
                    continue
                endpoint = ev["endpoint"].decode() if isinstance(ev["endpoint"], bytes) else ""
                self._guard.event(ev["event"], endpoint, time.monotonic())  # aoz/sockopts.py
                if ev["event"] == zmq.EVENT_CONNECTED:
                    self._link_state[endpoint] = True
                elif ev["event"] in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED):
                    self._link_state[endpoint] = False
        except zmq.Again:
            pass
        except zmq.ZMQError:
            pass
        return n

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            self._guard.tick(now)  # reconnect after handshake back-off (aoz/sockopts.py)
            # Only abandoned reply streams can outlive their deadline: a single request
            # always removes its own entry when it returns, times out or is cancelled.
            for waiter in self._inbox.expire(now):
                if isinstance(waiter, ReplyStream):
                    waiter.close()

    # ------------------------------------------------------------------ DataLinks
    def connect_peer(self, endpoint: str) -> None:
        """Connect the data SUB to a peer's publisher (idempotent)."""
        pending = self._pending_disconnects.pop(endpoint, None)
        if pending is not None:
            pending.cancel()  # the peer is back (or a new one took its address)
        if self._sub is None or self._closed or endpoint in self._connected:
            return
        try:
            self._connect_sub(endpoint)
        except zmq.ZMQError as exc:
            self.count("connect_errors")
            log.warning("cannot connect to peer %s: %s", endpoint, exc)

    def disconnect_peer(self, endpoint: str) -> None:
        """Disconnect the data SUB from a peer's publisher (no-op if not connected).

        The disconnect happens after a short grace period: a peer's goodbye travels
        through the nsd and can overtake its last data frames (a final reply, say),
        which would be lost if the link were cut at once.
        """
        if self._sub is None or endpoint not in self._connected or self._loop is None:
            return
        if endpoint not in self._pending_disconnects:
            self._pending_disconnects[endpoint] = self._loop.call_later(
                _DISCONNECT_GRACE, self._disconnect_now, endpoint
            )

    def _disconnect_now(self, endpoint: str) -> None:
        self._pending_disconnects.pop(endpoint, None)
        if self._sub is None or self._sub.closed or endpoint not in self._connected:
            return
        self._connected.discard(endpoint)
        self._link_state.pop(endpoint, None)
        try:
            self._sub.disconnect(endpoint)
        except zmq.ZMQError:
            pass
        self._kick(self._sub)

    def link_up(self, endpoint: str) -> bool:
        """Whether the data SUB currently has a live TCP connection to ``endpoint``."""
        return self._link_state.get(endpoint, False)

    def peer_event(self, event: PeerEvent) -> None:
        for listener in list(self._peer_listeners):
            listener.push(event)

    def count(self, counter: str, n: int = 1) -> None:
        self._counters[counter] = self._counters.get(counter, 0) + n

    # ------------------------------------------------------------------ publish
    def _header(self, subject: str) -> bytes:
        h = self._header_cache.get(subject)
        if h is None:
            if not isinstance(subject, str):
                raise SubjectError(
                    f"subject must be a str, not {type(subject).__name__}", subject=None
                )
            if is_reserved(subject):
                raise SubjectError(
                    f"subject {subject!r} is reserved for aoz's inboxes and naming; "
                    "choose a subject that does not start with _INBOX. or _NAMING",
                    subject=subject,
                )
            h = publish_header(subject_bytes(subject))
            if len(self._header_cache) >= _CACHE_MAX:
                self._header_cache.clear()
                self._raw_headers.clear()
            self._header_cache[subject] = h
        return h

    def _send(self, frame: bytes) -> None:
        assert self._pub is not None
        try:
            self._pub.send(frame, zmq.NOBLOCK, copy=len(frame) < _COPY_THRESHOLD)
        except zmq.ZMQError as exc:
            raise TransportError(f"publish failed: {exc}") from exc
        self._messages_out += 1
        self._bytes_out += len(frame)

    def publish_nowait(
        self, subject: str, data: object = b"", *, codec: Codec | None = None
    ) -> None:
        """Publish without awaiting (ZeroMQ never blocks a publisher).

        ``data`` may be ``bytes`` (sent raw), ``str`` (UTF-8 text) or anything msgpack/JSON
        can encode (dicts, lists, ``msgspec.Struct``...).
        """
        pub = self._pub
        if pub is None or self._closed:
            self._check_open()
            return
        raw_header = self._raw_headers.get(subject)
        if raw_header is None:
            raw_header = self._header(subject) + b"\0"
            self._raw_headers[subject] = raw_header
        if codec is None and type(data) is bytes:
            frame = raw_header + data
        else:
            frame = raw_header[:-1] + encode_payload(data, codec, default=self._default_codec)
        try:
            if len(frame) < _COPY_THRESHOLD:
                pub.send(frame, zmq.NOBLOCK)
            else:
                pub.send(frame, zmq.NOBLOCK, copy=False)
        except zmq.ZMQError as exc:
            raise TransportError(f"publish on {subject!r} failed: {exc}") from exc
        self._messages_out += 1
        self._bytes_out += len(frame)

    async def publish(
        self, subject: str, data: object = b"", *, codec: Codec | None = None
    ) -> None:
        """Publish ``data`` on ``subject`` to every subscriber in the mesh (this node too).

        Never waits for the network: it returns as soon as ZeroMQ holds the frame, and
        yields to the event loop once every few hundred calls so that a tight publishing
        loop cannot starve the node's other tasks.

        >>> await node.publish("MD.NYSE.IBM", Quote(bid=1.0, ask=1.1))  # doctest: +SKIP
        """
        self.publish_nowait(subject, data, codec=codec)
        self._sends_since_yield += 1
        if self._sends_since_yield >= _YIELD_EVERY:
            self._sends_since_yield = 0
            await asyncio.sleep(0)

    async def _respond(self, handle: str, data: object, codec: Codec | None) -> None:
        """Publish a reply, once the requester's inbox subscription has reached us.

        The request travelled the requester's PUB -> our SUB link; the reply needs the
        other direction, which may still be connecting (a peer that joined a moment
        ago). ZeroMQ would drop a reply with no subscriber silently, so wait for the
        inbox filter, boundedly; a reply that still has no route is counted.
        """
        self._check_open()
        payload = encode_payload(data, codec, default=self._default_codec)
        hb = handle.encode("ascii")
        if not self._routable(hb):
            try:
                await self.wait_for_interest(handle, timeout=_REPLY_ROUTE_WAIT)
            except WaitTimeout:
                self.count("replies_unroutable")
        self._send(encode_reply(hb, payload))

    def _routable(self, handle: bytes) -> bool:
        inbox = handle[: len(handle) - 17]  # _INBOX.<uuid> without .<serial>
        if inbox in self._interest:
            return True  # the common case: one set lookup
        assert self._pub is not None
        self._drain_interest(self._pub)
        # any inbox-shaped filter covering the handle (an OZ peer, a broker) will do;
        # a catch-all wildcard does not, as wildcards never see inbox traffic
        return inbox in self._interest or any(
            p.startswith(b"_INBOX.") and handle.startswith(p) for p in self._interest
        )

    # ------------------------------------------------------------------ subscribe
    def subscribe(
        self,
        pattern: str,
        *,
        regex: bool = False,
        queue_size: int | None = None,
        overflow: Overflow | None = None,
    ) -> Subscription:
        """Subscribe to an exact subject, NATS-style tokens (``MD.*.IBM``, ``MD.>``) or an
        OZ-style regular expression (``^MD\\.NYSE\\..*``, or any pattern with ``regex=True``).

        >>> async with node.subscribe("MD.NYSE.*") as sub:  # doctest: +SKIP
        ...     async for msg in sub:
        ...         print(msg.subject, msg.decode())
        """
        self._check_open()
        if not isinstance(pattern, str):
            raise SubjectError(f"pattern must be a str, not {type(pattern).__name__}")
        compiled = compile_pattern(pattern, regex=regex)
        if compiled.kind == "exact" and is_reserved(pattern):
            raise SubjectError(
                f"{pattern!r} is reserved for aoz's inboxes and naming and cannot be subscribed to",
                subject=pattern,
            )
        size = self.settings.queue_size if queue_size is None else queue_size
        if size < 1:
            raise SubjectError("queue_size must be >= 1")
        sub_ref: list[Subscription] = []
        sub = Subscription(
            compiled,
            size,
            overflow or self.settings.overflow,
            lambda: self._unsubscribe(sub_ref[0]),
        )
        sub_ref.append(sub)
        if compiled.kind == "exact":
            key = compiled.zmq_prefix[:-1]  # the subject's bytes
            self._exact[key] = (*self._exact.get(key, ()), sub)
        else:
            self._wild = (*self._wild, sub)
        assert self._sub is not None
        self._sub.setsockopt(zmq.SUBSCRIBE, compiled.zmq_prefix)
        self._kick(self._sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        p = sub.pattern
        if p.kind == "exact":
            key = p.zmq_prefix[:-1]
            rest = tuple(s for s in self._exact.get(key, ()) if s is not sub)
            if rest:
                self._exact[key] = rest
            else:
                self._exact.pop(key, None)
        else:
            self._wild = tuple(s for s in self._wild if s is not sub)
        if self._sub is not None and not self._sub.closed and not self._closed:
            try:
                self._sub.setsockopt(zmq.UNSUBSCRIBE, p.zmq_prefix)
            except zmq.ZMQError:
                pass
            self._kick(self._sub)

    # ------------------------------------------------------------------ interest
    def has_interest(self, subject: str) -> bool:
        """Whether some subscriber's filter (a peer's or this node's) would receive
        a message on ``subject`` from this node."""
        self._check_open()
        assert self._pub is not None
        frame_start = subject_bytes(subject) + b"\0"
        if any(frame_start.startswith(p) for p in self._interest):
            return True  # a pending unsubscribe may make this stale; that is harmless
        self._drain_interest(self._pub)  # only a miss pays for reading the XPUB
        return any(frame_start.startswith(p) for p in self._interest)

    async def wait_for_interest(self, subject: str, timeout: float = 5.0) -> None:
        """Wait until a subscription matching ``subject`` has reached this node.

        This removes ZeroMQ's slow-joiner race: after it returns, a publish on
        ``subject`` is delivered to at least one subscriber. Raises
        :class:`aoz.WaitTimeout` after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        assert self._interest_changed is not None
        while not self.has_interest(subject):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(
                    f"no subscriber for {subject!r} reached this node within {timeout} s",
                    timeout=timeout,
                )
            self._interest_changed.clear()
            with anyio.move_on_after(min(remaining, 0.05)):
                await self._interest_changed.wait()
            if self._closed:
                raise ClosedError("node closed while waiting for a subscriber")

    # ------------------------------------------------------------------ request/reply
    def _request_frame(
        self, subject: str, data: object, codec: Codec | None
    ) -> tuple[bytes, bytes]:
        self._check_open()
        self._header(subject)  # validates
        sb = subject_bytes(subject)
        if not self.has_interest(subject):
            self._no_responders += 1
            raise NoResponders(
                f"no subscriber for {subject!r} is connected to this node; start a responder "
                "or wait for one with `await node.wait_for_interest(subject)`",
                subject=subject,
            )
        return sb, encode_payload(data, codec, default=self._default_codec)

    async def request(
        self,
        subject: str,
        data: object = b"",
        *,
        timeout: float = 1.0,
        codec: Codec | None = None,
    ) -> Message:
        """Send a request and return the first reply.

        Raises :class:`aoz.NoResponders` at once when nobody subscribes to ``subject``,
        :class:`aoz.RequestTimeout` when no reply arrives within ``timeout`` seconds.

        >>> reply = await node.request("SVC.quote", b"IBM", timeout=1.0)  # doctest: +SKIP
        """
        sb, payload = self._request_frame(subject, data, codec)
        assert self._loop is not None
        fut: asyncio.Future[Message] = self._loop.create_future()
        serial, handle = self._inbox.open(fut, time.monotonic() + timeout)
        self._requests += 1
        # One timer that fails the future is much cheaper than an asyncio.timeout()
        # scope per request (it matters with many requests in flight).
        timer = self._loop.call_later(timeout, self._expire_request, fut, subject, timeout)
        try:
            self._send(encode_request(sb, handle, payload))
            return await fut
        finally:
            timer.cancel()
            self._inbox.close(serial)

    def _expire_request(self, fut: asyncio.Future[Message], subject: str, timeout: float) -> None:
        if not fut.done():
            self._timeouts += 1
            fut.set_exception(RequestTimeout(
                f"no reply to request on {subject!r} within {timeout} s",
                subject=subject, timeout=timeout,
            ))

    def request_many(
        self,
        subject: str,
        data: object = b"",
        *,
        timeout: float = 1.0,
        max_replies: int | None = None,
        codec: Codec | None = None,
    ) -> ReplyStream:
        """Send a request and iterate over every reply until ``timeout`` or ``max_replies``.

        >>> async for reply in node.request_many("SVC.quote", timeout=0.5):  # doctest: +SKIP
        ...     print(reply.decode())
        """
        if max_replies is not None and max_replies < 1:
            raise AozError("max_replies must be >= 1 (or None for every reply until timeout)")
        sb, payload = self._request_frame(subject, data, codec)
        deadline = time.monotonic() + timeout
        serial_ref: list[int] = []

        def forget() -> None:
            self._inbox.close(serial_ref[0])

        stream = ReplyStream(subject, deadline, max_replies, forget)
        serial, handle = self._inbox.open(stream, deadline + 1.0)
        serial_ref.append(serial)
        self._requests += 1
        self._send(encode_request(sb, handle, payload))
        return stream

    # ------------------------------------------------------------------ peers
    @property
    def peers(self) -> list[Peer]:
        """The peers discovery knows about (empty in static and broker modes)."""
        return [] if self._driver is None else list(self._driver.peers)

    def peer_events(self, queue_size: int = 1024) -> PeerEventStream:
        """An async iterator of peer events (joined/left/expired) from now on."""
        self._check_open()
        box: Mailbox[PeerEvent] = Mailbox(queue_size, "drop_oldest")
        box._on_close = lambda: self._peer_listeners.discard(box)
        self._peer_listeners.add(box)
        return PeerEventStream(box)

    async def wait_for_peer(
        self, match: str | Callable[[Peer], bool], timeout: float = 10.0
    ) -> Peer:
        """Wait until discovery knows a peer with this uuid (or matching a predicate)."""
        pred: Callable[[Peer], bool] = (
            (lambda p: p.uuid == match) if isinstance(match, str) else match
        )
        events = self.peer_events()
        try:
            with anyio.fail_after(timeout):
                for p in self.peers:
                    if pred(p):
                        return p
                async for ev in events:
                    if ev.kind == "joined" and pred(ev.peer):
                        return ev.peer
        except TimeoutError:
            raise WaitTimeout(f"no matching peer appeared within {timeout} s",
                              timeout=timeout) from None
        finally:
            await events.aclose()
        raise ClosedError("node closed while waiting for a peer")

    # ------------------------------------------------------------------ stats
    def statistics(self) -> NodeStatistics:
        """A snapshot of this node's counters."""
        subs = {s for group in self._exact.values() for s in group} | set(self._wild)
        disc = dict(self._counters)
        if self._driver is not None:
            disc.update(self._driver.statistics())
        return NodeStatistics(
            uuid=self.uuid,
            mode=self.settings.mode,
            messages_in=self._messages_in,
            bytes_in=self._bytes_in,
            messages_out=self._messages_out,
            bytes_out=self._bytes_out,
            malformed_in=self._malformed,
            requests=self._requests,
            request_timeouts=self._timeouts,
            no_responders=self._no_responders,
            replies_dropped=self._replies_dropped,
            peers=len(self.peers),
            subscriptions=sorted((s.statistics() for s in subs), key=lambda s: s.pattern),
            discovery=disc,
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("open" if self._started else "new")
        return f"<aoz.Node {self.uuid[:8]} {self.settings.mode} {self.endpoint or '-'} {state}>"


class PeerEventStream:
    """Peer events (joined/left/expired) as an async iterator; ``aclose()`` stops it."""

    __slots__ = ("_box",)

    def __init__(self, box: Mailbox[PeerEvent]) -> None:
        self._box = box

    def __aiter__(self) -> PeerEventStream:
        return self

    async def __anext__(self) -> PeerEvent:
        return await self._box._get()

    async def aclose(self) -> None:
        self._box.close()


def _program_name() -> str:
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name or "python"


def _connectable(endpoint: str) -> str:
    """A bound wildcard address (tcp://0.0.0.0:5556) as an address to connect to."""
    return endpoint.replace("//0.0.0.0:", "//127.0.0.1:").replace("//[::]:", "//[::1]:")


def _unwrap(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def connect(*, config: str | os.PathLike[str] | None = None, **settings: Any) -> Node:
    """Create a node; use it as ``async with aoz.connect(...) as node``.

    With no arguments the node joins the mesh through the naming daemon at
    ``tcp://127.0.0.1:5756`` (start one with ``aoz nsd``). Keywords are
    :class:`aoz.Settings` fields; ``bind``/``connect`` select static mode,
    ``broker_pub``/``broker_sub`` brokered mode, ``mode="udp"`` UDP beacons.
    Settings also come from ``AOZ_*`` environment variables and ``config=`` (a TOML or
    JSON file).

    >>> async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:  # doctest: +SKIP
    ...     await node.publish("greeting", "hello")
    """
    return Node(load_settings(settings, config=config))
