"""The send path: every frame a node publishes, and the policy when a subscriber is full.

Owns the node's :class:`~aoz.protocol.builder.FrameBuilder` (frames and their sequence
numbers), the hot path's :class:`~aoz.hotpath.Sender` (frames onto the XPUB, counters,
the yield cadence of publishing loops), and the back-pressure policy: with
``send_policy="drop"`` ZeroMQ drops for a full subscriber and a publish never waits;
with ``"block"`` a full subscriber makes ``publish`` wait for room (``XPUB_NODROP``),
``publish_nowait`` raise :class:`~aoz.errors.WouldBlock` (the number is reused: nothing
was sent), and ``block=False`` drop and count (``dropped_out``). Every publishing call of
the node (:meth:`SendPath.publish`, ``publish_nowait``, ``publish_many``,
``publish_frames``, requests and replies) goes through here, and every bulk send through
one loop (:meth:`SendPath.send_all`).

It owns no socket: the data plane attaches the XPUB (:meth:`attach`) and calls
:meth:`room` when the XPUB's fd fires (a drained pipe may mean room again).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import anyio

from .errors import ConfigError, UsageError, WouldBlock
from .hotpath import Sender
from .protocol.builder import FrameBuilder
from .protocol.codecs import Codec
from .protocol.frames import publish_subject_end

if TYPE_CHECKING:
    import zmq

    from . import _hotpath
    from .cache import PublishCache

__all__ = ["CachingSendPath", "SendPath"]

_ROOM_BACKSTOP = 0.05  # seconds: a missed fd edge delays a blocked send at most this


def _no_room_to_wait() -> ConfigError:
    """``publish(block=True)`` on a node that never waits for room."""
    return ConfigError(
        "publish(block=True) needs a node with send_policy='block' "
        "(aoz.connect(send_policy='block'))"
    )


class SendPath:
    """Publishing, one path for every call (see the module docstring)."""

    def __init__(self, builder: FrameBuilder, *, blocking: bool) -> None:
        self.builder = builder
        self.sender = Sender(builder)
        self.blocking = blocking  # send_policy == "block"
        self.dropped_out = 0  # publishes dropped at a full queue (block node, block=False)
        self.blocked_sends = 0  # publishes that had to wait for room
        self.waiters = 0  # sends waiting for room now
        # set when the publisher may have room again (blocked sends wait on it)
        self._room = asyncio.Event()
        #: ``await node.publish`` without headers or ``block``: the hot path's own entry,
        #: so the commonest publish costs no call of this class's. On a node that never
        #: waits for room, ``Sender.publish`` (build, send, count; True when the caller
        #: should yield); on a blocking node ``Sender.offer``, the same, but a frame
        #: ZeroMQ would not take now comes back (numbered, not sent) for
        #: :meth:`when_ready`. ``None`` where :meth:`publish` decides.
        self.direct: Callable[[str, object, Codec | None], bool | bytes] | None = (
            self.sender.offer if blocking else self.sender.publish
        )

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
        On a blocking node a full subscriber raises WouldBlock and nothing was sent or
        numbered."""
        try:
            if headers:
                self.sender.send(self.builder.publish_with(subject, data, codec, headers))
                return self.sender.due()
            return self.sender.publish(subject, data, codec)
        except WouldBlock as exc:
            self.builder.rewind(subject)  # not sent: a retry reuses the number
            exc.subject = subject
            raise

    def publish(self, subject: str, data: object, codec: Codec | None,
                block: bool | None, headers: Mapping[str, str] | None = None
                ) -> Awaitable[None] | None:
        """``await node.publish``, by the node's policy and ``block`` for this call.

        Sends now and returns ``None`` in the common case; returns what the caller must
        await when it has to wait (for room, or its turn to yield to the loop). Not a
        coroutine itself: one coroutine per publish was a fifth of its cost.
        """
        if not self.blocking:
            if block:
                raise _no_room_to_wait()
            if headers:
                self.sender.send(self.builder.publish_with(subject, data, codec, headers))
                due = self.sender.due()
            else:
                due = self.sender.publish(subject, data, codec)
            return asyncio.sleep(0) if due else None  # the loop's turn, now and then
        frame = (self.builder.publish_with(subject, data, codec, headers) if headers
                 else self.sender.build(subject, data, codec))
        try:
            self.sender.send(frame)
        except WouldBlock:
            if block is False:
                self.dropped_out += 1  # numbered: subscribers count it as lost
            else:
                return self._send_when_ready(frame, then_yield=self.sender.due())
        if self.sender.due():
            return asyncio.sleep(0)
        return None

    def when_ready(self, frame: bytes) -> Awaitable[None]:
        """``frame`` (which ``direct`` handed back on a blocking node) sent once there
        is room, then the loop's turn if one is due: what :meth:`publish` does after a
        refused send."""
        return self._send_when_ready(frame, then_yield=self.sender.due())

    async def publish_many(self, subject: str, items: Iterable[object],
                           codec: Codec | None) -> None:
        """Every item, in order, built first (nothing is numbered if one cannot be
        encoded), then sent as :meth:`send_all` does."""
        await self.send_all(self.sender.frames(subject, items, codec))
        await asyncio.sleep(0)  # a tight loop of batches must not starve the node

    async def publish_frames(self, frames: Sequence[bytes], timeout: float | None) -> int:
        """Ready-made publish frames, as they are; checked before anything is sent."""
        for frame in frames:
            if publish_subject_end(frame) < 0:
                raise UsageError(
                    f"not a publish frame: {frame[:40]!r}; build frames with "
                    "aoz.protocol.frames.encode_publish"
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


class CachingSendPath(SendPath):
    """The send path of a node with a publisher cache (``publish_cache=N``): every
    numbered publish frame is kept in :class:`aoz.cache.PublishCache` as it was built
    (one append; no copy, no second encode). A node without a cache uses
    :class:`SendPath` itself, so the cache costs nothing when it is off. Frames given
    to ``publish_frames`` are not numbered by this node and are not kept.
    """

    def __init__(self, builder: FrameBuilder, *, blocking: bool, cache: PublishCache) -> None:
        super().__init__(builder, blocking=blocking)
        self.cache = cache
        self._cached = _caching_publish(self.sender, cache)
        # node.publish's common case: build, send, keep (a blocking node: publish())
        self.direct = None if blocking else self._cached

    def _build(self, subject: str, data: object, codec: Codec | None,
               headers: Mapping[str, str] | None) -> bytes:
        if headers:
            return self.builder.publish_with(subject, data, codec, headers)
        return self.sender.build(subject, data, codec)

    def publish_nowait(self, subject: str, data: object, codec: Codec | None,
                       headers: Mapping[str, str] | None = None) -> bool:
        frame = self._build(subject, data, codec, headers)
        try:
            self.sender.send(frame)
        except WouldBlock as exc:
            self.builder.rewind(subject)  # not sent: a retry reuses the number
            exc.subject = subject
            raise
        self.cache.add(subject, frame)
        return self.sender.due()

    def publish(self, subject: str, data: object, codec: Codec | None,
                block: bool | None, headers: Mapping[str, str] | None = None
                ) -> Awaitable[None] | None:
        if not self.blocking:
            if block:
                raise _no_room_to_wait()
            if not headers:
                return asyncio.sleep(0) if self._cached(subject, data, codec) else None
            frame = self.builder.publish_with(subject, data, codec, headers)
            self.sender.send(frame)
            self.cache.add(subject, frame)
            return asyncio.sleep(0) if self.sender.due() else None
        frame = self._build(subject, data, codec, headers)
        # numbered for good from here (sent, dropped with block=False, or sent after a
        # wait): kept, so that a subscriber that misses it can recover it
        self.cache.add(subject, frame)
        try:
            self.sender.send(frame)
        except WouldBlock:
            if block is False:
                self.dropped_out += 1
            else:
                return self._send_when_ready(frame, then_yield=self.sender.due())
        if self.sender.due():
            return asyncio.sleep(0)
        return None

    async def publish_many(self, subject: str, items: Iterable[object],
                           codec: Codec | None) -> None:
        frames = self.sender.frames(subject, items, codec)
        add = self.cache.add
        for frame in frames:
            add(subject, frame)
        await self.send_all(frames)
        await asyncio.sleep(0)


def _caching_publish(sender: _hotpath.Sender, cache: PublishCache
                     ) -> Callable[[str, object, Codec | None], bool]:
    """Build, send and keep one publish; True when the caller should yield. A closure
    over what it touches, with :meth:`PublishCache.add` inlined: as calls, they were
    half the cost of a publish."""
    build, send, add = sender.build, sender.send, cache.add
    due: Callable[[], bool] = sender.due
    deques, depth = cache.deques, cache.depth

    def publish(subject: str, data: object, codec: Codec | None) -> bool:
        frame = build(subject, data, codec)
        send(frame)
        d = deques.get(subject)
        if d is None:
            add(subject, frame)
        else:
            if len(d) == depth:
                cache.bytes -= len(d[0])  # the append pushes it out
                cache.evicted += 1
            d.append(frame)
            cache.bytes += len(frame)
            if cache.bytes > cache.max_bytes:
                cache.shrink()
        return due()

    return publish
