"""The ``aoz`` Spark sink: publish the rows of a DataFrame (batch or streaming) on the mesh.

::

    # on every host: aoz sidecar --bind tcp://127.0.0.1:5758 --naming tcp://nsd:5756
    (bars.writeStream.format("aoz")
         .option("subject_column", "symbol").option("subject_prefix", "BARS.")
         .option("checkpointLocation", "/shared/ck/bars")
         .start())
    # consumers: aoz.spark.delivery.Deduplicator releases each committed row once

Options: ``subject`` (a fixed subject) or ``subject_column`` (+ ``subject_prefix``),
``sidecar`` (default ``tcp://127.0.0.1:5758``; a comma-separated list spreads
partitions over several sidecars, the first one carries commit notices), ``commit_subject`` (default
``<subject or prefix>._COMMIT``), ``codec`` (``msgpack`` or ``json``), ``columns``
(comma-separated subset to send), ``chunk_rows`` (10000), ``window`` (chunks in flight,
4: up to 40,000 rows with the default chunks), ``rows_per_frame`` (1000: the most rows
of one subject the sidecar packs into one ZeroMQ frame, :mod:`aoz._protocol.packed`; aoz
subscribers unpack them into one message per row; 1 sends a frame per row, for
subscribers that are not aoz nodes) and
``timeout`` (seconds, default 10: how long a task or the driver waits for the sidecar
before failing).

No Spark task joins the mesh. Each task streams Arrow record batches, encodes each row
(a msgpack or JSON map of the row plus an envelope under ``"_aoz"``: query id, batch id,
partition, a random 63-bit task-attempt id, row index; one ``map`` over the batch's
columns, no per-row Python), and hands chunks of rows to the sidecar on its host
(:mod:`aoz.spark.sidecar`), which frames and publishes them without decoding. The
sidecar acknowledges a chunk only once every frame is in its node's ZeroMQ queues,
which never drop (``XPUB_NODROP``: a slow subscriber makes the sidecar wait, and the
task stops after ``window`` unacknowledged chunks); a task whose acknowledgements do
not add up to the rows it sent within ``timeout`` fails, so Spark retries it. Before a
write (and before each streaming commit) the driver probes its sidecar and fails within
``timeout`` when none answers; ``abort`` probes for at most one second and does not
wait again. When every task succeeded, the driver publishes a
:class:`~aoz.spark.delivery.CommitNotice` on the commit subject through its sidecar,
naming for each partition the committed attempt id and its acknowledged row count; a
failed batch gets an ``abort`` notice; both carry the query id (from the tasks, or the
checkpoint's ``metadata`` file when no task succeeded).

Why this is exactly-once. Spark delivers at least once and in no promised order: a
failed task is retried and, after a shuffle, its retry may produce the same rows in
another order; a speculative or a killed attempt leaves a prefix of its rows on the
wire; a restarted driver replays the last uncommitted batch with the same batch id but
new attempts; rows reach the consumer through several sidecars (one per host) whose
streams are not ordered with respect to each other or to the commit notice. None of
these matters because rows are never identified by their position: a consumer
(:class:`~aoz.spark.delivery.Deduplicator`) keys rows by (query, batch, attempt id,
index), holds them, and when the batch's notice has arrived *and* every committed
attempt's rows are in (counted against the notice, so a notice that overtakes rows
from another sidecar simply waits for them), it releases exactly those attempts' rows,
once, and forgets the batch's other attempts. Attempt ids are random, so no retry,
replay or restarted driver can reuse one; Spark commits exactly one attempt per
partition, and the driver publishes the notice only after all tasks were acknowledged,
so the named rows were all accepted by a sidecar.

What can still go wrong is reported, never silent. Rows the sidecar could not hand to
ZeroMQ within its ``publish_timeout`` are not acknowledged, so their task fails and
its attempt is never named. A killed sidecar loses the rows it held, but its tasks then
miss acknowledgements and fail, and the retry goes through the restarted sidecar; the
notice names only the retry. A replayed batch (restarted driver, a commit log that was
lost) gets a second notice that consumers ignore, counting its rows as duplicates. A
subscriber that loses rows after ZeroMQ took them (its own queue overflowed, or it
joined late) sees the batch as incomplete: :meth:`Deduplicator.gaps` lists it, and
``statistics()`` counts duplicates, discarded attempts and evictions.
"""

from __future__ import annotations

import json
import logging
import secrets
import struct
import time
import uuid as uuidlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any, Final, Literal

import msgspec
import zmq

from .._extras import missing_extra
from .._mesh.errmap import mapped

