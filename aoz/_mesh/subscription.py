"""Bounded, cancel-safe queues that consumers read with ``async for``.

:class:`Mailbox` is the one queue type aoz uses between its receive task and user
code: a deque with a hard limit, an overflow policy (``drop_newest`` keeps what is
queued and discards the arrival; ``drop_oldest`` discards the head to make room;
``block`` tells the producer to stop, through ``on_full``, and to go on, through
``on_room``, once the queue is half empty), drop counters, and a FIFO of waiting
consumers. The producer never blocks and never
awaits; a consumer that is cancelled while waiting loses nothing, because items
only leave the deque when a consumer takes them.

Several tasks may consume one mailbox at once (``async for`` in two tasks over the
same subscription): each message goes to exactly one of them, in arrival order,
like a queue shared by workers. Closing wakes every one of them.

:class:`Subscription` is a mailbox of :class:`~aoz._mesh.message.Message` bound to a
subject pattern; it is an async iterator and an async context manager.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Generic, TypeVar

import msgspec

from ..config import Overflow
from ..errors import ClosedError, UsageError, WaitTimeout
from .message import expand_packed, rows_of

if TYPE_CHECKING:
    from .._protocol.subjects import Pattern
    from .message import Message

__all__ = ["Mailbox", "Subscription", "SubscriptionStatistics"]

log = logging.getLogger("aoz.subscription")

_WARN_EVERY = 5.0  # seconds between loss warnings of one subscription

T = TypeVar("T")


class SubscriptionStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of one subscription (or other mailbox)."""

    pattern: str
    received: int  #: messages that matched and were offered to the queue
    dropped: int  #: messages discarded by the overflow policy (this queue was full)
    lost: int  #: messages known missing upstream (sequence gaps: publisher HWM, cut links)
    pending: int  #: messages queued, not yet consumed
    queue_size: int
    overflow: Overflow
    #: of ``received``: messages a publisher's cache gave back after a gap (recover=True)
    recovered: int = 0
    #: of ``received``: history messages (subscribe(history=N)), ``msg.replayed``
    replayed: int = 0


