"""The ``aoz`` Spark source: read what :class:`~aoz.record.Recorder` wrote, batch or streaming.

::

    quotes = (spark.readStream.format("aoz")
                   .option("startingOffsets", "earliest")    # or latest, a time, JSON
                   .option("maxRowsPerTrigger", 100_000)
                   .load("/shared/recordings"))
    day = (spark.read.format("aoz")
                .option("startingOffsets", "2026-11-25T09:00:00Z")
                .option("endingOffsets", "2026-11-25T17:30:00Z")
                .load("/shared/recordings"))

Schema: the recording's columns (:mod:`aoz.record.schema`; typed payload columns where
the recorder was given Struct types, the union over recorder runs), then ``date``
(the receive date, as Spark's Parquet reader gives it), ``recorder`` (the partition:
recorder run id) and ``offset`` (the message's address in it: ``file << 32 | row``).
A schema given with ``.schema(...)`` may name a subset of these columns.

Offsets (:mod:`aoz.record.offsets`): one position per recorder run,
``{"<recorder id>": {"file": n, "row": r, "rows": i}}`` -- the partition, the file
number and the row address a single message; ``rows`` is its index in the partition.
Files never change once visible and a run numbers its files in the order it writes
them, so offsets stay valid across file rolls, recorder restarts (a new run is a new
partition, read from its start) and added recorders.

Options:

==================  =============================================================
``startingOffsets``  ``earliest``, ``latest`` (streaming default), a time (ISO 8601,
                     naive = UTC, or a number: milliseconds since the epoch, Kafka's
                     unit), or JSON offsets. Batch default ``earliest``. A time
                     starts each partition at its first message received then or
                     later. ``startingTimestamp`` (ms) is accepted too.
``endingOffsets``    batch only: ``latest`` (default), a time (excluded) or JSON.
                     ``endingTimestamp`` (ms) is accepted too.
``maxRowsPerTrigger`` at most this many rows per micro-batch, shared among partitions
                     in proportion to what each has to read.
``failOnDataLoss``   ``true`` (default): fail the query when a range it reads has a
                     gap in an aoz publisher's sequence numbers (:mod:`aoz.record.gaps`)
                     or starts in a file that was deleted. ``false``: read on.
``minPartitions``    split the rows of a batch into at least this many Spark tasks
                     (default: one per recorder run with rows to read).
==================  =============================================================

Guarantees. A streaming query restarted from its checkpoint re-plans the batch it had
not committed from the same offsets over the same immutable files, so each recorded
message is read once (exactly once into an idempotent or transactional sink). Gap
checks judge each range in recording order against the highest number read before it;
the driver takes each file's per-stream summary from its Parquet footer (the recorder
writes it; part of a file, or an older file, is summarised from its ``subject``,
``publisher`` and ``publisher_seq`` columns), and after a restart it first summarises
what the query had read (footers only, for whole files; only with ``failOnDataLoss``).
Lag: the source reports its latest offset, so the progress shows
``latestOffset`` beside ``endOffset``; :func:`aoz.record.offsets.rows_behind` turns
them into rows. Python data sources cannot add custom metrics (Kafka's
``*OffsetsBehindLatest``) to the progress in Spark 4.3.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from .._extras import missing_extra

try:
    from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError as exc:
    raise missing_extra(exc, "spark", "aoz.spark.source") from exc

from ..errors import ConfigError, DataLossError
from ..record import offsets as off
from ..record.gaps import GapTracker
from ..record.reading import Catalog, position_at_time, read_slice, recording_schema, summarise

__all__ = [
    "AozBatchReader",
    "AozInputPartition",
    "AozStreamReader",
    "SourceOptions",
    "source_schema",
]

log = logging.getLogger("aoz.spark")

#: columns the source adds after the recording's own
EXTRA_COLUMNS: Final = ("date", "recorder", "offset")

_SPARK_TYPES: Final = {
    "string": "STRING",
    "large_string": "STRING",
    "int64": "BIGINT",
    "int32": "INT",
    "double": "DOUBLE",
    "float": "FLOAT",
    "bool": "BOOLEAN",
    "binary": "BINARY",
    "large_binary": "BINARY",
    "date32[day]": "DATE",
}


def _truthy(value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise ConfigError(f"aoz source: expected true or false, not {value!r}")


class SourceOptions:
    """The source's options, checked once (see the module doc)."""

    def __init__(self, options: Mapping[str, str], *, streaming: bool) -> None:
        path = options.get("path")
        if not path:
            raise ConfigError("aoz source: give the recording's directory: .load(path)")
        self.path = path
        self.starting = (
            options.get("startingOffsets")
            or (f"{options['startingTimestamp']}" if options.get("startingTimestamp") else None)
            or ("latest" if streaming else "earliest")
        )
        self.ending = options.get("endingOffsets") or (
            f"{options['endingTimestamp']}" if options.get("endingTimestamp") else "latest"
        )
        if streaming and options.get("endingOffsets"):
            raise ConfigError("aoz source: endingOffsets is for batch reads only")
        try:
            rows = options.get("maxRowsPerTrigger")
            self.max_rows = int(rows) if rows else None
            self.min_partitions = int(options.get("minPartitions", "1"))
        except ValueError as exc:
            raise ConfigError(f"aoz source: {exc}") from None
        if self.max_rows is not None and self.max_rows < 1:
            raise ConfigError("aoz source: maxRowsPerTrigger must be >= 1")
        self.fail_on_data_loss = _truthy(options.get("failOnDataLoss", "true"))
        for spec in (self.starting, self.ending):
            _parse_spec(spec)  # fail at the start of the query, not at its first batch