try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceStreamArrowWriter,
        WriterCommitMessage,
    )
except ImportError as exc:
    raise missing_extra(exc, "spark", "aoz.spark.sink") from exc

from .._protocol.codecs import Codec
from .._protocol.packed import MAX_ROWS
from ..errors import AozError, ConfigError, TransportError, WaitTimeout
from .arrow_encode import buffers_of, encode_rows
from .delivery import (
    ENVELOPE_KEY,
    CommitNotice,
    Deduplicator,
    SinkEnvelope,
    commit_notice_of,
    envelope_of,
)
from .sidecar import (
    ACK,
    DEFAULT_SIDECAR,
    NACK,
    PUBLISH,
    SidecarStatistics,
    SinkSidecar,
    encode_chunk,
    encode_table,
    probe_sidecar,
    sink_sidecar,
)

__all__ = [
    "DEFAULT_SIDECAR",
    "AozDataSource",
    "CommitNotice",
    "Deduplicator",
    "SidecarStatistics",
    "SinkEnvelope",
    "SinkSidecar",
    "commit_notice_of",
    "commit_subject_for",
    "envelope_of",
    "publish_dataframe",
    "register",
    "sink_sidecar",
]

log = logging.getLogger("aoz.spark")

_U64: Final = struct.Struct("!Q")
_MSGPACK: Final = msgspec.msgpack.Encoder()
_JSON: Final = msgspec.json.Encoder()
_ABORT_PROBE: Final = 1.0
#: the defaults of the options ``chunk_rows``, ``window`` and ``rows_per_frame``
CHUNK_ROWS: Final = 10_000
WINDOW: Final = 4
ROWS_PER_FRAME: Final = 1000


def commit_subject_for(options: Mapping[str, str]) -> str:
    """The commit subject of a sink configured with ``options``."""
    if options.get("commit_subject"):
        return options["commit_subject"]
    base = options.get("subject") or options.get("subject_prefix", "").rstrip(".")
    if not base:
        raise ConfigError("set `commit_subject`, `subject` or `subject_prefix` on the aoz sink")
    return f"{base}._COMMIT"


# ---------------------------------------------------------------------------- task side
class _SidecarClient:
    """A task's (or the driver's) connection to its sidecar (blocking)."""

    def __init__(self, endpoint: str, timeout: float, window: int = 4) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.window = window
        self.acked = 0
        self._seq = 0
        self._inflight: dict[int, int] = {}
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
        try:
            with mapped(f"cannot connect to the aoz sink sidecar {endpoint}"):
                self._sock.connect(endpoint)
        except AozError:
            self.close()
            raise

    def send(self, chunk: list[bytes], rows: int) -> None:
        """Hand a chunk (:func:`~aoz.spark.sidecar.encode_chunk`) of ``rows`` rows over;
        blocks while ``window`` chunks are unacknowledged."""
        if not rows:
            return
        self._seq += 1
        self._inflight[self._seq] = rows
        try:
            self._sock.send_multipart([PUBLISH, _U64.pack(self._seq), *chunk], copy=False)
        except zmq.Again:
            raise self._timeout("took no rows") from None
        while len(self._inflight) >= self.window:
            self._receive()

    def finish(self) -> int:
        """Wait for every acknowledgement; return the rows the sidecar published."""
        while self._inflight:
            self._receive()
        return self.acked

    def _receive(self) -> None:
        if not self._sock.poll(int(self.timeout * 1000)):
            raise self._timeout("acknowledged nothing")
        parts = self._sock.recv_multipart()
        if len(parts) < 3 or len(parts[1]) != 8 or len(parts[2]) != 8:
            raise TransportError(f"aoz sink sidecar at {self.endpoint} sent a malformed reply")
        seq, n = _U64.unpack(parts[1])[0], _U64.unpack(parts[2])[0]
        expected = self._inflight.pop(seq, None)
        if expected is None:
            raise TransportError(f"aoz sink sidecar at {self.endpoint} sent an unknown chunk {seq}")
        self.acked += n
        if parts[0] == NACK:
            reason = parts[3].decode(errors="replace") if len(parts) > 3 else "?"
            raise TransportError(
                f"aoz sink sidecar at {self.endpoint} published {n} of {expected} rows: {reason}"
            )
        if parts[0] != ACK or n != expected:
            raise TransportError(
                f"aoz sink sidecar at {self.endpoint} acknowledged {n} of {expected} rows"
            )

    def _timeout(self, what: str) -> WaitTimeout:
        return WaitTimeout(
            f"the aoz sink sidecar at {self.endpoint} {what} for {self.timeout} s; is "
            "`aoz sidecar` running on this host, on that port?",
            timeout=self.timeout,
        )

    def close(self) -> None:
        self._sock.close(linger=0)
        self._ctx.term()


