"""Reading a recording back by offsets (blocking: pyarrow file I/O; run it in a thread).

The Spark source (:mod:`aoz.spark.source`) and replay (:mod:`aoz.record.replay`) both
read through here: :class:`Catalog` lists a recording's visible files (a file's row
count is read from its Parquet footer once and cached, files never change),
:func:`read_slice` reads rows of one file, :func:`summarise` gives the per-stream
sequence summaries :class:`~aoz.record.gaps.GapTracker` judges, :func:`position_at_time`
finds where a partition reaches a receive time. What offsets mean is
:mod:`aoz.record.offsets` (pure).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from .gaps import StreamSummary
from .offsets import Position, RecordingFile, Slice, by_recorder, parse_name

__all__ = [
    "STREAMS_KEY",
    "Catalog",
    "position_at_time",
    "read_slice",
    "recording_schema",
    "stream_summaries",
    "summarise",
    "with_summaries",
]

_DATE_DIR = "date="


def _local(path: str | os.PathLike[str]) -> Path:
    text = os.fspath(path)
    for prefix in ("file://", "file:"):
        if text.startswith(prefix):
            return Path(text[len(prefix) :])
    return Path(text)


class Catalog:
    """The visible files of the recording under ``root`` (``date=*/part-*.parquet``, or
    ``part-*.parquet`` directly under it). Names that are not a recorder's are skipped."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = _local(root)
        self._rows: dict[str, int] = {}

    def files(self) -> list[RecordingFile]:
        import pyarrow.parquet as pq

        out: list[RecordingFile] = []
        seen: set[str] = set()
        for directory, date in self._directories():
            try:
                names = os.listdir(directory)
            except FileNotFoundError:
                continue
            for name in names:
                parsed = parse_name(name)
                if parsed is None:
                    continue
                stamp, recorder, number = parsed
                path = str(directory / name)
                rows = self._rows.get(path)
                if rows is None:
                    try:
                        rows = pq.read_metadata(path).num_rows
                    except FileNotFoundError:  # deleted between listing and reading
                        continue
                    self._rows[path] = rows
                seen.add(path)
                out.append(RecordingFile(recorder, number, stamp, rows, path, date))
        for path in self._rows.keys() - seen:  # deleted files: forget them
            del self._rows[path]
        return out

    def _directories(self) -> Iterator[tuple[Path, str]]:
        yield self.root, ""
        try:
            entries = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return
        for entry in entries:
            if entry.startswith(_DATE_DIR):
                yield self.root / entry, entry[len(_DATE_DIR) :]


def recording_schema(files: Sequence[RecordingFile]) -> Any:
    """The pyarrow schema of a recording: the union of its files' columns (the fixed
    ones when it has no file yet)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .schema import arrow_schema

    schemas = [arrow_schema()]
    for fs in by_recorder(files).values():  # one file per run: a run keeps its columns
        schemas.append(pq.read_schema(fs[-1].path))
    return pa.unify_schemas(schemas)


def read_slice(s: Slice, columns: Sequence[str] | None = None) -> Iterator[Any]:
    """The rows of ``s`` as pyarrow record batches (only the row groups it overlaps)."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(s.file.path)
    try:
        wanted = None if columns is None else [c for c in columns if c in pf.schema_arrow.names]
        first = 0
        for group in range(pf.metadata.num_row_groups):
            n = pf.metadata.row_group(group).num_rows
            lo, hi = max(s.start, first), min(s.stop, first + n)
            if hi > lo:
                table = pf.read_row_group(group, columns=wanted)
                yield from table.slice(lo - first, hi - lo).to_batches()
            first += n
            if first >= s.stop:
                break
    finally:
        pf.close()


#: Parquet footer key under which the recorder stores a file's stream summaries
STREAMS_KEY: Final = b"aoz.streams"


def stream_summaries(table: Any) -> list[StreamSummary]:
    """Per-stream sequence summaries of a recording table (rows without a sequence
    header are left out)."""
    import pyarrow.compute as pc

    if "publisher_seq" not in table.column_names:
        return []
    table = table.select(["subject", "publisher", "publisher_seq"])
    table = table.filter(pc.is_valid(table["publisher_seq"]))
    if not table.num_rows:
        return []
    grouped = table.group_by(["subject", "publisher"], use_threads=False).aggregate([
        ("publisher_seq", "min"), ("publisher_seq", "max"), ("publisher_seq", "count_distinct"),
    ])  # fmt: skip
    rows = grouped.to_pydict()
    columns = (rows["subject"], rows["publisher"], rows["publisher_seq_min"],
               rows["publisher_seq_max"], rows["publisher_seq_count_distinct"])  # fmt: skip
    return [StreamSummary(*values) for values in zip(*columns, strict=True)]


def with_summaries(table: Any) -> Any:
    """``table`` with its stream summaries in its schema metadata (the recorder writes
    them into each file's footer, so gap checks of whole files read no column)."""
    encoded = msgspec.json.encode(stream_summaries(table))
    return table.replace_schema_metadata({**(table.schema.metadata or {}), STREAMS_KEY: encoded})


def _footer_summaries(path: str) -> list[StreamSummary] | None:
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(STREAMS_KEY)
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw, type=list[StreamSummary])
    except msgspec.DecodeError:
        return None  # not ours after all: read the columns


def summarise(slices: Iterable[Slice]) -> list[StreamSummary]:
    """Per-stream sequence summaries of each slice, in slice order: from the file's
    footer for a whole file the recorder summarised, else from its columns."""
    import pyarrow as pa

    out: list[StreamSummary] = []
    for s in slices:
        if s.start == 0 and s.stop >= s.file.rows:
            known = _footer_summaries(s.file.path)
            if known is not None:
                out += known
                continue
        batches = list(read_slice(s, ["subject", "publisher", "publisher_seq"]))
        if batches:
            out += stream_summaries(pa.Table.from_batches(batches))
    return out


def position_at_time(files: Sequence[RecordingFile], micros: int) -> Position:
    """The position of a partition's first row received at or after ``micros`` (UTC
    microseconds since the epoch); its end when there is none. Files whose footer says
    they end earlier are skipped unread."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for f in files:
        meta = pq.read_metadata(f.path)
        names = meta.schema.to_arrow_schema().names
        if "receive_ts" not in names:
            continue
        col = names.index("receive_ts")
        newest = None
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(col).statistics
            if stats is None or not stats.has_min_max:
                newest = None
                break
            top = _micros(stats.max)
            newest = top if newest is None else max(newest, top)
        if newest is not None and newest < micros:
            continue
        times = pq.read_table(f.path, columns=["receive_ts"])["receive_ts"]
        at = pc.greater_equal(times.cast("int64"), micros)
        hits = pc.indices_nonzero(at)
        if len(hits):
            return Position(f.number, int(hits[0].as_py()))
    return Position(files[-1].number, files[-1].rows) if files else Position(0, 0)


def _micros(value: object) -> int:
    import datetime as dt

    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, int):
        return value
    raise TypeError(f"receive_ts statistics of an unexpected type: {type(value).__name__}")