class Mailbox(Generic[T]):
    """A bounded single-consumer queue fed synchronously from the event loop."""

    __slots__ = (
        "_closed",
        "_error",
        "_held",
        "_limit",
        "_on_close",
        "_on_full",
        "_on_room",
        "_queue",
        "_waiters",
        "blocking",
        "drop_oldest",
        "dropped",
        "overflow",
        "received",
    )

    def __init__(
        self,
        limit: int,
        overflow: Overflow = "drop_newest",
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._queue: deque[T] = deque()
        self._limit = limit
        self.overflow: Overflow = overflow
        self.drop_oldest = overflow == "drop_oldest"
        #: overflow="block": the drain pushes one message at a time, and a full queue holds
        #: the data plane (read by both hot-path twins)
        self.blocking = overflow == "block"
        self._on_full: Callable[[], None] | None = None
        self._on_room: Callable[[], None] | None = None
        self._held = False  # told the producer to stop
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._error: BaseException | None = None
        self._on_close = on_close
        self.received = 0
        self.dropped = 0

    def backpressure(self, on_full: Callable[[], None], on_room: Callable[[], None]) -> None:
        """With ``overflow="block"``: call ``on_full`` when the queue fills (the data
        plane stops reading) and ``on_room`` when it has room again."""
        self._on_full, self._on_room = on_full, on_room

    # -- producer side (event loop, never blocks) -------------------------------------------
    def push(self, item: T) -> None:
        self.received += 1
        q = self._queue
        if len(q) >= self._limit:
            self.dropped += 1
            self._overflowed()
            if not self.drop_oldest:
                return
            q.popleft()
        q.append(item)
        if self.blocking and len(q) >= self._limit and not self._held:
            self._held = True
            if self._on_full is not None:
                self._on_full()
        if self._waiters:
            self._wake_one()

    def push_past_limit(self, item: T) -> None:
        """Queue ``item`` even when the queue is full, holding the producer as ``push``
        does: what a blocking (``overflow="block"``) subscription is given back after a
        recovery (aoz._mesh.recovery) must not be dropped by the queue it was held for."""
        self.received += 1
        self._queue.append(item)
        if self.blocking and len(self._queue) >= self._limit and not self._held:
            self._held = True
            if self._on_full is not None:
                self._on_full()
        if self._waiters:
            self._wake_one()

    def room(self) -> int:
        """How many items fit before the queue is full (0 when it is): a producer of
        an ``overflow="block"`` mailbox hands over at most this many with
        :meth:`push_many` and then stops (the receive path's drain does)."""
        return max(self._limit - len(self._queue), 0)

    def push_many(self, items: list[T]) -> None:
        """``push`` of each item in order, in one call: the receive path collects a
        drain's messages per subscription and hands them over at the end of the drain.
        An ``overflow="block"`` mailbox queues them all (its producer gives it at most
        :meth:`room` of them) and holds the producer once it is full, as ``push``."""
        k = len(items)
        self.received += k
        q = self._queue
        room = self._limit - len(q)
        if self.blocking:
            q.extend(items)
            if len(q) >= self._limit and not self._held:
                self._held = True
                if self._on_full is not None:
                    self._on_full()
        elif k <= room:
            q.extend(items)
        elif self.drop_oldest:
            q.extend(items)
            excess = len(q) - self._limit  # one per arrival at a full queue, as push
            for _ in range(excess):
                q.popleft()
            self.dropped += excess
            self._overflowed()
        else:
            q.extend(items[:room])
            self.dropped += k - room
            self._overflowed()
        waiters = self._waiters
        for _ in range(min(k, len(waiters))):
            self._wake_one()

    def push_whole(self, items: list[T]) -> None:
        """Items that arrived as one (a packed frame's rows): with ``overflow="block"``
        they are queued whole, even past the limit (by at most one frame's rows; the
        producer is then held, as by ``push``), so that none is dropped; otherwise as
        ``push_many``."""
        if not self.blocking:
            self.push_many(items)
            return
        self.received += len(items)
        q = self._queue
        q.extend(items)
        if len(q) >= self._limit and not self._held:
            self._held = True
            if self._on_full is not None:
                self._on_full()
        waiters = self._waiters
        for _ in range(min(len(items), len(waiters))):
            self._wake_one()

    def _took(self) -> None:
        """A consumer took items: a held producer may go on once the queue is half empty."""
        if self._held and len(self._queue) <= self._limit // 2:
            self._held = False
            if self._on_room is not None:
                self._on_room()

    def _overflowed(self) -> None:
        """Called when items were dropped; subclasses report it."""

    def _wake_one(self) -> None:
        waiters = self._waiters
        while waiters:
            w = waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    def _wake_all(self) -> None:
        waiters, self._waiters = self._waiters, deque()
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def close(self, error: BaseException | None = None) -> None:
        """End iteration. With ``error``, consumers get that exception instead of the end."""
        if self._closed:
            return
        self._closed = True
        self._error = error
        self._queue.clear()
        if self._held:  # a closed queue holds nobody back
            self._held = False
            if self._on_room is not None:
                self._on_room()
        self._wake_all()
        cb, self._on_close = self._on_close, None
        if cb is not None:
            cb()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending(self) -> int:
        return len(self._queue)

    # -- consumer side -----------------------------------------------------------------------
    async def _wait(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except BaseException:
            # Woken and cancelled in the same turn: pass the wake-up on, so the item
            # it announced does not sit in the queue while another consumer waits.
            if fut.done() and not fut.cancelled() and self._queue:
                self._wake_one()
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise

    def _ended(self) -> BaseException:
        return self._error if self._error is not None else StopAsyncIteration()

    async def get(self) -> T:
        """The next item, waiting for one; raises when the mailbox has ended."""
        return await self._get()

    async def _get(self) -> T:
        while True:
            if self._queue:
                item = self._queue.popleft()
                if self._held:
                    self._took()
                return item
            if self._closed:
                raise self._ended()
            await self._wait()

    async def _get_batch(self, max_size: int) -> list[T]:
        while not self._queue:
            if self._closed:
                raise self._ended()
            await self._wait()
        q = self._queue
        n = min(len(q), max_size)
        if n == len(q):
            out = list(q)
            q.clear()
        else:
            out = [q.popleft() for _ in range(n)]
        if self._held:
            self._took()
        return out

    def get_nowait(self) -> T | None:
        """The next item if one is queued, else ``None`` (never waits)."""
        if not self._queue:
            return None
        item = self._queue.popleft()
        if self._held:
            self._took()
        return item


class Subscription(Mailbox["Message"]):
    """Messages matching a subject pattern, consumed with ``async for``.

    Use it as an async context manager so it is removed when you are done::

        async with node.subscribe("MD.NYSE.*") as sub:
            async for msg in sub:
                print(msg.subject, msg.decode())

    Plain ``async for msg in node.subscribe(...)`` works too; the subscription then
    lives until :meth:`aclose` or until the node closes.

    The queue holds at most ``queue_size`` messages; when a consumer falls behind, the
    overflow policy drops messages and counts them (:meth:`statistics`).
    """

    __slots__ = ("_warned_at", "lost", "on_loss", "pattern")

    def __init__(
        self,
        pattern: Pattern,
        limit: int,
        overflow: Overflow,
        on_close: Callable[[], None],
    ) -> None:
        super().__init__(limit, overflow, on_close)
        self.pattern = pattern
        self.lost = 0
        self._warned_at = -_WARN_EVERY
        #: called (at most every 5 s) when this subscription is losing messages: the
        #: node's ``error_cb`` hook (aoz.connect(error_cb=...))
        self.on_loss: Callable[[Subscription], None] | None = None

    def push(self, item: Message) -> None:
        rows = rows_of(item)  # a packed frame: one message per row (aoz._protocol.packed)
        if rows is None:
            Mailbox.push(self, item)
        else:
            self.push_whole(rows)

    def push_many(self, items: list[Message]) -> None:
        Mailbox.push_many(self, expand_packed(items))

    def _overflowed(self) -> None:
        self._warn()

    def upstream_loss(self, n: int) -> None:
        """``n`` messages for this subscription were lost before they reached the node."""
        self.lost += n
        self._warn()

    def _warn(self) -> None:
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY:
            self._warned_at = now
            log.warning(
                "subscription %r is losing messages: %d dropped (its queue of %d was full), "
                "%d lost upstream so far; consume faster, raise queue_size, or use "
                "send_policy='block' on the publisher", self.pattern.text, self.dropped,
                self._limit, self.lost,
            )
            if self.on_loss is not None:
                self.on_loss(self)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Message:
        # Fast path without a coroutine frame per message when something is queued.
        if self._queue:
            item = self._queue.popleft()
            if self._held:
                self._took()
            return item
        return await self._get()

    async def next(self, timeout: float | None = None) -> Message:
        """The next message; raises :class:`aoz.WaitTimeout` after ``timeout`` seconds and
        :class:`aoz.ClosedError` when the subscription has ended."""
        try:
            if timeout is None:
                return await self._get()
            async with asyncio.timeout(timeout):
                return await self._get()
        except StopAsyncIteration:
            raise ClosedError(f"subscription {self.pattern.text!r} is closed") from None
        except TimeoutError:
            raise WaitTimeout(
                f"no message on {self.pattern.text!r} within {timeout} s", timeout=timeout or 0.0
            ) from None

    def batches(self, max_size: int = 1024) -> AsyncIterator[list[Message]]:
        """Iterate over lists of up to ``max_size`` queued messages (one wake-up per list).

        >>> async for batch in sub.batches(512):  # doctest: +SKIP
        ...     count += len(batch)
        """
        if max_size < 1:
            raise UsageError(f"max_size must be >= 1, not {max_size}")
        return _Batches(self, max_size)

    def statistics(self) -> SubscriptionStatistics:
        return SubscriptionStatistics(
            pattern=self.pattern.text,
            received=self.received,
            dropped=self.dropped,
            lost=self.lost,
            pending=len(self._queue),
            queue_size=self._limit,
            overflow=self.overflow,
        )

    async def aclose(self) -> None:
        """Unsubscribe and end every ``async for`` over this subscription."""
        self.close()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._queue)} pending"
        return f"<Subscription {self.pattern.text!r} {state}>"


class _Batches:
    __slots__ = ("_max", "_sub")

    def __init__(self, sub: Subscription, max_size: int) -> None:
        self._sub = sub
        self._max = max_size

    def __aiter__(self) -> _Batches:
        return self

    async def __anext__(self) -> list[Message]:
        return await self._sub._get_batch(self._max)
