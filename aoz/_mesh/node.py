"""The node: the public facade over aoz's parts.

A :class:`Node` ties together, and owns:

- the data plane (:mod:`aoz._mesh.dataplane`): ZeroMQ sockets, fd readers, peer links;
- the routing table (:mod:`aoz._mesh.routing`): subjects and patterns -> subscriptions;
- the interest set (:mod:`aoz._mesh.interest`): which filters reached our publisher;
- request/reply (:mod:`aoz._mesh.requests`): the inbox table, reply streams, deadlines;
- a discovery driver (:mod:`aoz._discovery`) in naming and UDP modes, which talks to
  the node through the peer-link port :class:`~aoz._discovery.links.DataLinks`.

Every task of the node (socket readers, housekeeping, the driver) lives in one anyio
task group held by a :class:`~aoz._mesh.tasks.TaskOwner`, so a node can be opened in one
task and closed in another, and cancelling ``start()`` cancels everything it started.

Failures are loud: when a task of the node fails, every subscription, reply stream
and pending request ends with :class:`aoz.ClosedError` whose ``__cause__`` is the
failure, and leaving ``async with`` re-raises it (unless the block raised first).

Why this module is longer than the others: it is the whole public surface of a node,
every method with the docstring and example users read; the logic behind each one
lives in the modules above, and no method here is more than a few lines of it.
"""

from __future__ import annotations

import inspect
import logging
import os
import secrets
import socket
import sys
import time
import uuid as uuidlib
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from threading import get_ident
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import msgspec

from .._discovery.links import Driver
from .._discovery.peers import Peer, PeerEvent, PeerEventHub, PeerEventStream
from .._protocol.builder import FrameBuilder
from .._protocol.cachequery import SUBJECT as CACHE_SUBJECT
from .._protocol.codecs import Codec, Verbatim
from .._protocol.frames import HANDLE_LEN, INBOX_PREFIX, encode_request, request_prefix
from .._protocol.subjects import compile_pattern, is_reserved, subject_bytes
from ..asyncapi import Catalog
from ..config import Overflow, Settings, load_settings
from ..errors import (
    AozError,
    ClosedError,
    MessagesLost,
    NoResponders,
    ServiceError,
    SubjectError,
    UsageError,
    UsageTypeError,
    WaitTimeout,
    WouldBlock,
)
from .cache import CacheAnswers, QueryInbox
from .dataplane import DataPlane
from .heartbeat import Heartbeats
from .hotpath import DONE, HOT_PATH, Entry, node_publish
from .identity import identity_publisher, identity_uuid
from .interest import InterestSet
from .liveness import PeerLinks
from .message import Message, WeakResponder
from .recovery import MemorySubscription, Recovery
from .requests import ReplyStream, Requests
from .routing import RoutingTable
from .subscription import Subscription, SubscriptionStatistics
from .tasks import TaskOwner

__all__ = ["Node", "NodeStatistics", "PeerEventStream", "ReplyStream", "connect"]

log = logging.getLogger("aoz.node")

_REPLY_ROUTE_WAIT = 5.0  # seconds a deferred reply waits for the requester's inbox filter
_MAX_DEFERRED = 1024  # deferred replies waiting at once; more are counted unroutable
_RAW_MID = b"\0\0"  # a request frame's NUL after the handle, then the raw codec byte
_REPLY_RAW = b"\0\x03\0\0"  # a reply frame's type bytes (SPEC §1), then the raw codec byte
_ROUTES_MAX = 8192  # subjects whose request route is kept (the table is cleared past it)
_HOUSEKEEPING = 0.25  # seconds between sweeps of abandoned reply streams
_CACHE_B = CACHE_SUBJECT.encode()
_CACHE_FILTER = _CACHE_B + b"\0"  # the data-SUB filter of cache queries (aoz._mesh.cache)
_INBOX_B = INBOX_PREFIX
_MAX_ANSWERS = 256  # cache answers being sent at once; more queries are refused (counted)


class NodeStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of a node's counters (see :meth:`Node.statistics`)."""

    uuid: str
    mode: str
    messages_in: int
    bytes_in: int
    messages_out: int
    bytes_out: int
    dropped_out: int  #: publishes dropped at a full subscriber queue (block node, block=False)
    blocked_sends: int  #: publishes that waited for room (send_policy="block")
    lost_in: int  #: messages known lost upstream (sequence gaps), over all subscriptions
    malformed_in: int
    requests: int
    request_timeouts: int
    no_responders: int
    replies_dropped: int
    peers: int
    subscriptions: list[SubscriptionStatistics]
    discovery: dict[str, int]
    hot_path: str  #: "compiled" or "python": which data-plane hot path runs (aoz.hot_path())
    #: sequenced streams whose count restarted (seen again after the tracker evicted
    #: them at its bound, or renumbered by their publisher): their gap is unknown
    streams_restarted: int = 0
    #: publisher heartbeat frames sent (aoz._mesh.heartbeat) and received well-formed
    heartbeats_out: int = 0
    heartbeats_in: int = 0
    #: of ``lost_in``, messages found lost by a heartbeat (a lost tail: no later message)
    lost_tails: int = 0
    #: the publisher cache and its subscribers' side (aoz._mesh.cache, aoz._mesh.recovery): cache_*
    #: (subjects, frames, bytes, evicted, queries, malformed, refused), history_*
    #: (queries, unanswered), replayed, recover_* (requests, refused, timeouts),
    #: recovered, unrecovered (also in lost_in), malformed_replies, gave_up
    memory: dict[str, int] = msgspec.field(default_factory=dict)


