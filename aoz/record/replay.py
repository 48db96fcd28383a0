"""Replay a recording onto the mesh: :func:`replay` (and ``aoz replay``).

::

    async with aoz.connect() as node:
        stats = await replay(node, "recordings", ["MD.*.IBM"],
                             start="2026-11-25T09:00:00Z", end="2026-11-25T09:05:00Z",
                             speed=1.0)            # original pace; None: as fast as possible

Each recorded message of the time range whose subject matches one of the patterns is
published again on its original subject with its original payload bytes (the codec
byte and the body, sent as :class:`aoz.Verbatim`, so a consumer decodes it as it
decoded the original). The original sequence header is not re-sent: replayed
messages are unsequenced, and a replay is told apart from the live feed by the node
that sends it, not by numbers that would collide with the publisher's.

Order and pace. Messages are sent in receive-time order across every recorder run (a
merge of the runs, which are each in the order they were received); at ``speed`` 1.0
each is sent when as much time has passed since the first as passed between their
receive times (2.0: twice as fast), with ``None`` as fast as the node sends. Files are
read in a worker thread, one at a time per run, so memory holds one file's rows per
run and the event loop never waits for the disk. The range is the source's
(:mod:`aoz.spark.source`): from each run's first message received at or after
``start`` to its first received at or after ``end``.
"""

from __future__ import annotations

import datetime as dt
import heapq
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import anyio
import msgspec

from .._protocol.codecs import Verbatim
from .._protocol.subjects import compile_pattern
from ..errors import ConfigError
from .offsets import Slice, by_recorder, earliest, latest, plan
from .reading import Catalog, position_at_time, read_slice

if TYPE_CHECKING:
    from .._mesh.node import Node

__all__ = ["ReplayStatistics", "due", "replay", "to_micros"]

_Row = tuple[int, str, bytes]  # receive time (us), subject, payload


class ReplayStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """What a replay sent."""

    published: int  #: messages sent
    skipped: int  #: messages of the range whose subject matched no pattern
    subjects: int  #: distinct subjects sent
    first: float | None  #: receive time (s since the epoch) of the first message sent
    last: float | None  #: ... and of the last
    elapsed: float  #: seconds the replay took


def to_micros(when: float | str | dt.datetime | None) -> int | None:
    """A time as UTC microseconds since the epoch: seconds (float), ISO 8601 (naive is
    UTC) or a datetime.

    >>> to_micros("1970-01-01T00:00:01.5Z"), to_micros(2.0), to_micros(None)
    (1500000, 2000000, None)
    """
    if when is None:
        return None
    if isinstance(when, int | float):
        return round(when * 1_000_000)
    if isinstance(when, str):
        try:
            when = dt.datetime.fromisoformat(when.strip())
        except ValueError:
            raise ConfigError(f"not a time (ISO 8601 or seconds): {when!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return round(when.timestamp() * 1_000_000)


def due(first_micros: int, micros: int, speed: float | None) -> float:
    """Seconds after the first message at which a message received ``micros`` is sent.

    >>> due(0, 2_000_000, 1.0), due(0, 2_000_000, 4.0), due(0, 2_000_000, None)
    (2.0, 0.5, 0.0)
    """
    if not speed:
        return 0.0
    return max(micros - first_micros, 0) / 1_000_000 / speed


class _Run:
    """One recorder run's rows of the range, a file at a time."""

    def __init__(self, slices: list[Slice]) -> None:
        self.slices = slices
        self.rows: list[_Row] = []
        self.i = 0

    def load_next(self) -> bool:
        """Read the next file's rows (blocking); False when there is none."""
        import pyarrow as pa

        while self.slices:
            s = self.slices.pop(0)
            batches = list(read_slice(s, ["subject", "receive_ts", "payload"]))
            if not batches:
                continue
            table = pa.Table.from_batches(batches)
            times = table["receive_ts"].cast(pa.int64()).to_pylist()
            self.rows = list(
                zip(times, table["subject"].to_pylist(), table["payload"].to_pylist(), strict=True)
            )
            self.i = 0
            if self.rows:
                return True
        return False


async def replay(
    node: Node,
    directory: str | os.PathLike[str],
    subjects: str | Sequence[str] = (">",),
    *,
    start: float | str | dt.datetime | None = None,
    end: float | str | dt.datetime | None = None,
    speed: float | None = 1.0,
) -> ReplayStatistics:
    """Publish the recorded messages of ``[start, end)`` on ``subjects`` (patterns, as
    for :meth:`aoz.Node.subscribe`) again, on their own subjects (see the module doc).

    ``start``/``end``: seconds since the epoch, ISO 8601 text or a datetime (None: the
    recording's first/last message). ``speed``: 1.0 the original pace, 2.0 twice as
    fast, None as fast as possible. Returns what was sent. Nothing is lost to a slow
    subscriber on a node with ``send_policy="block"`` (``aoz replay`` uses one); with the
    default ``"drop"`` a subscriber whose queue is full loses messages and counts them.
    """
    if speed is not None and speed <= 0:
        raise ConfigError("replay speed must be > 0 (or None: as fast as possible)")
    patterns = [compile_pattern(p) for p in ([subjects] if isinstance(subjects, str) else subjects)]
    if not patterns:
        raise ConfigError("replay needs at least one subject pattern")
    lo, hi = to_micros(start), to_micros(end)
    runs = await anyio.to_thread.run_sync(_plan, directory, lo, hi)
    began = time.monotonic()
    heap: list[tuple[int, int, _Run]] = []
    for n, run in enumerate(runs):
        if await anyio.to_thread.run_sync(run.load_next):
            heapq.heappush(heap, (run.rows[0][0], n, run))
    published = skipped = 0
    sent_subjects: set[str] = set()
    first: int | None = None
    last: int | None = None
    matches: dict[str, bool] = {}
    while heap:
        _, n, run = heapq.heappop(heap)
        micros, subject, payload = run.rows[run.i]
        run.i += 1
        if run.i < len(run.rows):
            heapq.heappush(heap, (run.rows[run.i][0], n, run))
        elif await anyio.to_thread.run_sync(run.load_next):
            heapq.heappush(heap, (run.rows[0][0], n, run))
        ok = matches.get(subject)
        if ok is None:
            ok = matches[subject] = any(p.matches(subject) for p in patterns)
        if not ok:
            skipped += 1
            continue
        if first is None:
            first = micros
        wait = began + due(first, micros, speed) - time.monotonic()
        if wait > 0.001:
            await anyio.sleep(wait)  # pacing, not synchronisation
        await node.publish(subject, Verbatim(payload))
        published += 1
        last = micros
        sent_subjects.add(subject)
    return ReplayStatistics(
        published=published,
        skipped=skipped,
        subjects=len(sent_subjects),
        first=None if first is None else first / 1e6,
        last=None if last is None else last / 1e6,
        elapsed=time.monotonic() - began,
    )


def _plan(directory: str | os.PathLike[str], lo: int | None, hi: int | None) -> list[_Run]:
    files = Catalog(directory).files()
    groups = by_recorder(files)
    start = earliest(files) if lo is None else {
        r: position_at_time(fs, lo) for r, fs in groups.items()
    }  # fmt: skip
    end = latest(files) if hi is None else {
        r: position_at_time(fs, hi) for r, fs in groups.items()
    }  # fmt: skip
    per: dict[str, list[Slice]] = {}
    for s in plan(files, start, end).slices:
        per.setdefault(s.file.recorder, []).append(s)
    return [_Run(slices) for slices in per.values()]
