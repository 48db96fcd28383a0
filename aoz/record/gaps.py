"""Gaps in a recording: messages an aoz publisher sent that the recording lacks. Pure.

An aoz publisher numbers its messages per subject from 1 (:mod:`aoz._protocol.sequence`)
and the recorder stores that number (``publisher_seq``) with the publisher id
(``publisher``). Within one stream -- one (``subject``, ``publisher``) -- the numbers a
recording holds should therefore follow each other; a jump is a gap (lost before the
recorder wrote it: a full queue, a cut link, a recorder that was down).

A reader summarises each range it reads per stream (:class:`StreamSummary`: lowest,
highest, how many distinct numbers) and feeds the summaries in recording order to a
:class:`GapTracker`, which remembers the highest number of each stream and reports

* a *jump*: a range whose lowest number is more than one above the highest seen, and
* a *hole*: a range with fewer distinct numbers than its lowest-to-highest span.

A stream's first range is its start, never a gap (a recorder that joins late has not
lost anything it was asked to record). Ranges that go backwards or repeat numbers
(two recorders of the same subject, a replay) are not gaps either; the highest number
only moves up. Numbers wrap at 2**32: a backward jump of more than 2**31 is a new
start. Payloads without aoz's sequence header (OZ programs') have no ``publisher`` and
are not judged.

>>> t = GapTracker()
>>> t.feed([StreamSummary("MD.IBM", "01", 1, 10, 10)])
[]
>>> [(g.after, g.before, g.missing) for g in t.feed([StreamSummary("MD.IBM", "01", 14, 20, 7)])]
[(10, 14, 3)]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from .._protocol.sequence import gap

__all__ = ["Gap", "GapTracker", "StreamSummary"]

_HALF: Final = 2**31


class StreamSummary(msgspec.Struct, frozen=True):
    """The sequence numbers one range of a recording holds for one stream."""

    subject: str
    publisher: str
    first: int  #: lowest number
    last: int  #: highest number
    count: int  #: distinct numbers


class Gap(msgspec.Struct, frozen=True):
    """``missing`` numbers of a stream lacking between ``after`` and ``before``."""

    subject: str
    publisher: str
    after: int
    before: int
    missing: int

    def __str__(self) -> str:
        return (
            f"{self.missing} message(s) of publisher {self.publisher} on {self.subject} "
            f"missing between sequence {self.after} and {self.before}"
        )


class GapTracker:
    """The highest sequence number read per stream, and the gaps new ranges show.

    Bounded: when it would track more than ``max_streams`` streams it forgets them all
    (the next range of each is a new start, never a false gap).
    """

    def __init__(self, max_streams: int = 1_000_000) -> None:
        self.max_streams = max_streams
        self.highest: dict[tuple[str, str], int] = {}

    def seed(self, summaries: Iterable[StreamSummary]) -> None:
        """Take what was read before (no gaps reported: they were judged then)."""
        for s in summaries:
            self._raise(s)

    def feed(self, summaries: Iterable[StreamSummary]) -> list[Gap]:
        """Judge new ranges (in recording order) and remember them."""
        gaps: list[Gap] = []
        for s in summaries:
            key = (s.subject, s.publisher)
            span = s.last - s.first + 1
            if span < _HALF and s.count < span:
                gaps.append(Gap(s.subject, s.publisher, s.first, s.last, span - s.count))
            last = self.highest.get(key)
            if last is not None and last < s.first:
                missing = gap(last, s.first)
                if missing:
                    gaps.append(Gap(s.subject, s.publisher, last, s.first, missing))
            self._raise(s)
        return gaps

    def _raise(self, s: StreamSummary) -> None:
        key = (s.subject, s.publisher)
        last = self.highest.get(key)
        if last is None and len(self.highest) >= self.max_streams:
            self.highest.clear()
        if last is None or last < s.last:
            self.highest[key] = s.last
