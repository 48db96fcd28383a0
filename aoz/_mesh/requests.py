"""Request/reply bookkeeping (SPEC §2): the inbox table, reply streams and deadlines.

A node has one inbox, ``_INBOX.<uuid>``; every request takes the next serial from the
hot path's :class:`~aoz._mesh.hotpath.Inbox` (the table of
:class:`~aoz._protocol.inbox.InboxTable`, compiled or pure) and waits on what the table
maps that serial to: a future for :meth:`Node.request` (first reply), a
:class:`ReplyStream` for :meth:`Node.request_many`. The data plane hands every reply
frame to the inbox's ``on_reply`` (:attr:`Requests.on_reply`), which finds the waiter
by serial; a reply nobody waits for any more (late, duplicate, someone else's) is
counted in ``replies_dropped``.

Deadlines: the inbox keeps the deadlines of first-reply requests in one heap, and one
loop timer, armed for the earliest, fails the futures that are due and re-arms itself
(one timer per request cost a handle, a heap push and a cancel each); the caller removes
its entry however the request ends (reply, timeout, cancellation). A reply stream ends
at its deadline by itself; one that its caller abandoned is removed by
:meth:`Requests.expire`, which the node calls periodically (nothing here runs in a
finalizer). No sockets here: sending is the caller's.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

import anyio

from ..errors import ClosedError, RequestTimeout, ServiceError
from .hotpath import Inbox
from .message import Message, Responder
from .subscription import Mailbox

__all__ = ["ReplyStream", "Requests"]

_REPLY_QUEUE = 4096
# the deadline timer fails what is due up to this much later (the clock's resolution:
# a timer may fire that much early)
_RESOLUTION = time.get_clock_info("monotonic").resolution


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
        with anyio.move_on_after(max(remaining, 0.0)):
            msg = await self._get()
            self._seen += 1
            remote = msg.error
            if remote is not None:  # a responder failed: raised where its reply stands
                raise ServiceError.from_reply(self.subject, remote)
            return msg
        self.close()
        raise StopAsyncIteration

    async def __aenter__(self) -> ReplyStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def aclose(self) -> None:
        self.close()


Waiter = asyncio.Future[Message] | ReplyStream


class Requests:
    """Open requests of one node (see the module docstring)."""

    __slots__ = ("_armed", "_inbox", "_timer", "close", "on_reply", "requests", "timeouts")

    def __init__(self, node_uuid: str, responder: Responder) -> None:
        self._inbox = Inbox(node_uuid, responder)
        #: the receive path's hook for reply frames (the hot path's own)
        self.on_reply: Callable[[bytes, bytes, int, float], None] = self._inbox.on_reply
        #: ``close(serial)``: the request is over (answered, timed out, cancelled, not
        #: sent); the inbox's own method
        self.close: Callable[[int], object] = self._inbox.close
        self.requests = 0
        self.timeouts = 0
        self._timer: asyncio.TimerHandle | None = None
        self._armed = math.inf  # when the timer fires (inf: not armed)

    @property
    def inbox_filter(self) -> bytes:
        """The data-SUB filter that receives this node's replies."""
        return self._inbox.filter

    @property
    def replies_dropped(self) -> int:
        """Replies that came for no open request (late, duplicate, someone else's)."""
        return self._inbox.replies_dropped

    def __len__(self) -> int:
        return len(self._inbox)

    def open_first(self, subject: str, timeout: float
                   ) -> tuple[asyncio.Future[Message], int, bytes]:
        """Open a first-reply request: its future (failed with RequestTimeout after
        ``timeout`` seconds), serial and handle. The caller sends, awaits the future
        and, however that ends, calls :meth:`close` with the serial and cancels the
        future (a request whose send failed must not time out later)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Message] = loop.create_future()
        deadline = loop.time() + timeout
        serial, handle = self._inbox.open_timed(fut, deadline, subject, timeout)
        self.requests += 1
        if deadline < self._armed:
            self._arm(loop, deadline)
        return fut, serial, handle

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed = when
        self._timer = loop.call_at(when, self._deadlines, loop)

    def _deadlines(self, loop: asyncio.AbstractEventLoop) -> None:
        """The timer: fail the requests whose deadline has come, re-arm for the next."""
        self._timer = None
        self._armed = math.inf
        for fut, subject, timeout in self._inbox.due(loop.time() + _RESOLUTION):
            self.timeouts += 1
            fut.set_exception(RequestTimeout(
                f"no reply to request on {subject!r} within {timeout} s",
                subject=subject, timeout=timeout,
            ))
        when = self._inbox.next_deadline()
        if when is not None:
            self._arm(loop, when)

    def open_stream(
        self, subject: str, timeout: float, max_replies: int | None
    ) -> tuple[ReplyStream, bytes]:
        """Open a request whose replies go to a stream; returns it and the handle."""
        deadline = time.monotonic() + timeout
        serial_ref: list[int] = []

        def forget() -> None:
            self._inbox.close(serial_ref[0])

        stream = ReplyStream(subject, deadline, max_replies, forget)
        serial, handle = self._inbox.open(stream, deadline + 1.0)
        serial_ref.append(serial)
        self.requests += 1
        return stream, handle

    def expire(self, now: float) -> None:
        """End reply streams whose caller walked away (past deadline + 1 s)."""
        for waiter in self._inbox.expire(now):
            if isinstance(waiter, ReplyStream):
                waiter.close()

    def fail_all(self, error: ClosedError) -> None:
        """The node is closing: every waiter gets ``error``."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._armed = math.inf
        for waiter in self._inbox.drain():
            if isinstance(waiter, ReplyStream):
                waiter.close(error)
            elif not waiter.done():
                waiter.set_exception(error)