class _Options:
    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.subject = options.get("subject")
        self.subject_column = options.get("subject_column")
        self.subject_prefix = options.get("subject_prefix", "")
        if not self.subject and not self.subject_column:
            raise ConfigError("the aoz sink needs option `subject` or `subject_column`")
        self.commit_subject = commit_subject_for(options)
        self.sidecars = [e.strip() for e in options.get("sidecar", DEFAULT_SIDECAR).split(",")]
        if not all(self.sidecars):
            raise ConfigError("aoz sink: `sidecar` is an endpoint or a comma-separated list")
        self.sidecar = self.sidecars[0]  # the driver's (commit notices)
        codec = options.get("codec", "msgpack").lower()
        if codec not in ("msgpack", "json"):
            raise ConfigError(f"aoz sink codec must be msgpack or json, not {codec!r}")
        self.codec = Codec.MSGPACK if codec == "msgpack" else Codec.JSON
        names = [f.name for f in schema.fields]
        cols = options.get("columns")
        self.columns = [c.strip() for c in cols.split(",")] if cols else names
        missing = [c for c in (*self.columns, self.subject_column or names[0]) if c not in names]
        if missing:
            raise ConfigError(f"aoz sink: no column(s) {missing} in {names}")
        try:
            self.chunk_rows = max(1, int(options.get("chunk_rows", str(CHUNK_ROWS))))
            self.window = max(1, int(options.get("window", str(WINDOW))))
            self.pack = int(options.get("rows_per_frame", str(ROWS_PER_FRAME)))
            self.timeout = float(options.get("timeout", "10"))
        except ValueError as exc:
            raise ConfigError(f"aoz sink: {exc}") from None
        if self.timeout <= 0:
            raise ConfigError("aoz sink: timeout must be > 0 seconds")
        if not 1 <= self.pack <= MAX_ROWS:
            raise ConfigError(f"aoz sink: rows_per_frame must be 1..{MAX_ROWS}, not {self.pack}")
        self.checkpoint = options.get("checkpointLocation") or options.get("path")

    def encode(self, value: object) -> bytes:
        return _MSGPACK.encode(value) if self.codec is Codec.MSGPACK else _JSON.encode(value)


class _RowEncoder:
    """Arrow record batches -> sidecar chunks: each row's body (codec byte excluded: the
    sidecar adds it with the subject's header) and its subject's number."""

    def __init__(self, opts: _Options, env: tuple[str, int, int, int]) -> None:
        self.opts = opts
        self.env = env
        fields = [(f"c{i}", Any) for i in range(len(opts.columns))] + [("aoz_", Any)]
        rename = {f"c{i}": name for i, name in enumerate(opts.columns)} | {"aoz_": ENVELOPE_KEY}
        self.row_type = msgspec.defstruct("AozRow", fields, rename=rename)
        self.encoder = _MSGPACK if opts.codec is Codec.MSGPACK else _JSON
        self.rows = 0

    def chunk(self, batch: Any) -> tuple[list[bytes], int]:
        """The chunk parts for ``batch`` and its row count: encoded by Arrow kernels when
        the column types allow (:mod:`aoz.spark.arrow_encode`), else row by row."""
        fast = self._vectorised(batch) if self.opts.codec is Codec.MSGPACK else None
        return fast if fast is not None else self._rowwise(batch)

    def _vectorised(self, batch: Any) -> tuple[list[bytes], int] | None:
        import pyarrow.compute as pc

        n = batch.num_rows
        order = None
        if self.opts.subject_column:
            values = batch.column(self.opts.subject_column)
            if values.null_count:
                return None
            encoded = pc.dictionary_encode(values)
            prefix = self.opts.subject_prefix
            subjects = [f"{prefix}{v}" for v in encoded.dictionary.to_pylist()]
            if len(subjects) > 65_535:
                return None
            indices = encoded.indices
            if self.opts.pack > 1 and len(subjects) > 1:
                # rows grouped by subject (a stable sort: each subject's rows keep their
                # order), so the sidecar packs each subject's rows into few frames
                order = pc.sort_indices(indices)
                indices = indices.take(order)
            index = indices.to_numpy(zero_copy_only=False).astype("<u2").tobytes()
        else:
            subjects, index = [self.opts.subject or ""], bytes(2 * n)
        q, b, p, t = self.env
        env = b"\x95" + b"".join(map(_MSGPACK.encode, (q, b, p, t)))
        bodies = encode_rows(batch, self.opts.columns, ENVELOPE_KEY, env, self.rows)
        if bodies is None:
            return None
        if order is not None:
            bodies = bodies.take(order)
        self.rows += n
        offsets, blob = buffers_of(bodies)
        table = encode_table(int(self.opts.codec), subjects, self.opts.pack)
        return [table, index, offsets, blob], n

    def _rowwise(self, batch: Any) -> tuple[list[bytes], int]:
        n = batch.num_rows
        q, b, p, t = self.env
        cols = [batch.column(name).to_pylist() for name in self.opts.columns]
        envs = zip(repeat(q), repeat(b), repeat(p), repeat(t), range(self.rows, self.rows + n))
        bodies = list(map(self.encoder.encode, map(self.row_type, *cols, envs)))
        self.rows += n
        if self.opts.subject_column:
            values = batch.column(self.opts.subject_column).to_pylist()
            numbers: dict[object, int] = {}
            index = [numbers.setdefault(v, len(numbers)) for v in values]
            prefix = self.opts.subject_prefix
            subjects = [f"{prefix}{v}" for v in numbers]
        else:
            subjects, index = [self.opts.subject or ""], [0] * n
        if len(subjects) > 65_535:
            raise ConfigError("aoz sink: at most 65535 subjects per chunk; lower chunk_rows")
        return encode_chunk(int(self.opts.codec), subjects, index, bodies, self.opts.pack), n


