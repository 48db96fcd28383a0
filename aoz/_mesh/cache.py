"""The publisher cache: the last frames a node published per subject, and its answers.

A node with ``publish_cache=N`` (off by default: see :class:`aoz.Settings`) keeps, for
every subject it publishes on, the last ``N`` publish frames exactly as they left (the
bytes the send path already built: storing one costs a deque append and no copy), and
at most ``publish_cache_bytes`` bytes in all. Subscribers read it with cache queries
(:mod:`aoz._protocol.cachequery`) for two things:

- **history** (``subscribe(pattern, history=N)``): the last frames of every subject
  matching a pattern, for a subscriber that joins late;
- **recovery** (``subscribe(..., recover=True)``): the frames of one subject numbered
  ``first .. first + count - 1``, which a subscriber saw missing (a sequence gap).

Bounds, never silent: a subject keeps at most ``N`` frames (the oldest leaves first);
past the byte bound the oldest frame of the subject first inserted goes, round robin
over subjects (``evicted`` counts both). What a query finds is what the cache still
has: a recovered range may come back partial, and the subscriber reports the rest lost.

:class:`PublishCache` is pure (no clock, no socket). :class:`CacheAnswers` turns a
query into reply payloads; the node sends them as replies. Queries reach the node as
requests on ``_AOZ.CACHE`` routed like any request (both hot-path twins route requests
by subject), to :class:`QueryInbox`, the routing table's subscriber of that subject.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from .._protocol.cachequery import (
    HISTORY,
    NO_CACHE,
    SUBJECT,
    CacheQuery,
    decode_query,
    encode_reply,
    in_range,
)
from .._protocol.sequence import PACK
from .._protocol.subjects import compile_pattern
from ..errors import AozError
from .hotpath import CacheStore
from .message import Message
from .subscription import Subscription

__all__ = ["CacheAnswers", "PublishCache", "QueryInbox"]


class PublishCache:
    """The last ``depth`` frames per subject, at most ``max_bytes`` in all. Pure.

    The frames and their bounds are a :class:`aoz._mesh.hotpath.CacheStore` (``store``), so
    that the send path's :class:`~aoz._mesh.hotpath.Sender` keeps each frame it numbers in the
    same call that sends it (the compiled twin's, without the interpreter); this class
    answers what the cache holds.

    >>> c = PublishCache(2, 1 << 20)
    >>> for i in range(3): c.add("A", b"A\\0\\x01\\0" + bytes([i]))
    >>> [f[-1] for f in c.latest("A", 5)], c.frames, c.evicted
    ([1, 2], 2, 1)
    """

    __slots__ = ("add", "deques", "store")

    def __init__(self, depth: int, max_bytes: int) -> None:
        self.store = CacheStore(depth, max_bytes)
        #: subject -> its last frames, oldest first (the store's)
        self.deques: dict[str, deque[bytes]] = self.store.deques
        #: keep a frame just published on a subject (the store's add)
        self.add: Callable[[str, bytes], None] = self.store.add

    @property
    def depth(self) -> int:
        return self.store.depth

    @property
    def max_bytes(self) -> int:
        return self.store.max_bytes

    @property
    def nbytes(self) -> int:
        """What the cached frames hold, in bytes."""
        return self.store.nbytes

    @property
    def evicted(self) -> int:
        """Frames that left at a bound (depth or bytes)."""
        return self.store.evicted

    @property
    def frames(self) -> int:
        return sum(len(d) for d in self.deques.values())

    @property
    def subjects(self) -> int:
        return len(self.deques)

    def latest(self, subject: str, n: int) -> list[bytes]:
        """The last ``n`` frames of ``subject``, oldest first."""
        d = self.deques.get(subject)
        if not d:
            return []
        return list(d)[-n:] if n < len(d) else list(d)

    def matching(self, query: CacheQuery) -> Iterator[tuple[str, deque[bytes]]]:
        """The subjects (and their frames) a HISTORY query's pattern matches."""
        pattern = compile_pattern(query.pattern, regex=query.regex)
        if pattern.kind == "exact":
            d = self.deques.get(pattern.text)
            if d:
                yield pattern.text, d
            return
        for subject, d in list(self.deques.items()):
            if pattern.matches(subject):
                yield subject, d

    def between(self, subject: str, first: int, count: int) -> list[bytes]:
        """The frames of ``subject`` numbered ``first .. first + count - 1`` that the
        cache still has, in order."""
        d = self.deques.get(subject)
        if not d:
            return []
        start = len(subject.encode()) + 3 + 1  # header, then the codec byte
        out = []
        for frame in d:
            if len(frame) >= start + PACK.size:
                seq = PACK.unpack_from(frame, start)[1]
                if in_range(seq, first, count):
                    out.append(frame)
        return out


class CacheAnswers:
    """A node's answers to cache queries (``publisher``: its sequence id)."""

    __slots__ = ("cache", "malformed", "publisher", "queries")

    def __init__(self, cache: PublishCache | None, publisher: int | None) -> None:
        self.cache = cache
        self.publisher = publisher or 0
        self.queries = 0
        self.malformed = 0  #: queries that could not be read (counted, not answered)

    def answer(self, payload: bytes) -> list[bytes] | None:
        """The reply payloads for a query, or ``None`` when this node stays silent
        (a range query for another publisher, or a malformed query, counted)."""
        try:
            q = decode_query(payload)
        except AozError:
            self.malformed += 1
            return None
        if q.publisher and q.publisher != self.publisher:
            return None  # someone else's stream
        self.queries += 1
        cache = self.cache
        if cache is None:
            return encode_reply(self.publisher, [], NO_CACHE)
        if q.kind == HISTORY:
            try:
                found = cache.matching(q)
                frames = [f for _, d in found for f in (list(d)[-q.n:] if q.n else ())]
            except AozError:  # a pattern this node cannot compile
                self.malformed += 1
                return None
        else:
            frames = cache.between(q.pattern, q.first, q.count)
        return encode_reply(self.publisher, frames)


class QueryInbox(Subscription):
    """The node's subscriber of ``_AOZ.CACHE`` in its routing table: it queues nothing,
    it hands each query (reply handle, payload) to ``on_query`` as it arrives. Not a
    user's subscription: the node leaves it out of ``statistics().subscriptions``."""

    __slots__ = ("_on_query", "ignored")

    def __init__(self, on_query: Callable[[str, bytes], None]) -> None:
        super().__init__(compile_pattern(SUBJECT), 1, "drop_newest", lambda: None)
        self._on_query = on_query
        self.ignored = 0  #: frames on the subject that were not requests

    def push(self, item: Message) -> None:
        if item.reply is None:
            self.ignored += 1
            return
        self._on_query(item.reply, item.payload)

    def push_many(self, items: list[Message]) -> None:
        for m in items:
            self.push(m)