def _parse_spec(spec: str) -> str | int | dict[str, off.Position]:
    """``"earliest"``/``"latest"``, microseconds since the epoch, or explicit offsets."""
    text = spec.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    if text.startswith("{"):
        try:
            return off.from_json(json.loads(text))
        except ValueError as exc:
            raise ConfigError(f"aoz source: bad offsets {text!r}: {exc}") from None
    try:
        return int(float(text) * 1000)  # milliseconds, Kafka's unit
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"aoz source: offsets are earliest, latest, a time or JSON, not {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return round(when.timestamp() * 1_000_000)


def resolve(spec: str, files: Sequence[off.RecordingFile], *, end: bool = False) -> off.Offsets:
    """Positions for an option value over the files there are now."""
    parsed = _parse_spec(spec)
    if parsed == "earliest":
        return off.earliest(files)
    if parsed == "latest":
        return off.latest(files)
    if isinstance(parsed, dict):
        return (off.latest(files) | parsed) if end else parsed
    assert isinstance(parsed, int)
    return {r: position_at_time(fs, parsed) for r, fs in off.by_recorder(files).items()}


def source_schema(options: Mapping[str, str]) -> str:
    """The Spark DDL of the recording at ``options["path"]`` (see the module doc)."""
    opts = SourceOptions(options, streaming=False)
    schema = recording_schema(Catalog(opts.path).files())
    cols = []
    for field in schema:
        kind = str(field.type)
        spark = "TIMESTAMP" if kind.startswith("timestamp") else _SPARK_TYPES.get(kind)
        if spark is None:
            log.warning("aoz source: column %s of type %s is left out", field.name, kind)
            continue
        cols.append(f"`{field.name}` {spark}")
    cols += ["`date` DATE", "`recorder` STRING", "`offset` BIGINT"]
    return ", ".join(cols)


# ---------------------------------------------------------------------------- executors
class AozInputPartition(InputPartition):
    """One Spark task: slices ``(path, start, stop, recorder, file number, date)``."""

    def __init__(self, slices: list[tuple[str, int, int, str, int, str]]) -> None:
        super().__init__(slices)
        self.slices = slices


def _partitions(tasks: list[list[off.Slice]]) -> list[AozInputPartition]:
    def where(s: off.Slice) -> tuple[str, int, int, str, int, str]:
        return (s.file.path, s.start, s.stop, s.file.recorder, s.file.number, s.file.date)

    return [AozInputPartition([where(s) for s in task]) for task in tasks]


def read_partition(partition: AozInputPartition, schema: Any) -> Iterator[Any]:
    """The partition's rows as record batches of exactly ``schema`` (executor side)."""
    import numpy as np
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(schema, timezone="UTC")
    stored = [f.name for f in target if f.name not in EXTRA_COLUMNS]
    for path, start, stop, recorder, number, date in partition.slices:
        file = off.RecordingFile(recorder, number, 0, stop, path, date)
        row = start
        day = dt.date.fromisoformat(date) if date else None
        for batch in read_slice(off.Slice(file, start, stop), stored):
            n = batch.num_rows
            names = batch.schema.names
            arrays = []
            for field in target:
                if field.name == "date":
                    arrays.append(pa.repeat(pa.scalar(day, pa.date32()), n))
                elif field.name == "recorder":
                    arrays.append(pa.repeat(pa.scalar(recorder, field.type), n))
                elif field.name == "offset":
                    base = number << 32
                    arrays.append(pa.array(np.arange(base + row, base + row + n, dtype=np.int64)))
                elif field.name in names:
                    arrays.append(batch.column(field.name).cast(field.type))
                else:
                    arrays.append(pa.nulls(n, field.type))
            row += n
            yield pa.RecordBatch.from_arrays(arrays, schema=target)


