"""History and recovery: a subscriber's side of the publishers' caches (aoz._mesh.cache).

**History** (``node.subscribe(pattern, history=N)``). The subscription is routed live
at once, but what arrives is held in a buffer while one cache query (HISTORY, the
pattern, N) goes to every aoz node (the internal subject ``_AOZ.CACHE``). Each node
answers, with its frames or "no cache"; the query ends when as many answers came as
the data SUB has publishers connected, or at ``history_timeout`` (the peers that did
not answer are counted, ``history_unanswered``). Then the subscription gets, per
subject in the order found and per publisher in its own order, the cached messages
(``msg.replayed``), then the buffered live ones. Sequence numbers make the seam
exact: a live message the history already held is skipped (no duplicate), and a live
stream whose first number is more than one past its history's last reports the
missing numbers as a gap (recovered with ``recover=True``, else ``lost``): never a
silent hole. Bounded: at most ``queue_size`` live messages are held; more are dropped
and counted in ``dropped``.

**Recovery** (``subscribe(..., recover=True)``). The receive path reports every gap
through :meth:`aoz._mesh.receive.Receiver.report_gap` (a sequence jump, the seam above, or a
lost tail a heartbeat found). For recovering subscriptions, :class:`Recovery` sends
one RANGE query for the missing numbers to the publisher that owns them (other nodes
stay silent) and the subscription holds what follows on that stream (the same subject
and publisher; other streams flow on). When the answer comes, or at
``recover_timeout``, the recovered messages are delivered in order, then what was
held; the numbers the cache no longer had are reported ``lost``. Bounded: at most
``recover_max`` recoveries outstanding per node (beyond, a gap is lost at once), and
a subscription holding more than ``queue_size`` messages stops waiting (its pending
gaps are reported lost and what it held is delivered). The receive path keeps reading
while a subscription holds (the answer comes through it), so a hold never stops it; a
subscription with ``overflow="block"`` queues what it is given back past its bound
(never dropped: it was held for it).

The accounting stays exact per publisher and subject: every number is delivered
(``received``, of which ``recovered``/``replayed`` came from a cache), ``lost`` or
``dropped`` (the subscription's queue was full), once.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING

import anyio
import msgspec

from .._protocol.cachequery import (
    HISTORY,
    RANGE,
    SUBJECT,
    CacheQuery,
    CacheReply,
    decode_reply,
    encode_query,
    in_range,
)
from .._protocol.frames import Kind, publish_subject_end
from .._protocol.sequence import PACK, is_sequenced
from ..config import Overflow
from ..errors import AozError
from .message import Message, Responder, data_start
from .subscription import Subscription, SubscriptionStatistics

if TYPE_CHECKING:
    from .._protocol.subjects import Pattern
    from .requests import Requests
    from .tasks import TaskOwner

__all__ = ["MemorySubscription", "Recovery"]

log = logging.getLogger("aoz.recovery")

_WRAP = 1 << 32
_HALF = 1 << 31


class _Range:
    """Numbers ``first .. first + count - 1`` a subscription waits for."""

    __slots__ = ("count", "first", "found")

    def __init__(self, first: int, count: int) -> None:
        self.first = first
        self.count = count
        self.found: list[Message] | None = None  # None: the answer is still awaited


class _Hold:
    """One stream's (subject, publisher) pending ranges and the messages after them."""

    __slots__ = ("first", "items")

    def __init__(self, first: int) -> None:
        self.first = first  # numbers before this pass (they precede every pending gap)
        self.items: deque[_Range | Message] = deque()


