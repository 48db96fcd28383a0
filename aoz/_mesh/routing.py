"""The routing table: which subscriptions a received subject goes to. Pure.

Subscriptions are exact subjects, NATS-style token patterns or OZ regexes
(:mod:`aoz._protocol.subjects`). Matching a wildcard costs a pattern test per
subscription, so the table keeps a per-subject cache: the first frame on a subject
computes the tuple of every subscription it goes to (exact ones first, then
wildcards in subscription order) and every later frame on that subject costs one dict
lookup, exactly like an exact subscription. Adding or removing a subscription
clears the cache; the cache is also cleared when it grows past ``cache_max``
subjects, which bounds its memory (a feed of more distinct subjects than that pays
the pattern tests again, never more).

Wildcards never see aoz's own traffic (``_INBOX.``, ``_NAMING``, ``_AOZ.``; SPEC §7). A subject
that is not valid UTF-8 routes to ``None``: the caller counts it as malformed.

The table holds any subscriber type, so it is tested without sockets::

    >>> from aoz._protocol.subjects import compile_pattern
    >>> t: RoutingTable[str] = RoutingTable()
    >>> t.add(compile_pattern("MD.*.IBM"), "wild")
    >>> t.add(compile_pattern("MD.NYSE.IBM"), "exact")
    >>> t.route(b"MD.NYSE.IBM"), t.route(b"MD.LSE.IBM"), t.route(b"X")
    (('exact', 'wild'), ('wild',), ())
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from .._protocol.subjects import Pattern, hidden_from_wildcards

__all__ = ["RoutingTable"]

S = TypeVar("S")

_CACHE_MAX = 65536


class RoutingTable(Generic[S]):
    """Subjects and patterns to subscribers, with a per-subject cache (see module doc)."""

    __slots__ = ("_exact", "_pinned", "_wild", "cache", "cache_max")

    def __init__(self, cache_max: int = _CACHE_MAX) -> None:
        self._exact: dict[bytes, tuple[S, ...]] = {}
        # (id of the subscriber, pattern text) -> (pattern, subscriber), in subscription
        # order: adding and removing one of 10,000 wildcards costs O(1), not O(n)
        self._wild: dict[tuple[int, str], tuple[Pattern, S]] = {}
        #: subject bytes -> subscribers; read directly by the receive hot path
        self.cache: dict[bytes, tuple[S, ...] | None] = {}
        self.cache_max = cache_max
        # aoz's own receivers of a reserved subject (publisher heartbeats): routed like
        # an exact subscription, never listed, never cleared
        self._pinned: dict[bytes, tuple[S, ...]] = {}

    def pin(self, subject: bytes, sub: S) -> None:
        """Route ``subject`` (one of aoz's reserved subjects) to ``sub`` for the
        table's lifetime; ``sub`` is not one of the table's subscribers (not iterated,
        not returned by :meth:`clear`)."""
        self._pinned[subject] = (sub,)
        self.cache.pop(subject, None)

    def add(self, pattern: Pattern, sub: S) -> None:
        """Route ``pattern``'s subjects to ``sub`` too."""
        if pattern.kind == "exact":
            key = pattern.text.encode()
            self._exact[key] = (*self._exact.get(key, ()), sub)
        else:
            self._wild[(id(sub), pattern.text)] = (pattern, sub)
        self.cache.clear()

    def remove(self, pattern: Pattern, sub: S) -> None:
        """Stop routing to ``sub`` (a no-op if it is not in the table)."""
        if pattern.kind == "exact":
            key = pattern.text.encode()
            rest = tuple(s for s in self._exact.get(key, ()) if s is not sub)
            if rest:
                self._exact[key] = rest
            else:
                self._exact.pop(key, None)
        else:
            self._wild.pop((id(sub), pattern.text), None)
        self.cache.clear()

    def route(self, subject: bytes) -> tuple[S, ...] | None:
        """Every subscriber of ``subject``; ``None`` when it is not valid UTF-8."""
        try:
            return self.cache[subject]
        except KeyError:
            pass
        out: tuple[S, ...] | None
        try:
            text = subject.decode()
        except UnicodeDecodeError:
            out = None
        else:
            out = self._pinned.get(subject) or self._exact.get(subject, ())
            if self._wild and not hidden_from_wildcards(text):  # also _QUEUE. (aoz.queues)
                out = out + tuple(s for p, s in self._wild.values() if p.matches(text))
        if len(self.cache) >= self.cache_max:
            self.cache.clear()
        self.cache[subject] = out
        return out

    def clear(self) -> list[S]:
        """Empty the table; returns every subscriber it held (each once)."""
        subs = list(self)
        self._exact = {}
        self._wild = {}
        self.cache.clear()
        return subs

    def __iter__(self) -> Iterator[S]:
        seen: set[int] = set()
        for group in self._exact.values():
            for s in group:
                if id(s) not in seen:
                    seen.add(id(s))
                    yield s
        for _, s in self._wild.values():
            if id(s) not in seen:
                seen.add(id(s))
                yield s

    def __len__(self) -> int:
        return sum(1 for _ in self)