# ---------------------------------------------------------------------------- driver
class _Planner:
    """Driver side of both readers: files, positions, and the data-loss check."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.catalog = Catalog(opts.path)
        self.tracker: GapTracker | None = None
        self.tracked_to: off.Offsets | None = None
        self.planned: tuple[off.Offsets, off.Offsets, list[AozInputPartition]] | None = None

    def tasks(self, files: list[off.RecordingFile], start: off.Offsets, end: off.Offsets,
              *, fresh: bool) -> list[AozInputPartition]:  # fmt: skip
        """Plan the range; check it for data loss (``fresh``: it starts the query, so
        nothing read before it counts)."""
        if self.planned is not None and self.planned[:2] == (start, end):
            return self.planned[2]  # asked again for the same batch: judged already
        planned = off.plan(files, start, end)
        problems: list[object] = list(planned.lost)
        if self.opts.fail_on_data_loss:
            if self.tracker is None or self.tracked_to != start:
                self.tracker = GapTracker()
                if not fresh:
                    self.tracker.seed(summarise(off.plan(files, {}, start).slices))
            problems += self.tracker.feed(summarise(planned.slices))
            self.tracked_to = dict(end)
        if problems:
            text = "; ".join(map(str, problems[:5])) + (" ..." if len(problems) > 5 else "")
            if self.opts.fail_on_data_loss:
                raise DataLossError(
                    f"aoz source: the recording at {self.opts.path} lacks messages: {text}. "
                    "Set failOnDataLoss=false to read on.",
                    gaps=problems,
                )
            log.warning("aoz source: data lost at %s: %s", self.opts.path, text)
        parts = max(self.opts.min_partitions, 1)
        tasks = _partitions(off.split(planned.slices, parts))
        self.planned = (dict(start), dict(end), tasks)
        return tasks


class AozBatchReader(DataSourceReader):
    """``spark.read.format("aoz")``: the rows between ``startingOffsets`` and
    ``endingOffsets``."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.opts = SourceOptions(options, streaming=False)
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        planner = _Planner(self.opts)
        files = planner.catalog.files()
        start = resolve(self.opts.starting, files)
        end = resolve(self.opts.ending, files, end=True)
        return planner.tasks(files, start, end, fresh=True)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, AozInputPartition)
        return read_partition(partition, self.schema)


class AozStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("aoz")``: new rows of a recording, micro-batch by
    micro-batch (see the module doc for offsets and guarantees). With
    ``trigger(availableNow=True)`` it reads what was recorded when the query started."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.opts = SourceOptions(options, streaming=True)
        self.schema = schema
        self._planner: _Planner | None = None
        self._initial: dict[str, Any] | None = None
        self._target: off.Offsets | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = off.latest(self.planner.catalog.files())

    def _files(self) -> list[off.RecordingFile]:
        """The visible files; with ``availableNow``, cut at what was there at the start."""
        return off.cut(self.planner.catalog.files(), self._target)

    @property
    def planner(self) -> _Planner:
        if self._planner is None:
            self._planner = _Planner(self.opts)
        return self._planner

    def initialOffset(self) -> dict[str, Any]:
        files = self.planner.catalog.files()
        self._initial = off.to_json(resolve(self.opts.starting, files), files)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.opts.max_rows) if self.opts.max_rows else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        files = self._files()
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = off.advance(files, off.from_json(start), rows)
        return off.to_json(end, files)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        files = self.planner.catalog.files()
        return off.to_json(off.latest(files), files) or None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        files = self.planner.catalog.files()
        fresh = self._initial is not None and start == self._initial
        return self.planner.tasks(files, off.from_json(start), off.from_json(end), fresh=fresh)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, AozInputPartition)
        return read_partition(partition, self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # files are the recorder's; the source never deletes them