class MemorySubscription(Subscription):
    """A subscription with history and/or recovery (see the module docstring)."""

    __slots__ = ("_holds", "_live", "_nheld", "_recovery", "recover", "recovered", "replayed")

    def __init__(
        self,
        pattern: Pattern,
        limit: int,
        overflow: Overflow,
        on_close: Callable[[], None],
        recovery: Recovery,
        *,
        history: bool,
        recover: bool,
    ) -> None:
        super().__init__(pattern, limit, overflow, on_close)
        self._recovery = recovery
        self.recover = recover
        self.recovered = 0  #: messages a publisher's cache gave back after a gap
        self.replayed = 0  #: history messages delivered
        #: live messages held until the history is delivered (None: not waiting)
        self._live: list[Message] | None = [] if history else None
        self._holds: dict[tuple[str, int], _Hold] = {}
        self._nheld = 0  # messages held by recovery holds

    # -- the receive path's side ---------------------------------------------------------
    def push(self, item: Message) -> None:
        live = self._live
        if live is not None:
            if len(live) >= self._limit:  # bounded: what does not fit is dropped, counted
                self.received += 1
                self.dropped += 1
                self._overflowed()
            else:
                live.append(item)
            return
        if self._holds and self._hold(item):
            return
        Subscription.push(self, item)

    def push_many(self, items: list[Message]) -> None:
        if self._live is None and not self._holds:
            Subscription.push_many(self, items)
            return
        for m in items:
            self.push(m)

    def _hold(self, msg: Message) -> bool:
        pid = msg.publisher
        if pid is None:
            return False
        hold = self._holds.get((msg.subject, pid))
        seq = msg.sequence
        if hold is None or seq is None or (seq - hold.first) % _WRAP >= _HALF:
            return False  # not held, or before the first pending gap
        hold.items.append(msg)
        self._nheld += 1
        if self._nheld > self._limit:
            self._give_up()
        return True

    def gap(self, subject: str, publisher: int, first: int, count: int) -> _Range:
        """Numbers ``first..first+count-1`` of a stream are missing and asked for: what
        follows on that stream waits for them."""
        key = (subject, publisher)
        hold = self._holds.get(key)
        if hold is None:
            hold = self._holds[key] = _Hold(first)
        rng = _Range(first, count)
        hold.items.append(rng)
        return rng

    def resolved(self, subject: str, publisher: int) -> None:
        """An answer came for one of the stream's ranges: deliver what is ready."""
        key = (subject, publisher)
        hold = self._holds.get(key)
        if hold is None:
            return
        items = hold.items
        while items:
            head = items[0]
            if isinstance(head, _Range):
                if head.found is None:
                    return
                items.popleft()
                for m in head.found:
                    self.recovered += 1
                    self._release(m)
                lost = head.count - len(head.found)
                if lost:
                    self.upstream_loss(lost)
            else:
                items.popleft()
                self._nheld -= 1
                self._release(head)
        del self._holds[key]

    def _release(self, msg: Message) -> None:
        """A recovered or held message: a blocking subscription queues it past its
        bound (it was held for it; the bound is then queue_size + the range + what was
        held), the others by their overflow policy."""
        if self.blocking:
            self.push_past_limit(msg)
        else:
            Subscription.push(self, msg)

    def _give_up(self) -> None:
        """Holding more than the queue's bound: every pending gap is reported lost now
        (a late answer is ignored) and what was held is delivered."""
        for (subject, pid), hold in list(self._holds.items()):
            for item in hold.items:
                if isinstance(item, _Range) and item.found is None:
                    item.found = []
            self.resolved(subject, pid)
        self._recovery.counters["gave_up"] += 1

    def deliver_history(self, history: list[Message]) -> None:
        """The history arrived (or its deadline passed): deliver it, then the live
        messages held meanwhile, without a duplicate or a silent hole at the seam."""
        last: dict[tuple[str, int], int] = {}
        for m in history:
            self.replayed += 1
            Subscription.push(self, m)
            pid, seq = m.publisher, m.sequence
            if pid is not None and seq is not None:
                last[(m.subject, pid)] = seq
        live, self._live = self._live or [], None
        for m in live:
            pid = m.publisher
            if pid is not None and last:
                key = (m.subject, pid)
                k = last.get(key)
                seq = m.sequence
                if k is not None and seq is not None:
                    d = (seq - k) % _WRAP
                    if d == 0 or d >= _HALF:
                        continue  # the history had it: not twice
                    del last[key]  # the stream's first live message checks the seam
                    if d > 1:
                        self._recovery.seam(self, m, (k + 1) % _WRAP, d - 1)
            self.push(m)

    def statistics(self) -> SubscriptionStatistics:
        return msgspec.structs.replace(super().statistics(), recovered=self.recovered,
                                       replayed=self.replayed)

    def close(self, error: BaseException | None = None) -> None:
        self._live = None
        self._holds.clear()
        super().close(error)


