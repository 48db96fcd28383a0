"""Offsets into a recording: which message a reader is at, what a range of them holds. Pure.

Theory of operation. A :class:`~aoz.record.Recorder` names each file it writes
``part-<stamp>-<recorder id>-<n>.parquet``: ``recorder id`` is random per recorder run,
``n`` counts the run's files from 1. One run writes one file at a time and renames it
into place before it starts the next (:mod:`aoz.record.files`), so a file numbered
``n`` is never seen after a file numbered above ``n`` of the same run, and a visible
file never changes. Each recorder run is therefore an append-only log of messages --
a *partition*, like a Kafka partition -- and a message is addressed by
``(recorder id, file number, row)``.

A :class:`Position` ``(file, row)`` in one partition means "every row of the files
numbered below ``file``, and the first ``row`` rows of file ``file``, are before me".
Positions need not name an existing file: numbers left unused by a failed write, a
file that is not written yet, or the end of a file (``row`` = its rows) all work, so
offsets stay valid when the recorder rolls to a new file, is restarted (a restarted
recorder is a new partition, found like a new Kafka partition and read from its
start), or more recorders join. :data:`Offsets` maps each partition to a position;
a partition missing from a start offset starts at its beginning, one missing from
an end offset is not read.

``rows`` in the JSON form (:func:`to_json`) is the position's row index in its
partition (rows of the earlier files, plus ``row``): not part of the address, it
makes offsets comparable (:func:`rows_behind`) the way Kafka's numeric ones are.

Nothing here reads a file or a clock: callers list the files
(:mod:`aoz.record.reading`) and pass them in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

__all__ = [
    "FILE_NAME",
    "Offsets",
    "Plan",
    "Position",
    "RecordingFile",
    "Slice",
    "advance",
    "by_recorder",
    "cut",
    "earliest",
    "from_json",
    "index_of",
    "latest",
    "parse_name",
    "plan",
    "position_at",
    "rows_behind",
    "split",
    "to_json",
]

#: a recorder's file name: stamp (microseconds), recorder id, file number
FILE_NAME: Final = re.compile(r"^part-(\d+)-([0-9A-Za-z]+)-(\d+)\.parquet$")


class RecordingFile(msgspec.Struct, frozen=True):
    """One visible file of a recording."""

    recorder: str
    number: int
    stamp: int  #: microseconds since the epoch when the recorder began writing it
    rows: int
    path: str
    date: str = ""  #: the ``date=`` directory it is in (``YYYY-MM-DD``), if any


class Position(msgspec.Struct, frozen=True, order=True):
    """Before row ``row`` of file number ``file`` of one partition (see the module doc)."""

    file: int
    row: int


Offsets = dict[str, Position]


class Slice(msgspec.Struct, frozen=True):
    """Rows ``start`` (included) to ``stop`` (excluded) of one file."""

    file: RecordingFile
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


class Plan(msgspec.Struct, frozen=True):
    """What a range of offsets holds: its slices in recording order, and the files it
    should have held but that are gone (deleted before they were read)."""

    slices: list[Slice]
    lost: list[str]


def parse_name(name: str) -> tuple[int, str, int] | None:
    """``(stamp, recorder id, file number)`` of a recorder's file name, else None.

    >>> parse_name("part-1764000000000000-1a2b3c4d-000007.parquet")
    (1764000000000000, '1a2b3c4d', 7)
    >>> parse_name("other.parquet") is None
    True
    """
    m = FILE_NAME.match(name)
    return (int(m.group(1)), m.group(2), int(m.group(3))) if m else None


def by_recorder(files: Iterable[RecordingFile]) -> dict[str, list[RecordingFile]]:
    """Files per partition, each list by file number; partitions in the order their
    first files were written (so a restarted recorder comes after the run it replaced)."""
    out: dict[str, list[RecordingFile]] = {}
    for f in files:
        out.setdefault(f.recorder, []).append(f)
    for fs in out.values():
        fs.sort(key=lambda f: f.number)
    return dict(sorted(out.items(), key=lambda kv: (kv[1][0].stamp, kv[0])))


def cut(files: Iterable[RecordingFile], end: Mapping[str, Position] | None) -> list[RecordingFile]:
    """The files as they were when ``end`` was their latest offset (all with None): later
    files and recorders left out, the file ``end`` is in shortened to it."""
    if end is None:
        return list(files)
    out = []
    for f in files:
        pos = end.get(f.recorder)
        if pos is None or f.number > pos.file:
            continue
        out.append(
            msgspec.structs.replace(f, rows=min(f.rows, pos.row)) if f.number == pos.file else f
        )
    return out


def earliest(files: Iterable[RecordingFile]) -> Offsets:
    """Before the first row of every partition."""
    return {r: Position(fs[0].number, 0) for r, fs in by_recorder(files).items()}


def latest(files: Iterable[RecordingFile]) -> Offsets:
    """After the last row of every partition."""
    return {r: Position(fs[-1].number, fs[-1].rows) for r, fs in by_recorder(files).items()}


def index_of(files: Sequence[RecordingFile], pos: Position) -> int:
    """The row index of ``pos`` in a partition whose files (by number) are ``files``."""
    index = 0
    for f in files:
        if f.number < pos.file:
            index += f.rows
        elif f.number == pos.file:
            index += min(pos.row, f.rows)
    return index


def position_at(files: Sequence[RecordingFile], index: int) -> Position:
    """The position of row index ``index`` (clamped to the partition's end)."""
    if not files:
        return Position(0, 0)
    left = max(index, 0)
    for f in files:
        if left <= f.rows:
            return Position(f.number, left)
        left -= f.rows
    return Position(files[-1].number, files[-1].rows)


def _range_of(f: RecordingFile, start: Position, end: Position) -> tuple[int, int]:
    def cut(pos: Position) -> int:
        if f.number < pos.file:
            return f.rows
        return min(pos.row, f.rows) if f.number == pos.file else 0

    return cut(start), cut(end)


def plan(files: Iterable[RecordingFile], start: Mapping[str, Position],
         end: Mapping[str, Position]) -> Plan:  # fmt: skip
    """The rows after ``start`` and before ``end``, as slices in recording order.

    A start position inside a file that no longer exists (``row`` > 0) reports that file
    as lost: its rows after ``row`` were never read.
    """
    slices: list[Slice] = []
    lost: list[str] = []
    groups = by_recorder(files)
    for recorder, fs in groups.items():
        stop = end.get(recorder)
        if stop is None:
            continue
        begin = start.get(recorder, Position(0, 0))
        if begin.row > 0 and begin < stop and all(f.number != begin.file for f in fs):
            lost.append(f"recorder {recorder}: file {begin.file} (from row {begin.row})")
        for f in fs:
            lo, hi = _range_of(f, begin, stop)
            if hi > lo:
                slices.append(Slice(f, lo, hi))
    for recorder, pos in start.items():
        if recorder not in groups and pos.row > 0 and pos < end.get(recorder, pos):
            lost.append(f"recorder {recorder}: file {pos.file} (from row {pos.row})")
    return Plan(slices, lost)


def advance(files: Iterable[RecordingFile], start: Mapping[str, Position],
            max_rows: int | None) -> Offsets:  # fmt: skip
    """Where a read from ``start`` ends: the latest offsets, or, with ``max_rows``, at
    most that many rows further, shared among the partitions in proportion to what each
    has to read (at least one row each while the budget lasts, like Kafka's
    ``maxOffsetsPerTrigger``). Partitions only ``start`` knows keep their position."""
    groups = by_recorder(files)
    out: Offsets = dict(start)
    ahead: dict[str, tuple[int, int]] = {}
    for recorder, fs in groups.items():
        first = index_of(fs, start.get(recorder, Position(0, 0)))
        last = sum(f.rows for f in fs)
        ahead[recorder] = (first, max(last - first, 0))
        out[recorder] = Position(fs[-1].number, fs[-1].rows)
    total = sum(n for _, n in ahead.values())
    if max_rows is None or total <= max_rows:
        return out
    budget = max(max_rows, 0)
    for recorder, (first, n) in ahead.items():
        if n == 0:
            out[recorder] = start.get(recorder, position_at(groups[recorder], first))
            continue
        take = min(n, budget, max(1, n * max_rows // total))
        budget -= take
        out[recorder] = position_at(groups[recorder], first + take)
    return out


def split(slices: Sequence[Slice], parts: int) -> list[list[Slice]]:
    """Group ``slices`` into tasks: one per partition (recorder), and large ranges cut so
    that there are at least ``parts`` tasks when there are rows enough; each task's
    slices stay in recording order."""
    if not slices:
        return []
    per: dict[str, list[Slice]] = {}
    for s in slices:
        per.setdefault(s.file.recorder, []).append(s)
    total = sum(s.rows for s in slices)
    target = max(1, -(-total // max(parts, 1)))  # rows per task, rounded up
    tasks: list[list[Slice]] = []
    for group in per.values():
        task: list[Slice] = []
        room = target
        for s in group:
            lo = s.start
            while lo < s.stop:
                hi = min(s.stop, lo + room)
                task.append(Slice(s.file, lo, hi))
                room -= hi - lo
                lo = hi
                if room == 0:
                    tasks.append(task)
                    task, room = [], target
        if task:
            tasks.append(task)
    return tasks


def to_json(offsets: Mapping[str, Position], files: Iterable[RecordingFile]) -> dict[str, Any]:
    """The JSON form Spark checkpoints: ``{recorder: {"file": n, "row": r, "rows": i}}``."""
    groups = by_recorder(files)
    return {
        r: {"file": p.file, "row": p.row, "rows": index_of(groups.get(r, []), p)}
        for r, p in sorted(offsets.items())
    }


def from_json(value: Mapping[str, Any]) -> Offsets:
    """Offsets from their JSON form (``rows`` is ignored: positions address rows).

    >>> from_json({"1a2b3c4d": {"file": 3, "row": 10, "rows": 20010}})
    {'1a2b3c4d': Position(file=3, row=10)}
    """
    out: Offsets = {}
    for recorder, pos in value.items():
        if not isinstance(pos, Mapping) or not {"file", "row"} <= pos.keys():
            raise ValueError(f"offset of recorder {recorder!r} is not {{'file': n, 'row': r}}")
        file, row = pos["file"], pos["row"]
        if not (isinstance(file, int) and isinstance(row, int)) or file < 0 or row < 0:
            raise ValueError(f"offset of recorder {recorder!r}: file and row are integers >= 0")
        out[str(recorder)] = Position(file, row)
    return out


def rows_behind(
    latest_offset: Mapping[str, Any] | None, end_offset: Mapping[str, Any] | None
) -> int:
    """Rows recorded but not yet read: a query's lag, from the JSON ``latestOffset`` and
    ``endOffset`` of its source progress (``query.lastProgress["sources"][0]``).

    >>> latest = {"a": {"file": 2, "row": 5, "rows": 105}}
    >>> rows_behind(latest, {"a": {"file": 1, "row": 100, "rows": 100}})
    5
    """
    if not latest_offset:
        return 0
    end = end_offset or {}
    behind = 0
    for recorder, pos in latest_offset.items():
        done = end.get(recorder, {}).get("rows", 0) if isinstance(end.get(recorder), Mapping) else 0
        behind += max(int(pos.get("rows", 0)) - int(done), 0)
    return behind