@dataclass
class AozCommitMessage(WriterCommitMessage):
    query_id: str
    batch_id: int
    partition: int
    task: int  #: the attempt's random id (the rows' envelope ``task``)
    rows: int  #: rows the sidecar acknowledged


def _write_batches(
    opts: _Options, batches: Iterator[Any], query_id: str, batch_id: int
) -> AozCommitMessage:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx else 0
    task = secrets.randbits(63)
    encoder = _RowEncoder(opts, (query_id, batch_id, partition, task))
    endpoint = opts.sidecars[partition % len(opts.sidecars)]
    client = _SidecarClient(endpoint, opts.timeout, opts.window)
    try:
        for batch in batches:
            for start in range(0, batch.num_rows, opts.chunk_rows):
                client.send(*encoder.chunk(batch.slice(start, opts.chunk_rows)))
        acked = client.finish()
    finally:
        client.close()
    if acked != encoder.rows:  # pragma: no cover - _receive checks every chunk
        raise TransportError(f"aoz sink: sidecar acknowledged {acked} of {encoder.rows} rows")
    return AozCommitMessage(query_id, batch_id, partition, task, acked)


def _checkpoint_query_id(checkpoint: str | None) -> str:
    """The streaming query id Spark keeps in ``<checkpoint>/metadata`` (driver side)."""
    if not checkpoint:
        return ""
    path = checkpoint.removeprefix("file://").removeprefix("file:")
    try:
        return str(json.loads(Path(path, "metadata").read_text()).get("id", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def _announce(
    opts: _Options,
    messages: list[WriterCommitMessage | None],
    batch_id: int,
    status: Literal["commit", "abort"],
    query_id: str,
) -> CommitNotice:
    done = [m for m in messages if isinstance(m, AozCommitMessage)]
    notice = CommitNotice(
        query_id=next((m.query_id for m in done if m.query_id), query_id),
        batch_id=batch_id,
        rows=sum(m.rows for m in done),
        tasks=len(done),
        parts=[(m.partition, m.task, m.rows) for m in done] if status == "commit" else [],
        status=status,
        at=time.time(),
    )
    timeout = opts.timeout
    if status == "abort":
        # The batch already failed, often because the sidecar is gone: look once, briefly.
        timeout = min(timeout, _ABORT_PROBE)
        try:
            probe_sidecar(opts.sidecar, timeout)
        except AozError as exc:
            log.warning("aoz sink: abort notice for batch %s not sent: %s", batch_id, exc)
            return notice
    client = _SidecarClient(opts.sidecar, timeout)
    try:
        chunk = encode_chunk(int(opts.codec), [opts.commit_subject], [0], [opts.encode(notice)])
        client.send(chunk, 1)
        client.finish()
    finally:
        client.close()
    return notice


def _probe_before_write(opts: _Options) -> None:
    for endpoint in opts.sidecars:
        try:
            probe_sidecar(endpoint, opts.timeout)
        except WaitTimeout as exc:
            raise WaitTimeout(
                f"aoz sink: no sidecar at {endpoint} (waited {opts.timeout} s); start "
                "`aoz sidecar` on every host (driver and workers) on that address",
                timeout=opts.timeout,
            ) from exc


class AozStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.opts = _Options(options, schema)

    def write(self, iterator: Iterator[Any]) -> AozCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query_id = (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or ""
        batch = (ctx.getLocalProperty("streaming.sql.batchId") if ctx else None) or "-1"
        return _write_batches(self.opts, iterator, query_id, int(batch))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        query_id = _checkpoint_query_id(self.opts.checkpoint)
        _announce(self.opts, messages, batchId, "commit", query_id)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        query_id = _checkpoint_query_id(self.opts.checkpoint)
        _announce(self.opts, messages, batchId, "abort", query_id)


class AozBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.opts = _Options(options, schema)
        self.query_id = f"batch-{uuidlib.uuid4()}"

    def write(self, iterator: Iterator[Any]) -> AozCommitMessage:
        return _write_batches(self.opts, iterator, self.query_id, 0)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _announce(self.opts, messages, 0, "commit", self.query_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _announce(self.opts, messages, 0, "abort", self.query_id)


def publish_dataframe(df: Any, **options: object) -> CommitNotice:
    """Publish the rows of a (batch) DataFrame on the mesh, exactly once for consumers
    (:class:`~aoz.spark.delivery.Deduplicator`), without the Python Data Source API;
    returns the commit notice it published.

    ``options`` are the sink's (``subject`` or ``subject_column``, ``subject_prefix``,
    ``sidecar``, ``codec``, ``rows_per_frame``...; see the module docstring). The rows
    travel as in ``df.write.format("aoz")``: each task hands its rows to its host's
    sidecar and waits for every acknowledgement. The tasks run as ``df.mapInArrow``, each
    returning its (partition, attempt id, rows acknowledged), and Spark hands the driver
    the result of exactly one successful attempt per partition, as it commits exactly
    one attempt per partition of a Data Source write: the notice names those attempts.
    If the job fails, an ``abort`` notice is published and the error raised.

    Why it exists: Spark runs a Data Source write's planning and its commit in Python
    processes of the driver, about half a second per write on a 2-core machine whatever
    the rows (measured in ``benchmarks/PIPELINE.md``); a ``mapInArrow`` job does not.
    Streaming queries use the data source (``writeStream.format("aoz")``), or this from
    ``foreachBatch`` (each batch then gets a query id of its own).

    >>> publish_dataframe(df, subject_column="symbol", subject_prefix="BARS.")  # doctest: +SKIP
    """
    import pyarrow as pa

    strs = {k: str(v) for k, v in options.items()}
    opts = _Options(strs, df.schema)
    _probe_before_write(opts)
    query_id = f"batch-{uuidlib.uuid4()}"

    def task(batches: Iterator[Any]) -> Iterator[Any]:
        msg = _write_batches(opts, batches, query_id, 0)
        yield pa.record_batch({"partition": pa.array([msg.partition], pa.int32()),
                               "task": pa.array([msg.task], pa.int64()),
                               "rows": pa.array([msg.rows], pa.int64())})

    try:
        results = df.mapInArrow(task, "partition int, task long, rows long").collect()
    except Exception:
        _announce(opts, [], 0, "abort", query_id)
        raise
    messages: list[WriterCommitMessage | None] = [
        AozCommitMessage(query_id, 0, r["partition"], r["task"], r["rows"]) for r in results
    ]
    return _announce(opts, messages, 0, "commit", query_id)


class AozDataSource(DataSource):
    """``format("aoz")``: write rows to aoz subjects (streaming and batch), and read a
    recording back (``spark.read``/``readStream.format("aoz").load(dir)``:
    :mod:`aoz.spark.source`)."""

    @classmethod
    def name(cls) -> str:
        return "aoz"

    def schema(self) -> str:
        from .source import source_schema

        return source_schema(self.options)

    def reader(self, schema: Any) -> Any:
        from .source import AozBatchReader

        return AozBatchReader(self.options, schema)

    def streamReader(self, schema: Any) -> Any:
        from .source import AozStreamReader

        return AozStreamReader(self.options, schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> AozStreamWriter:
        writer = AozStreamWriter(self.options, schema)
        _probe_before_write(writer.opts)
        return writer

    def writer(self, schema: Any, overwrite: bool) -> AozBatchWriter:
        writer = AozBatchWriter(self.options, schema)
        _probe_before_write(writer.opts)
        return writer


def register(spark: Any) -> None:
    """Register the ``aoz`` format (sink and source) on a SparkSession (done by
    :func:`local_session`)."""
    spark.dataSource.register(AozDataSource)