class Recovery:
    """A node's history queries and recovery requests (see the module docstring).

    ``send(handle, payload)`` sends a request on ``_AOZ.CACHE``; ``expected()`` says
    how many nodes should answer a history query (None: unknown, wait for the
    deadline); ``report_gap`` is the receive path's gap report (aoz._mesh.receive).
    """

    def __init__(
        self,
        requests: Requests,
        owner: TaskOwner,
        responder: Responder,
        send: Callable[[bytes, bytes], None],
        expected: Callable[[], int | None],
        ready: Callable[[], Awaitable[None]],
        report_gap: Callable[[bytes, int, int, int, tuple[Subscription, ...], Message | None],
                             None],
        *,
        history_timeout: float,
        recover_timeout: float,
        recover_max: int,
    ) -> None:
        self._requests = requests
        self._owner = owner
        self._responder = responder
        self._send = send
        self._expected = expected
        self._ready = ready
        self._report_gap = report_gap
        self.history_timeout = history_timeout
        self.recover_timeout = recover_timeout
        self.recover_max = recover_max
        self.outstanding = 0  #: recovery requests in flight
        #: numbers recovering subscriptions missed and no cache gave back (once per gap;
        #: the node adds them to its lost_in)
        self.lost = 0
        self.counters: dict[str, int] = dict.fromkeys((
            "history_queries", "history_unanswered", "replayed", "recover_requests",
            "recovered", "unrecovered", "recover_refused", "recover_timeouts",
            "malformed_replies", "gave_up"), 0)

    # -- history ------------------------------------------------------------------------
    def history(self, sub: MemorySubscription, n: int) -> None:
        """Start the history query of a new subscription (it holds live messages
        until :meth:`MemorySubscription.deliver_history`)."""
        self._owner.start_soon(self._history, sub, n, name="aoz-history")

    async def _history(self, sub: MemorySubscription, n: int) -> None:
        found: list[Message] = []
        try:
            found = await self._query_history(sub, n)
        finally:
            if not sub.closed:
                self.counters["replayed"] += len(found)
                sub.deliver_history(found)

    async def _answers(self, query: bytes, timeout: float, what: str
                       ) -> AsyncGenerator[CacheReply, None]:
        """Send ``query`` on ``_AOZ.CACHE`` and yield each well-formed answer until
        ``timeout`` (malformed ones are counted). Up to half of ``timeout`` first waits
        for our subscriptions to be in at the peers' publishers: after a start or a cut,
        a query sent before the peer's SUB is back would be dropped by ZeroMQ."""
        deadline = time.monotonic() + timeout
        with anyio.move_on_after(timeout / 2):
            await self._ready()
        remaining = max(deadline - time.monotonic(), 0.05)
        stream, handle = self._requests.open_stream(SUBJECT, remaining, None)
        try:
            self._send(handle, query)
            async for reply in stream:
                try:
                    answer = decode_reply(reply.payload)
                except AozError:
                    self.counters["malformed_replies"] += 1
                    continue
                yield answer
        except AozError as exc:  # the node is closing, or the query could not leave
            log.debug("%s ended: %s", what, exc)
        finally:
            stream.close()

    async def _query_history(self, sub: MemorySubscription, n: int) -> list[Message]:
        pattern = sub.pattern
        query = encode_query(CacheQuery(kind=HISTORY, pattern=pattern.text,
                                        regex=pattern.kind == "regex", n=n))
        expected = self._expected()
        self.counters["history_queries"] += 1
        answered = 0
        per_subject: dict[str, dict[int, list[Message]]] = {}
        now = time.time()
        answers = self._answers(query, self.history_timeout, f"history query for {pattern.text!r}")
        async with aclosing(answers):
            async for r in answers:
                for frame in r.entries:
                    msg = self._message(frame, r.publisher, now)
                    if msg is None or not pattern.matches(msg.subject):
                        self.counters["malformed_replies"] += 1
                        continue
                    per_subject.setdefault(msg.subject, {}).setdefault(
                        r.publisher, []).append(msg)
                if r.last:
                    answered += 1
                    if expected is not None and answered >= expected:
                        break
        if expected is not None and answered < expected:
            self.counters["history_unanswered"] += expected - answered
        return [m for pubs in per_subject.values() for msgs in pubs.values() for m in msgs]

    def seam(self, sub: MemorySubscription, msg: Message, first: int, count: int) -> None:
        """A live stream starts more than one past its history: a gap, reported."""
        pid = msg.publisher
        assert pid is not None
        self._report_gap(msg.subject.encode(), pid, first, (first + count - 1) % _WRAP,
                         (sub,), msg)

    # -- recovery -------------------------------------------------------------------------
    def gap(self, subject: bytes, publisher: int, first: int, count: int,
            subs: list[MemorySubscription]) -> None:
        """``subs`` (recovering) miss ``count`` numbers from ``first``: ask the cache."""
        text = subject.decode()
        if self.outstanding >= self.recover_max:
            self.counters["recover_refused"] += 1
            for s in subs:
                s.upstream_loss(count)
            self.counters["unrecovered"] += count
            self.lost += count
            return
        ranges = [(s, s.gap(text, publisher, first, count)) for s in subs]
        self.outstanding += 1
        self.counters["recover_requests"] += 1
        self._owner.start_soon(self._recover, text, publisher, first, count, ranges,
                               name="aoz-recover")

    async def _recover(self, subject: str, publisher: int, first: int, count: int,
                       ranges: list[tuple[MemorySubscription, _Range]]) -> None:
        found: list[Message] = []
        try:
            found = await self._query_range(subject, publisher, first, count)
        finally:
            self.outstanding -= 1
            self.counters["recovered"] += len(found)
            self.counters["unrecovered"] += count - len(found)
            self.lost += count - len(found)
            for sub, rng in ranges:
                if rng.found is None:  # not given up meanwhile
                    rng.found = found
                sub.resolved(subject, publisher)

    async def _query_range(self, subject: str, publisher: int, first: int, count: int
                           ) -> list[Message]:
        query = encode_query(CacheQuery(kind=RANGE, pattern=subject, publisher=publisher,
                                        first=first, count=count))
        got: dict[int, Message] = {}
        complete = False
        now = time.time()
        answers = self._answers(query, self.recover_timeout,
                                f"recovery of {subject} {first}..+{count}")
        async with aclosing(answers):
            async for r in answers:
                if r.publisher != publisher:
                    self.counters["malformed_replies"] += 1
                    continue
                for frame in r.entries:
                    msg = self._message(frame, publisher, now)
                    seq = None if msg is None else msg.sequence
                    if (msg is None or seq is None or msg.subject != subject
                            or not in_range(seq, first, count)):
                        self.counters["malformed_replies"] += 1
                        continue
                    got[(seq - first) % _WRAP] = msg
                if r.last:
                    complete = True
                    break
        if not complete:
            self.counters["recover_timeouts"] += 1
        return [got[k] for k in sorted(got)]

    def _message(self, frame: bytes, publisher: int, now: float) -> Message | None:
        """A cached publish frame as the message the drain would have made, or None
        when it is not a sequenced publish frame of ``publisher``."""
        nul = publish_subject_end(frame)
        if nul <= 0:
            return None
        start = nul + 3
        if len(frame) < start + 13 or not is_sequenced(frame[start]):
            return None
        if PACK.unpack_from(frame, start + 1)[0] != publisher:
            return None
        try:
            frame[:nul].decode()
        except UnicodeDecodeError:
            return None
        return Message(frame, nul, start, data_start(frame, start), Kind.PUBLISH, None, now,
                       self._responder, replayed=True)
