"""The send path: every frame a node publishes, and the policy when a subscriber is full.

Owns the node's :class:`~aoz._protocol.builder.FrameBuilder` (frames and their sequence
numbers), the hot path's :class:`~aoz._mesh.hotpath.Sender` (frames onto the XPUB, counters,
the yield cadence of publishing loops), and the back-pressure policy: with
``send_policy="drop"`` ZeroMQ drops for a full subscriber and a publish never waits;
with ``"block"`` a full subscriber makes ``publish`` wait for room (``XPUB_NODROP``),
``publish_nowait`` raise :class:`~aoz.errors.WouldBlock` (the number is reused: nothing
was sent), and ``block=False`` drop and count (``dropped_out``). Every publishing call of
the node (:meth:`SendPath.publish`, ``publish_nowait``, ``publish_many``,
``publish_frames``, requests and replies) goes through here, and every bulk send through
one loop (:meth:`SendPath.send_all`).

A node with a publisher cache (``publish_cache=N``, :mod:`aoz._mesh.cache`) hands the cache's
store to the Sender, which keeps every frame it numbers for good in the same call that
sends it: the cache is an option of the one path, not a second one. A frame numbered but
refused by ZeroMQ on a blocking node is kept too (it is sent after a wait, or dropped
and counted with ``block=False``: a subscriber that misses it can recover it); one
``publish_nowait`` refused is not (the number is reused). Frames given to
``publish_frames`` are not numbered by this node and are not kept.

It owns no socket: the data plane attaches the XPUB (:meth:`attach`) and calls
:meth:`room` when the XPUB's fd fires (a drained pipe may mean room again).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from .._protocol.builder import FrameBuilder
from .._protocol.codecs import Codec
from .._protocol.frames import publish_subject_end
from ..errors import ConfigError, UsageError, WouldBlock
from .hotpath import Sender

if TYPE_CHECKING:
    import zmq

    from .cache import PublishCache

__all__ = ["SendPath"]

_ROOM_BACKSTOP = 0.05  # seconds: a missed fd edge delays a blocked send at most this


def _no_room_to_wait() -> ConfigError:
    """``publish(block=True)`` on a node that never waits for room."""
    return ConfigError(
        "publish(block=True) needs a node with send_policy='block' "
        "(aoz.connect(send_policy='block'))"
    )


class SendPath:
    """Publishing, one path for every call (see the module docstring)."""

    def __init__(self, builder: FrameBuilder, *, blocking: bool,
                 cache: PublishCache | None = None) -> None:
        self.builder = builder
        self.sender = Sender(builder)
        self.cache = cache
        if cache is not None:
            self.sender.store = cache.store  # every numbered frame kept as it is sent
        self.blocking = blocking  # send_policy == "block"
        self.dropped_out = 0  # publishes dropped at a full queue (block node, block=False)
        self.blocked_sends = 0  # publishes that had to wait for room
        self.waiters = 0  # sends waiting for room now
        # set when the publisher may have room again (blocked sends wait on it)
        self._room = asyncio.Event()

    def attach(self, pub: zmq.Socket[bytes]) -> None:
        """The XPUB frames leave from (the data plane's)."""
        self.sender.pub = pub

    def room(self) -> None:
        """The XPUB's fd fired: a full pipe may have drained; blocked sends re-check."""
        if self.waiters:
            self._room.set()

    @property
    def messages_out(self) -> int:
        return self.sender.messages_out

    @property
    def bytes_out(self) -> int:
        return self.sender.bytes_out

    # ------------------------------------------------------------------ publish
    def publish_nowait(self, subject: str, data: object, codec: Codec | None,
                       headers: Mapping[str, str] | None = None) -> bool:
        """Build and send without waiting; True when the caller should yield.
        On a blocking node a full subscriber raises WouldBlock and nothing was sent,
        numbered or kept."""
        try:
            if headers:
                return self.sender.put(
                    subject, self.builder.publish_with(subject, data, codec, headers))
            return self.sender.publish(subject, data, codec)
        except WouldBlock as exc:
            self.builder.rewind(subject)  # not sent: a retry reuses the number
            exc.subject = subject
            raise

    def publish(self, subject: str, data: object, codec: Codec | None,
                block: bool | None, headers: Mapping[str, str] | None = None
                ) -> Coroutine[Any, Any, None] | None:
        """``await node.publish``, by the node's policy and ``block`` for this call.

        Sends now and returns ``None`` in the common case; returns what the caller must
        await when it has to wait (for room, or its turn to yield to the loop). Not a
        coroutine itself: one coroutine per publish was a fifth of its cost.
        """
        if block and not self.blocking:
            raise _no_room_to_wait()
        try:
            if headers:
                due = self.sender.put(
                    subject, self.builder.publish_with(subject, data, codec, headers))
            else:
                due = self.sender.publish(subject, data, codec)
        except WouldBlock:
            return self.refused(subject, block)
        return asyncio.sleep(0) if due else None  # the loop's turn, now and then

    def refused(self, subject: str, block: bool | None) -> Coroutine[Any, Any, None] | None:
        """ZeroMQ refused the publish just built (``sender.unsent``, numbered for good,
        kept): ``block=False`` drops it and counts it, otherwise it is sent when there
        is room (what the caller awaits)."""
        frame = self.sender.unsent
        self.sender.unsent = None
        assert frame is not None  # set by the send that raised WouldBlock
        self.sender.keep(subject, frame)  # a subscriber that misses it can recover it
        if block is False:
            self.dropped_out += 1  # numbered: subscribers count it as lost
            return asyncio.sleep(0) if self.sender.due() else None
        return self._send_when_ready(frame, then_yield=self.sender.due())

    async def publish_many(self, subject: str, items: Iterable[object],
                           codec: Codec | None) -> None:
        """Every item, in order, built (and kept) first (nothing is numbered if one
        cannot be encoded), then sent as :meth:`send_all` does."""
        await self.send_all(self.sender.frames(subject, items, codec))
        await asyncio.sleep(0)  # a tight loop of batches must not starve the node

    async def publish_frames(self, frames: Sequence[bytes], timeout: float | None) -> int:
        """Ready-made publish frames, as they are; checked before anything is sent."""
        for frame in frames:
            if publish_subject_end(frame) < 0:
                raise UsageError(
                    f"not a publish frame: {frame[:40]!r}; build frames with "
                    "aoz._protocol.frames.encode_publish"
                )
        return await self.send_all(frames, timeout)

    async def send_all(self, frames: Sequence[bytes], timeout: float | None = None) -> int:
        """Send ``frames`` in order, waiting for room where the policy says so, at most
        ``timeout`` seconds in all; returns how many were sent."""
        sent = 0
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while True:
                sent = self.sender.send_batch(frames, sent)
                if sent >= len(frames):
                    break
                await self._send_when_ready(frames[sent])
                sent += 1
        return sent

    def send(self, frame: bytes) -> None:
        """One frame now (requests, replies); WouldBlock on a full blocking node."""
        self.sender.send(frame)

    async def _send_when_ready(self, frame: bytes, *, then_yield: bool = False) -> None:
        """Send, waiting for room while a subscriber's queue is full (block policy).

        A subscriber that stays frozen is cut by the publisher's heartbeat after three
        heartbeat intervals, which frees the wait.
        """
        self.waiters += 1
        self.blocked_sends += 1
        try:
            while True:
                try:
                    self.sender.send(frame)
                    return
                except WouldBlock:
                    pass
                # An XPUB reports POLLOUT even when a pipe is full, so ZMQ_EVENTS cannot
                # tell; a pipe that drains wakes the socket's fd, whose callback calls
                # room(). The backstop bounds a missed edge.
                self._room.clear()
                with anyio.move_on_after(_ROOM_BACKSTOP):
                    await self._room.wait()
        finally:
            self.waiters -= 1
        if then_yield:
            await asyncio.sleep(0)
