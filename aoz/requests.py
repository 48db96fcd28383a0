"""Request/reply bookkeeping (SPEC §2): the inbox table, reply streams and deadlines.

A node has one inbox, ``_INBOX.<uuid>``; every request takes the next serial from the
pure :class:`~aoz.protocol.inbox.InboxTable` and waits on what the table maps that
serial to: a future for :meth:`Node.request` (first reply), a :class:`ReplyStream`
for :meth:`Node.request_many`. The data plane hands every reply frame to
:meth:`Requests.on_reply`, which finds the waiter by serial; a reply nobody waits for
any more (late, duplicate, someone else's) is counted in ``replies_dropped``.

Deadlines: a single request arms one loop timer that fails its future (much cheaper
than a timeout scope per request with many in flight) and removes its own entry
however it ends. A reply stream ends at its deadline by itself; one that its caller
abandoned is removed by :meth:`Requests.expire`, which the node calls periodically
(nothing here runs in a finalizer). No sockets here: sending is the caller's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import anyio

from .errors import ClosedError, DecodeError, RequestTimeout, ServiceError
from .message import Message, Responder, data_start
from .protocol.frames import Kind
from .protocol.inbox import InboxTable
from .subscription import Mailbox

__all__ = ["ReplyStream", "Requests"]

_REPLY_QUEUE = 4096


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

    __slots__ = ("_inbox", "_responder", "replies_dropped", "requests", "timeouts")

    def __init__(self, node_uuid: str, responder: Responder) -> None:
        self._inbox: InboxTable[Waiter] = InboxTable(node_uuid)
        self._responder = responder
        self.requests = 0
        self.timeouts = 0
        self.replies_dropped = 0

    @property
    def inbox_filter(self) -> bytes:
        """The data-SUB filter that receives this node's replies."""
        return self._inbox.filter

    def __len__(self) -> int:
        return len(self._inbox)

    async def wait_first(
        self, subject: str, timeout: float, send: Callable[[bytes], None]
    ) -> Message:
        """Open a request, ``send(handle)`` it and return the first reply."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Message] = loop.create_future()
        serial, handle = self._inbox.open(fut, time.monotonic() + timeout)
        self.requests += 1
        timer = loop.call_later(timeout, self._expire_one, fut, subject, timeout)
        try:
            send(handle)
            return await fut
        finally:
            timer.cancel()
            self._inbox.close(serial)

    def _expire_one(self, fut: asyncio.Future[Message], subject: str, timeout: float) -> None:
        if not fut.done():
            self.timeouts += 1
            fut.set_exception(RequestTimeout(
                f"no reply to request on {subject!r} within {timeout} s",
                subject=subject, timeout=timeout,
            ))

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

    def on_reply(self, subject: bytes, frame: bytes, start: int, now: float) -> None:
        """A reply frame arrived on ``subject`` (a reply handle of ours, or not)."""
        try:
            serial = self._inbox.serial_of(subject)
        except DecodeError:
            self.replies_dropped += 1  # someone else's reply or garbage
            return
        waiter = self._inbox.lookup(serial)
        if waiter is None:
            self.replies_dropped += 1
            return
        msg = Message(frame, len(subject), start, data_start(frame, start), Kind.REPLY, None,
                      now, self._responder)
        if isinstance(waiter, ReplyStream):
            waiter.push(msg)
        else:
            self._inbox.close(serial)
            if not waiter.done():
                waiter.set_result(msg)

    def expire(self, now: float) -> None:
        """End reply streams whose caller walked away (past deadline + 1 s)."""
        for waiter in self._inbox.expire(now):
            if isinstance(waiter, ReplyStream):
                waiter.close()

    def fail_all(self, error: ClosedError) -> None:
        """The node is closing: every waiter gets ``error``."""
        for waiter in self._inbox.drain():
            if isinstance(waiter, ReplyStream):
                waiter.close(error)
            elif not waiter.done():
                waiter.set_exception(error)