class Node:
    """A participant in an aoz mesh. Create it with :func:`aoz.connect`.

    >>> async with aoz.connect() as node:  # doctest: +SKIP
    ...     await node.publish("MD.NYSE.IBM", {"bid": 1.0, "ask": 1.1})
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        error_cb: Callable[[AozError], Any] | None = None,
        **overrides: Any,
    ) -> None:
        self.settings = settings if settings is not None else load_settings(overrides)
        if settings is not None and overrides:
            self.settings = settings.replace(**overrides)
        s = self.settings
        # curve_identity: uuid and publisher id are bound to our key (aoz._mesh.identity)
        key = s.curve_public if s.curve_identity else None
        self.uuid = str(uuidlib.uuid4()) if key is None else identity_uuid(key)
        self.program = s.program or _program_name()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self._closed = False
        self._started = False
        self._open = False  # started and not closed (publish reads _sender.thread instead)
        self._failure: BaseException | None = None
        self._owner = TaskOwner(f"aoz-node-{self.uuid[:8]}", on_failure=self._on_failure)
        self._routes: RoutingTable[Subscription] = RoutingTable()
        self._interest = InterestSet()
        # messages hold the node weakly (they are not tracked by the cyclic GC)
        responder = WeakResponder(self)
        self._requests = Requests(self.uuid, responder)
        self._frames = FrameBuilder(
            Codec[s.default_codec.upper()],  # MSGPACK, JSON or OMNM
            publisher=(None if not s.sequence else secrets.randbits(64) if key is None
                       else identity_publisher(key)),
            entry_type=Entry,  # what the hot path's Sender reads
        )
        self._plane = DataPlane(
            s, self._routes, self._interest, self._requests.on_reply, responder,
            self._requests.inbox_filter, self._frames, self.uuid,
        )
        self._send = self._plane.send  # every publish goes through here (aoz._mesh.send)
        # the hot path's Sender: ``publish`` without headers goes straight to it (build,
        # send, keep, count; True when the caller should yield), so the commonest publish
        # costs no SendPath call; when ZeroMQ refuses (a blocking node) it raises
        # WouldBlock and publish hands over to SendPath.refused
        self._sender = self._send.sender
        self._heartbeats = Heartbeats(self._frames, self._plane.send_control,
                                      interval=s.publisher_heartbeat,
                                      window=s.publisher_heartbeat_window,
                                      busy=lambda: self._send.waiters > 0)
        self._driver: Driver | None = None
        self._peer_hub = PeerEventHub()
        self._links = PeerLinks(self.uuid, self._plane, self._interest, self._peer_hub,
                                lambda: self.peers)
        self._no_responders = 0
        #: subject -> (interest version, request frame prefixes): see _request_route
        self._request_routes: dict[str, tuple[int, list[bytes]]] = {}
        self._deferred = 0  # deferred replies waiting for a route
        #: what this node serves and publishes, for its AsyncAPI document (aoz.asyncapi)
        self.catalog = Catalog()
        self._error_cb = error_cb
        # the publisher cache's answers and the subscribers' side (history, recovery)
        self._answers = CacheAnswers(self._plane.cache, self._frames.publisher)
        self._answering = 0  # cache answers being sent
        self._answers_refused = 0
        self._recovery = Recovery(
            self._requests, self._owner, responder, self._send_cache_query,
            self._cache_peers, self._caches_ready, self._plane.receive.report_gap,
            history_timeout=s.history_timeout, recover_timeout=s.recover_timeout,
            recover_max=s.recover_max,
        )
        self._plane.receive.recovery = self._recovery
        self._queries = QueryInbox(self._cache_query)  # routed in _setup

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.aclose()
        if exc is None and self._failure is not None:
            raise self._failed_error() from self._failure

    async def start(self) -> None:
        """Open sockets, start the node's tasks and (in naming/udp mode) join the mesh.

        Returns once the node is usable; raises :class:`aoz.NamingTimeout` when no
        naming daemon forwards the announcement in time. Cancelling it (a timeout
        around ``connect()``) stops everything it started.
        """
        if self._started:
            raise UsageError("node already started; create a new node instead")
        self._started = True
        try:
            await self._owner.start(self._setup)
        except BaseException:
            self._closed = True
            await self._plane.close()
            raise

    async def _setup(self, tg: anyio.abc.TaskGroup) -> None:
        self._plane.open()
        # every aoz node answers cache queries (with "no cache" when it keeps none)
        self._routes.add(self._queries.pattern, self._queries)
        self._plane.add_filter(_CACHE_FILTER)
        await self._plane.run(tg)
        tg.start_soon(self._housekeeping, name="aoz-housekeeping")
        if self.settings.publisher_heartbeat > 0 and self._frames.publisher is not None:
            tg.start_soon(self._heartbeats.run, name="aoz-heartbeats")
        self._driver = self._make_driver()
        if self._driver is not None:
            self._plane.name_peers(self._driver.uuid_at)  # curve_identity only
            # link events are pushed as the link state changes (both halves of a link:
            # our SUB's monitor, the peer's inbox filter at our XPUB), not polled
            driver = self._driver

            def changed() -> None:
                self._links.report()
                driver.links_changed()  # discovery looks at its links at its next tick

            self._plane.links.on_change = self._plane.on_interest = changed
            await tg.start(self._driver.run, _DriverPort(self))
        self._open = True
        # publish and respond_to send at once on this thread only, and only while open
        # (their one check; _shutdown sets it back to 0)
        self._sender.thread = get_ident()

    def _make_driver(self) -> Driver | None:
        mode = self.settings.mode
        if mode == "naming":
            from .._discovery.driver import NamingDriver

            return NamingDriver(self.settings)
        if mode == "udp":
            from .._discovery.udp import UdpDriver

            return UdpDriver(self.settings)
        return None

    async def _housekeeping(self) -> None:
        while True:
            await anyio.sleep(_HOUSEKEEPING)
            self._requests.expire(time.monotonic())
            if self._driver is not None:
                self._links.report()

    def _on_failure(self, exc: BaseException) -> None:
        log.error("aoz node %s failed: %r", self.uuid, exc, exc_info=exc)
        self._failure = exc
        self._shutdown(self._failed_error())
        self._report(self._failed_error())

    def _report(self, err: AozError) -> None:
        """Tell the application's ``error_cb`` (never raises into the caller: a loss is
        reported from the receive path)."""
        cb = self._error_cb
        if cb is None:
            return
        try:
            result = cb(err)
            if inspect.isawaitable(result):
                self._owner.start_soon(_await, result, name="aoz-error-cb")
        except Exception:
            log.exception("the error_cb given to aoz.connect raised")

    def _report_loss(self, sub: Subscription) -> None:
        self._report(MessagesLost(
            f"subscription {sub.pattern.text!r} is losing messages: {sub.dropped} dropped "
            f"(its queue was full), {sub.lost} lost upstream",
            pattern=sub.pattern.text, dropped=sub.dropped, lost=sub.lost,
        ))

    def _failed_error(self) -> ClosedError:
        err = ClosedError(f"the node failed: {self._failure!r}")
        err.__cause__ = self._failure
        return err

    async def aclose(self) -> None:
        """Leave the mesh and release everything; safe to call twice and from any task.

        Ends every ``async for`` over the node's subscriptions, fails pending requests
        with :class:`aoz.ClosedError`, sends the naming goodbye (``D``) and closes the
        sockets with a short linger.
        """
        if not self._closed:
            self._shutdown(ClosedError("the node was closed while waiting for a reply"))
            if self._driver is not None and self._failure is None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                    try:
                        await self._driver.goodbye()
                    except Exception as exc:  # the goodbye is best effort
                        log.debug("goodbye failed: %r", exc)
        await self._owner.aclose()
        with anyio.CancelScope(shield=True):
            await self._plane.close()

    def _shutdown(self, error: ClosedError) -> None:
        """Synchronous part of closing: end consumers and fail waiters."""
        self._closed = True
        self._open = False
        self._sender.thread = 0  # publish and respond_to: no thread sends now
        self._plane.interest_changed.set()  # wake wait_for_interest: it raises ClosedError
        failed = self._failure is not None
        for sub in self._routes.clear():
            sub.close(error if failed else None)
        self._requests.fail_all(error)
        self._peer_hub.close(error if failed else None)

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            if self._failure is not None:
                raise self._failed_error()
            raise ClosedError("this node is closed; open a new one with aoz.connect()")
        if not self._open:
            raise ClosedError("this node is not started; use `async with aoz.connect() as node`")

    @property
    def endpoint(self) -> str:
        """The data publisher's address announced to peers (first bound endpoint)."""
        return self._plane.endpoint

    @property
    def endpoints(self) -> list[str]:
        """Every bound data endpoint."""
        return list(self._plane.endpoints)

    # ------------------------------------------------------------------ publish
    def publish_nowait(
        self, subject: str, data: object = b"", *, codec: Codec | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Publish without awaiting.

        ``data`` may be ``bytes`` (sent raw), ``str`` (UTF-8 text) or anything msgpack/JSON
        can encode (dicts, lists, ``msgspec.Struct``...). On a node with
        ``send_policy="block"`` it raises :class:`aoz.WouldBlock` (and sends nothing)
        when a subscriber's queue is full; ``await node.publish(...)`` waits instead.
        """
        if not self._open:
            self._check_open()
        self._send.publish_nowait(subject, data, codec, headers)

    def publish(
        self,
        subject: str,
        data: object = b"",
        *,
        codec: Codec | None = None,
        block: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Coroutine[Any, Any, None]:
        """Publish ``data`` on ``subject`` to every subscriber in the mesh (this node too).

        ``await node.publish(...)``. The message is sent during the call, and what it
        returns is awaited: at once done when the message has gone, or the wait for room
        (``send_policy="block"``) or for the loop's turn. Like a coroutine for
        ``asyncio.create_task`` and anyio's ``start_soon``; unlike one, an error (a
        closed node, data that cannot be encoded) is raised by the call, not by the
        ``await``. (A coroutine per call cost a third of a publish.) Called from a
        thread that is not the node's loop, it sends nothing and returns a coroutine
        that publishes when the loop runs it (``asyncio.run_coroutine_threadsafe``);
        :mod:`aoz._mesh.blocking` is the facade for such threads.

        ``headers`` (str -> str) travel in aoz's payload header to aoz subscribers
        (``msg.headers``); an omnm or Verbatim payload cannot carry them.

        With ``send_policy="drop"`` (the default) it never waits: a subscriber whose
        queue at this publisher is full loses the message and counts it (its
        ``statistics().lost``). With ``send_policy="block"`` it waits until every
        subscriber's queue has room, so nothing is lost; ``block=False`` drops instead
        (counted in ``statistics().dropped_out``). It yields to the event loop every
        few hundred calls so a tight publishing loop cannot starve the node's tasks.

        >>> await node.publish("MD.NYSE.IBM", Quote(bid=1.0, ask=1.1))  # doctest: +SKIP
        """
        if self._sender.thread != get_ident():  # not open, or not the node's loop thread
            self._check_open()
            return self._publish_later(subject, data, codec, block, headers)
        if headers is None and not block:
            try:
                due = self._sender.publish(subject, data, codec)
            except WouldBlock:  # a blocking node's full subscriber: wait, or drop
                wait = self._send.refused(subject, block)
            else:
                return anyio.lowlevel.checkpoint() if due else DONE  # the loop's turn, now and then
        else:
            wait = self._send.publish(subject, data, codec, block, headers)
        return DONE if wait is None else wait  # room to wait for, or the loop's turn

    async def _publish_later(self, subject: str, data: object, codec: Codec | None,
                             block: bool | None, headers: Mapping[str, str] | None) -> None:
        """``publish`` called from a thread that is not the node's loop: ZeroMQ sockets
        are not thread-safe, so nothing is sent then; this coroutine publishes when the
        loop runs it (``asyncio.run_coroutine_threadsafe(node.publish(...), loop)``)."""
        await self.publish(subject, data, codec=codec, block=block, headers=headers)

    async def publish_many(
        self, subject: str, items: Iterable[object], *, codec: Codec | None = None
    ) -> None:
        """Publish every item of ``items`` on ``subject``, in order: what a loop of
        :meth:`publish` does, in one call (about a third less CPU per message).

        The items are encoded first (an item that cannot be encoded raises before
        anything is sent or numbered), then handed to ZeroMQ together; with
        ``send_policy="block"`` it waits for room as :meth:`publish` does, so nothing is
        dropped (cancelled while it waits, the rest is not sent, and subscribers count
        it as lost).

        >>> await node.publish_many("MD.NYSE.IBM", [q1, q2, q3])  # doctest: +SKIP
        """
        self._check_open()
        await self._send.publish_many(subject, items, codec)

    async def publish_frames(
        self, frames: Sequence[bytes], *, timeout: float | None = None
    ) -> int:
        """Publish ready-made publish frames, in order; returns how many were sent.

        For bulk forwarders (the Spark sink's sidecar) that build frames themselves with
        :func:`aoz._protocol.frames.encode_publish`; they go out as they are (no sequence
        header is added). On a node with ``send_policy="block"`` it waits for room, at
        most ``timeout`` seconds in all; a frame that is not a publish frame raises
        :class:`aoz.UsageError` before anything is sent.
        """
        self._check_open()
        return await self._send.publish_frames(frames, timeout)

    def respond_to(self, handle: str, data: object, codec: Codec | None) -> Awaitable[None]:
        """Publish a reply to ``handle`` (what :meth:`Message.respond` calls).

        The request travelled the requester's PUB -> our SUB link; the reply needs the
        other direction, which may still be connecting (a peer that joined a moment
        ago), and ZeroMQ would drop a reply with no route silently. A reply with a route
        is sent at once; one without is handed to a task of the node that waits for
        the requester's inbox filter (at most 5 s) and then sends it or counts it in
        ``replies_unroutable``. The caller never waits, so a sequential responder is
        not stalled by a requester that has gone.
        """
        if self._sender.thread != get_ident():  # not open, or not the node's loop thread
            self._check_open()
            return self._respond_later(handle, data, codec)
        hb = handle.encode("ascii")
        if codec is None and type(data) is bytes and len(hb) == HANDLE_LEN and b"\0" not in hb:
            frame = b"".join((hb, _REPLY_RAW, data))  # encode_reply(hb, encode_payload(data))
        else:
            frame = self._frames.reply(hb, data, codec)
        if self._interest.routable(hb):
            self._send.send(frame)
            return DONE
        self._plane.read_interest()
        if self._interest.routable(hb):
            self._send.send(frame)
            return DONE
        if self._deferred >= _MAX_DEFERRED:  # bounded: a flood of gone requesters
            self._plane.count("replies_unroutable")
            return DONE
        self._deferred += 1
        self._owner.start_soon(self._deferred_reply, hb, frame, name="aoz-deferred-reply")
        return DONE

    async def _respond_later(self, handle: str, data: object, codec: Codec | None) -> None:
        """``respond_to`` called from a thread that is not the node's loop (see
        :meth:`_publish_later`)."""
        await self.respond_to(handle, data, codec)

    async def _route_to(self, handle: bytes) -> bool:
        """Wait at most ``_REPLY_ROUTE_WAIT`` for the requester's inbox filter (what a
        reply to ``handle`` needs to be routed); False when it did not come (counted
        ``replies_unroutable``)."""
        with anyio.move_on_after(_REPLY_ROUTE_WAIT):
            while not self._interest.routable(handle):
                self._plane.interest_changed.clear()
                self._plane.read_interest()
                if self._interest.routable(handle):
                    break
                await self._plane.interest_changed.wait()
            return True
        self._plane.count("replies_unroutable")
        return False

    async def _deferred_reply(self, handle: bytes, frame: bytes) -> None:
        try:
            if await self._route_to(handle) and self._open:
                try:
                    self._send.send(frame)
                except AozError as exc:  # closing under us; nowhere to go
                    log.debug("deferred reply not sent: %s", exc)
        finally:
            self._deferred -= 1

    # ------------------------------------------------------------------ the cache
    def _cache_query(self, handle: str, query: bytes) -> None:
        """A cache query arrived (the receive path; aoz._mesh.cache): answer it from a task,
        which waits for the requester's inbox filter and for room as a reply does."""
        chunks = self._answers.answer(query)
        if chunks is None or self._closed:
            return
        if self._answering >= _MAX_ANSWERS:
            self._answers_refused += 1
            return
        hb = handle.encode("ascii")
        frames = [self._frames.reply(hb, Verbatim(c), None) for c in chunks]
        self._answering += 1
        self._owner.start_soon(self._send_answer, hb, frames, name="aoz-cache-answer")

    async def _send_answer(self, handle: bytes, frames: list[bytes]) -> None:
        try:
            if await self._route_to(handle) and self._open:
                await self._send.send_all(frames, timeout=_REPLY_ROUTE_WAIT)
        except AozError as exc:  # closing under us
            log.debug("cache answer not sent: %s", exc)
        finally:
            self._answering -= 1

    def _send_cache_query(self, handle: bytes, query: bytes) -> None:
        self._check_open()
        self._send.send(encode_request(_CACHE_B, handle, query))

    def _cache_peers(self) -> int | None:
        """How many nodes should answer a history query: the publishers the data SUB
        is connected to (this node included); None behind a broker (unknown)."""
        if self.settings.mode == "broker":
            return None
        return len(self._plane.links.connected)

    async def _caches_ready(self) -> None:
        """Wait until both directions of every link are up: as many nodes' inbox filters
        at our publisher as we expect answers (their subscription to cache queries comes
        with it: they will get the query) and our SUB connected to each of them (their
        answers can come back). The caller bounds the wait."""
        expected = self._cache_peers()
        if expected is None:
            return
        changed = self._plane.interest_changed
        links = self._plane.links
        while not self._closed:
            changed.clear()
            self._plane.read_interest()
            inboxes = sum(f.startswith(_INBOX_B) for f in self._interest.filters())
            if inboxes >= expected and all(links.up(ep) for ep in list(links.connected)):
                return
            # interest changes wake us at once; link states come from the SUB's monitor,
            # which has no event of its own here: look again shortly
            with anyio.move_on_after(0.05):
                await changed.wait()

    # ------------------------------------------------------------------ subscribe
    def subscribe(
        self,
        pattern: str,
        *,
        regex: bool = False,
        queue_size: int | None = None,
        overflow: Overflow | None = None,
        history: int = 0,
        recover: bool = False,
    ) -> Subscription:
        """Subscribe to an exact subject, NATS-style tokens (``MD.*.IBM``, ``MD.>``) or an
        OZ-style regular expression (``^MD\\.NYSE\\..*``, or any pattern with ``regex=True``).

        Several tasks may iterate one subscription: each message goes to one of them.

        ``history=N`` first delivers, for every matching subject, up to the last N
        messages each publisher still has in its cache (publishers with
        ``publish_cache`` > 0), then the live ones, with no duplicate and no silent gap
        at the seam (``msg.replayed`` is True for the history). ``recover=True`` asks a
        publisher's cache for the messages a sequence gap says are missing and delivers
        them in order before what follows on that stream; what the cache no longer has
        is counted ``lost``. Both are described in aoz/_mesh/recovery.py.

        >>> async with node.subscribe("MD.NYSE.*") as sub:  # doctest: +SKIP
        ...     async for msg in sub:
        ...         print(msg.subject, msg.decode())
        """
        self._check_open()
        if not isinstance(pattern, str):
            raise UsageTypeError(f"pattern must be a str, not {type(pattern).__name__}")
        compiled = compile_pattern(pattern, regex=regex)
        if compiled.kind == "exact" and is_reserved(pattern):
            raise SubjectError(
                f"{pattern!r} is reserved for aoz's inboxes and naming and cannot be subscribed to",
                subject=pattern,
            )
        size = self.settings.queue_size if queue_size is None else queue_size
        if size < 1:
            raise UsageError(f"queue_size must be >= 1, not {size}")
        if not isinstance(history, int) or history < 0:
            raise UsageError(f"history must be an int >= 0 (messages per subject), not "
                             f"{history!r}")
        sub_ref: list[Subscription] = []
        sub: Subscription
        if history or recover:
            sub = MemorySubscription(
                compiled, size, overflow or self.settings.overflow,
                lambda: self._unsubscribe(sub_ref[0]), self._recovery,
                history=bool(history), recover=recover,
            )
        else:
            sub = Subscription(
                compiled, size, overflow or self.settings.overflow,
                lambda: self._unsubscribe(sub_ref[0]),
            )
        sub_ref.append(sub)
        if sub.overflow == "block":
            sub.backpressure(self._plane.receive.hold, self._plane.receive.release)
        if self._error_cb is not None:
            sub.on_loss = self._report_loss
        self._plane.add_filter(compiled.zmq_prefix)
        self._routes.add(compiled, sub)
        if history:  # routed live first, so the seam can be checked by number
            assert isinstance(sub, MemorySubscription)
            self._recovery.history(sub, history)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        self._routes.remove(sub.pattern, sub)
        if not self._closed:
            self._plane.receive.forget_streams(sub.pattern)
            self._plane.remove_filter(sub.pattern.zmq_prefix)

    # ------------------------------------------------------------------ interest
    def has_interest(self, subject: str, *, responders: bool = False) -> bool:
        """Whether some subscriber's filter (a peer's or this node's) would receive
        a message on ``subject`` from this node. With ``responders=True`` a catch-all
        subscriber (``>``, an unanchored regex: a monitor) does not count, as for
        :meth:`request`."""
        self._check_open()
        sb = subject_bytes(subject)
        if self._interest.covers(sb, responders=responders):
            return True  # a pending unsubscribe may make this stale; that is harmless
        self._plane.read_interest()  # only a miss pays for reading the XPUB
        return self._interest.covers(sb, responders=responders)

    async def wait_for_interest(
        self, subject: str, timeout: float = 5.0, *, responders: bool = False
    ) -> None:
        """Wait until a subscription matching ``subject`` has reached this node.

        This removes ZeroMQ's slow-joiner race: after it returns, a publish on
        ``subject`` is delivered to at least one subscriber. With ``responders=True`` it
        waits for one that can answer a request (see :meth:`has_interest`). Raises
        :class:`aoz.WaitTimeout` after ``timeout`` seconds.
        """
        changed = self._plane.interest_changed
        with anyio.move_on_after(timeout):
            while True:
                changed.clear()
                if self.has_interest(subject, responders=responders):
                    return
                await changed.wait()
        self._check_open()
        raise WaitTimeout(
            f"no subscriber for {subject!r} reached this node within {timeout} s",
            timeout=timeout,
        )

    async def wait_for_subscribers(self, subject: str | None, timeout: float = 5.0) -> int:
        """Wait until every peer known from discovery has its subscriptions in place
        here, and at least one of them covers ``subject``; returns how many peers.

        What a short-lived publisher needs before it publishes and exits (``aoz pub``
        does this): a peer counts once its SUB has connected to this node, completed
        the handshake and sent its filters (its inbox filter, which every OZ and aoz
        node subscribes first, has arrived), and the peer table has been quiet for two
        connect intervals (peers answer a newcomer's announcement at once). With
        ``subject=None`` it waits for the peers only. In static and broker modes there is
        no peer table: it waits for ``subject``'s interest.
        Raises :class:`aoz.WaitTimeout`.
        """
        with anyio.move_on_after(timeout):
            if subject is not None:
                await self.wait_for_interest(subject, timeout)
            if self._driver is None:
                return 0
            return await self._links.wait_subscribed(2 * self.settings.connect_interval)
        self._check_open()
        raise WaitTimeout(
            f"not every peer's subscriptions reached this node within {timeout} s "
            f"(peers known: {len(self.peers) - 1})",
            timeout=timeout,
        )

    @property
    def interest(self) -> InterestSet:
        """The subscription filters that reached this node's publisher (read only:
        ``covers()``, ``filters()``, ``version``); what queue groups read members from."""
        return self._interest

    async def interest_changed(self, timeout: float) -> None:
        """Return when the interest set changes, or after ``timeout`` seconds."""
        changed = self._plane.interest_changed
        changed.clear()
        self._plane.read_interest()
        with anyio.move_on_after(timeout):
            await changed.wait()

    # ------------------------------------------------------------------ request/reply
    def _request_route(self, subject: str) -> list[bytes]:
        """Where a request on ``subject`` goes, as the start of each target's request
        frame (``subject NUL 0x02``): the subject itself when a plain subscriber covers
        it, and one member of each queue group serving it; NoResponders when nobody
        would answer. A subject no queue group serves keeps its answer until the
        interest set changes (one lookup per request); queue groups take turns, so
        their targets are picked anew each time."""
        self._check_open()
        hit = self._request_routes.get(subject)
        if hit is not None and hit[0] == self._interest.version:
            return hit[1]
        self._frames.header(subject)  # validates
        version = self._interest.version
        targets, queued = self._request_targets(subject)
        if not targets:
            self._plane.read_interest()
            version = self._interest.version
            targets, queued = self._request_targets(subject)
            if not targets:
                self._no_responders += 1
                raise NoResponders(
                    f"no subscriber or queue group for {subject!r} is connected to this "
                    "node; start a responder or wait for one with "
                    "`await aoz.wait_for_service(node, subject)`",
                    subject=subject,
                )
        for target in queued:
            self._frames.header(target)  # a queue member's subject: validated as before
        prefixes = [request_prefix(subject_bytes(t)) for t in targets]
        if not queued:
            if len(self._request_routes) >= _ROUTES_MAX:
                self._request_routes.clear()
            self._request_routes[subject] = (version, prefixes)
        return prefixes

    def _request_targets(self, subject: str) -> tuple[list[str], list[str]]:
        plain = self._interest.covers(subject_bytes(subject), responders=True)
        queued = self._interest.queue_targets(subject)
        return ([subject] if plain else []) + queued, queued

    async def request(
        self,
        subject: str,
        data: object = b"",
        *,
        timeout: float = 1.0,
        codec: Codec | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Message:
        """Send a request and return the first reply (``headers`` travel with it).

        The request reaches every plain subscriber of ``subject`` and one member of each
        queue group serving it (:mod:`aoz.queues`). Raises :class:`aoz.NoResponders` at
        once when nobody subscribes to ``subject`` (catch-all subscribers such as ``>``
        monitors do not count as responders),
        :class:`aoz.RequestTimeout` when no reply arrives within ``timeout`` seconds,
        :class:`aoz.ServiceError` when the responder answered with an error (a service
        whose handler raised: ``exc.remote_type``, ``exc.remote_message``).

        >>> reply = await node.request("SVC.quote", b"IBM", timeout=1.0)  # doctest: +SKIP
        """
        hit = self._request_routes.get(subject)
        if hit is not None and hit[0] == self._interest.version and self._open:
            prefixes = hit[1]  # _request_route's answer, kept
        else:
            prefixes = self._request_route(subject)
        if codec is None and not headers and type(data) is bytes:
            payload, mid = data, _RAW_MID  # what encode_payload gives: the raw codec byte
        else:
            payload, mid = self._frames.payload(data, codec, headers), b"\0"
        requests = self._requests
        fut, serial, handle = requests.open_first(subject, timeout)
        try:
            # one frame per target, one reply handle: replies from any of them reach
            # the same waiter (the first wins)
            for prefix in prefixes:
                self._send.send(b"".join((prefix, handle, mid, payload)))
            reply = await fut
        finally:
            requests.close(serial)
            fut.cancel()  # done already, unless the send failed: then it must not time out
        remote = reply.error
        if remote is not None:  # the responder failed: an error, never a value
            raise ServiceError.from_reply(subject, remote)
        return reply

    def request_many(
        self,
        subject: str,
        data: object = b"",
        *,
        timeout: float = 1.0,
        max_replies: int | None = None,
        codec: Codec | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> ReplyStream:
        """Send a request and iterate over every reply until ``timeout`` or ``max_replies``.

        An error reply (a responder that failed) raises :class:`aoz.ServiceError` from
        the iteration, at its place among the replies.

        >>> async for reply in node.request_many("SVC.quote", timeout=0.5):  # doctest: +SKIP
        ...     print(reply.decode())
        """
        if max_replies is not None and max_replies < 1:
            raise UsageError("max_replies must be >= 1 (or None for every reply until timeout)")
        prefixes = self._request_route(subject)
        payload = self._frames.payload(data, codec, headers)
        stream, handle = self._requests.open_stream(subject, timeout, max_replies)
        try:
            # one frame per target, one reply handle: the stream gets every reply
            for prefix in prefixes:
                self._send.send(b"".join((prefix, handle, b"\0", payload)))
        except BaseException:
            stream.close()
            raise
        return stream

    # ------------------------------------------------------------------ peers
    def connect_endpoint(self, endpoint: str) -> None:
        """Also receive from the publisher at ``endpoint`` (another node's
        ``node.endpoint``, or an OZ program's PUB): what ``connect=[...]`` does at start,
        at any time. For static mode; discovery connects peers by itself."""
        self._check_open()
        self._plane.links.connect_peer(endpoint)

    @property
    def peers(self) -> list[Peer]:
        """The peers discovery knows about (empty in static and broker modes)."""
        return [] if self._driver is None else list(self._driver.peers)

    def peer_events(
        self, queue_size: int = 1024, *, links: bool = False, current: bool = False,
    ) -> PeerEventStream:
        """An async iterator of peer events from now on: ``joined``, ``left``,
        ``expired``; with ``links=True`` also ``link_up`` and ``link_down``.

        With ``current=True`` the stream starts with the state as it is now: a
        ``joined`` for every peer already known (and, with ``links=True``, a ``link_up``
        for each whose link is up), then the changes, with nothing reported twice or
        missed in between (like a Zenoh liveliness subscriber with ``history``)."""
        self._check_open()
        first: list[PeerEvent] = []
        if current:
            for peer, up in self._links.snapshot():
                first.append(PeerEvent(kind="joined", peer=peer))
                if links and up:
                    first.append(PeerEvent(kind="link_up", peer=peer))
        return self._peer_hub.stream(queue_size, links=links, first=first)

    @property
    def links(self) -> dict[str, bool]:
        """Whether the data link with each known peer is up, by peer uuid: both
        directions handshaken and subscribed, as ``link_up``/``link_down`` report it."""
        return {peer.uuid: up for peer, up in self._links.snapshot()}

    async def wait_for_peer(
        self, match: str | Callable[[Peer], bool], timeout: float = 10.0
    ) -> Peer:
        """Wait until discovery knows a peer with this uuid (or matching a predicate)."""
        pred: Callable[[Peer], bool] = (
            (lambda p: p.uuid == match) if isinstance(match, str) else match
        )
        self._check_open()
        return await self._peer_hub.wait_for(lambda: self.peers, pred, timeout)

    # ------------------------------------------------------------------ stats
    def statistics(self) -> NodeStatistics:
        """A snapshot of this node's counters."""
        plane, rx, tx = self._plane, self._plane.receive, self._send
        disc = dict(plane.counters)
        if self._driver is not None:
            disc.update(self._driver.statistics())
        return NodeStatistics(
            uuid=self.uuid,
            mode=self.settings.mode,
            messages_in=rx.messages_in,
            bytes_in=rx.bytes_in,
            messages_out=tx.messages_out,
            bytes_out=tx.bytes_out,
            dropped_out=tx.dropped_out,
            blocked_sends=tx.blocked_sends,
            lost_in=rx.lost + self._recovery.lost,
            malformed_in=rx.malformed,
            requests=self._requests.requests,
            request_timeouts=self._requests.timeouts,
            no_responders=self._no_responders,
            replies_dropped=self._requests.replies_dropped,
            peers=len(self.peers),
            subscriptions=sorted((s.statistics() for s in self._routes
                                  if s is not self._queries),
                                 key=lambda s: s.pattern),
            discovery=disc,
            hot_path=HOT_PATH,
            streams_restarted=rx.sequences.restarted,
            heartbeats_out=self._heartbeats.sent,
            heartbeats_in=rx.heartbeats_in,
            lost_tails=rx.lost_tails,
            memory=self._memory_counters(),
        )

    def _memory_counters(self) -> dict[str, int]:
        out = dict(self._recovery.counters)
        cache = self._plane.cache
        if cache is not None:
            out.update(cache_subjects=cache.subjects, cache_frames=cache.frames,
                       cache_bytes=cache.nbytes, cache_evicted=cache.evicted)
        out.update(cache_queries=self._answers.queries,
                   cache_malformed=self._answers.malformed,
                   cache_refused=self._answers_refused)
        return out

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("open" if self._started else "new")
        return f"<aoz.Node {self.uuid[:8]} {self.settings.mode} {self.endpoint or '-'} {state}>"


# the compiled twin's publish: the same steps without a Python frame (its text is ours)
if node_publish is not None:
    node_publish.__doc__ = Node.publish.__doc__
    Node.publish = node_publish  # type: ignore[method-assign]


class _DriverPort:
    """The node as its discovery driver sees it (:class:`aoz._discovery.links.DataLinks`):
    kept off the public :class:`Node`, which users see in completion and docs."""

    __slots__ = ("_node",)

    def __init__(self, node: Node) -> None:
        self._node = node

    @property
    def uuid(self) -> str:
        return self._node.uuid

    @property
    def endpoint(self) -> str:
        return self._node.endpoint

    @property
    def settings(self) -> Settings:
        return self._node.settings

    @property
    def program(self) -> str:
        return self._node.program

    @property
    def host(self) -> str:
        return self._node.host

    @property
    def pid(self) -> int:
        return self._node.pid

    def connect_peer(self, endpoint: str) -> None:
        self._node._plane.links.connect_peer(endpoint)

    def disconnect_peer(self, endpoint: str) -> None:
        self._node._plane.links.disconnect_peer(endpoint)

    def link_up(self, endpoint: str) -> bool:
        """Up both ways (:mod:`aoz._mesh.liveness`): what discovery's expiry rule asks."""
        return self._node._links.up(endpoint)

    def link_silent(self, endpoint: str) -> bool:
        """Connection attempts to ``endpoint`` get no answer (:mod:`aoz._mesh.peerlinks`)."""
        return self._node._plane.links.silent(endpoint)

    def peer_event(self, event: PeerEvent) -> None:
        self._node._peer_hub.push(event)
        self._node._links.report()  # a new peer's link may already be up

    def count(self, counter: str, n: int = 1) -> None:
        self._node._plane.count(counter, n)


async def _await(result: Awaitable[Any]) -> None:
    try:
        await result
    except Exception:
        log.exception("the error_cb given to aoz.connect raised")


def _program_name() -> str:
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name or "python"


def connect(
    *,
    config: str | os.PathLike[str] | None = None,
    error_cb: Callable[[AozError], Any] | None = None,
    **settings: Any,
) -> Node:
    """Create a node; use it as ``async with aoz.connect(...) as node``.

    With no arguments the node joins the mesh through the naming daemon at
    ``tcp://127.0.0.1:5756`` (start one with ``aoz nsd``). Keywords are
    :class:`aoz.Settings` fields; ``bind``/``connect`` select static mode,
    ``broker_pub``/``broker_sub`` brokered mode, ``mode="udp"`` UDP beacons.
    Settings also come from ``AOZ_*`` environment variables and ``config=`` (a TOML or
    JSON file).

    ``error_cb`` (as nats.py's) is called, plain or ``async``, with
    :class:`aoz.MessagesLost` when a subscription is losing messages (at most every 5 s
    per subscription, with the totals) and with :class:`aoz.ClosedError` when the node
    fails: what an application without logging configured would otherwise miss.

    >>> async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:  # doctest: +SKIP
    ...     await node.publish("greeting", "hello")
    """
    return Node(load_settings(settings, config=config), error_cb=error_cb)
