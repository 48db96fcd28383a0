"""The ``aoz`` Spark sink: publish the rows of a (streaming) DataFrame onto the mesh.

::

    from aoz.spark.sink import sink_sidecar

    with sink_sidecar(naming=["tcp://127.0.0.1:5756"]) as sidecar:   # long-lived node
        query = (bars.writeStream.format("aoz")
                 .option("sidecar", sidecar.endpoint)
                 .option("subject_column", "symbol").option("subject_prefix", "BARS.")
                 .option("checkpointLocation", "/tmp/ck")
                 .start())

Options: ``subject`` (a fixed subject) or ``subject_column`` (+ ``subject_prefix``),
``sidecar`` (default ``tcp://127.0.0.1:5758``), ``commit_subject`` (default
``<subject or prefix>._COMMIT``), ``codec`` (``msgpack`` or ``json``), ``columns``
(comma-separated subset to send), ``chunk_rows`` (1000) and ``timeout`` (30 s).

Theory of operation
-------------------
No Spark task ever joins the mesh: joining costs a naming round-trip and a new peer per
task. Tasks hand rows to a **sidecar**, a long-lived aoz node that listens on a loopback
ZeroMQ ROUTER socket (:class:`SinkSidecar`, run by the driver in local mode; on a cluster
run one per host, e.g. ``aoz.spark.sink.serve_sidecar`` under a process manager, and
point ``sidecar`` at ``tcp://127.0.0.1:<port>``). A task connects a DEALER socket, sends
its rows in chunks (each row already encoded: subject, codec id, body), then an end
marker, and waits for the sidecar's acknowledgement. The sidecar handles each
connection's messages in order and publishes each row before it looks at the next, so
the acknowledgement means "every row of this task is on the wire". A task whose
acknowledgement does not come in ``timeout`` seconds fails, and Spark retries it.

When every task of a micro-batch succeeded, Spark calls the writer's ``commit`` on the
driver; it publishes a :class:`CommitNotice` (query id, batch id, row count) on the
commit subject through the same sidecar, after all of the batch's rows. Failed batches
get a notice with ``status="abort"``.

Duplicates. Spark delivers at least once: a failed task is retried, and a batch whose
commit was not recorded is replayed after a restart, with the same batch id. Each row
therefore carries an envelope under the reserved key ``"_aoz"``::

    {"query_id": <streaming query id, stable across restarts>, "batch_id": <int>,
     "partition": <int>, "index": <row number within the task>, "attempt": <int>}

``(query_id, batch_id, partition, index)`` names a row; :class:`Deduplicator` drops a
row it has seen, and any row of a batch already committed. (Replays of a deterministic
query produce the same rows in the same order, which is what Spark's own exactly-once
file sink relies on too.) Batch (non-streaming) writes work the same way with a fresh
``query_id`` per write and ``batch_id`` 0.

Timestamps become timezone-aware UTC datetimes (msgpack timestamps); decode bars with
``msg.decode(aoz.marketdata.Bar)``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
import uuid as uuidlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import anyio
import anyio.lowlevel
import msgspec
import zmq
import zmq.asyncio
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)

from ..errors import AozError, ConfigError, TransportError, WaitTimeout
from ..protocol.codecs import Codec

if TYPE_CHECKING:
    from ..message import Message
    from ..node import Node

__all__ = [
    "DEFAULT_SIDECAR",
    "AozDataSource",
    "CommitNotice",
    "Deduplicator",
    "SinkEnvelope",
    "SinkSidecar",
    "SidecarStatistics",
    "commit_notice_of",
    "commit_subject_for",
    "envelope_of",
    "register",
    "serve_sidecar",
    "sink_sidecar",
]

log = logging.getLogger("aoz.spark")

DEFAULT_SIDECAR: Final = "tcp://127.0.0.1:5758"
ENVELOPE_KEY: Final = "_aoz"

# Sidecar wire (ZeroMQ multipart, DEALER -> ROUTER):
#   [b"P", msgpack [[subject, codec_id, body], ...]]   publish these rows, in order
#   [b"E", token]                                      acknowledge when everything before is out
#   reply: [b"A", token, msgpack row count published for this connection so far]
_PUBLISH: Final = b"P"
_END: Final = b"E"
_ACK: Final = b"A"


class SinkEnvelope(msgspec.Struct, frozen=True):
    """Where a published row came from; sent under the ``"_aoz"`` key of the row's map."""

    query_id: str
    batch_id: int
    partition: int
    index: int
    attempt: int = 0


class CommitNotice(msgspec.Struct, frozen=True, kw_only=True):
    """Published on the commit subject after a micro-batch's rows (or when it fails)."""

    query_id: str
    batch_id: int
    rows: int
    tasks: int
    status: Literal["commit", "abort"] = "commit"
    at: float = 0.0  #: time.time() of the announcement


_ROW_ENC: Final = msgspec.msgpack.Encoder()
_JSON_ENC: Final = msgspec.json.Encoder()
_CHUNK_DEC: Final = msgspec.msgpack.Decoder(list[tuple[str, int, bytes]])


def commit_subject_for(options: Mapping[str, str]) -> str:
    """The commit subject of a sink configured with ``options``."""
    if options.get("commit_subject"):
        return options["commit_subject"]
    base = options.get("subject") or options.get("subject_prefix", "").rstrip(".")
    if not base:
        raise ConfigError("set `commit_subject`, `subject` or `subject_prefix` on the aoz sink")
    return f"{base}._COMMIT"


# ---------------------------------------------------------------------------- consumers
class Deduplicator:
    """Drops rows of a retried or replayed sink batch; feed it every message you receive.

    >>> dedup = Deduplicator()
    >>> async for msg in node.subscribe("BARS.>"):          # doctest: +SKIP
    ...     if dedup.accept(msg):
    ...         handle(msg.decode(Bar))
    ...     # dedup.last_commit is the newest CommitNotice seen

    ``accept`` returns ``True`` for a row seen for the first time and for messages that
    are not sink rows; ``False`` for duplicates and for commit notices (which it uses to
    forget rows of committed batches: those are then rejected by batch id). Memory is
    bounded by ``max_open_batches`` uncommitted batches.
    """

    def __init__(self, *, max_open_batches: int = 256) -> None:
        self.max_open_batches = max_open_batches
        self.committed: dict[str, int] = {}
        self.duplicates = 0
        self.rows = 0
        self.notices: list[CommitNotice] = []
        self._seen: OrderedDict[tuple[str, int], set[tuple[int, int]]] = OrderedDict()

    @property
    def last_commit(self) -> CommitNotice | None:
        return self.notices[-1] if self.notices else None

    def accept(self, msg: Message) -> bool:
        """Decide for a received message; see the class docstring."""
        try:
            value = msg.decode()
        except AozError:
            return True
        notice = commit_notice_of(value)
        if notice is not None:
            self.note_commit(notice)
            return False
        return self.accept_row(value)

    def accept_row(self, row: object) -> bool:
        """Like :meth:`accept` for an already decoded row (a map with an ``_aoz`` entry)."""
        env = envelope_of(row)
        if env is None:
            return True
        if env.batch_id <= self.committed.get(env.query_id, -1):
            self.duplicates += 1
            return False
        key = (env.query_id, env.batch_id)
        seen = self._seen.get(key)
        if seen is None:
            seen = self._seen[key] = set()
            while len(self._seen) > self.max_open_batches:
                self._seen.popitem(last=False)
        row_key = (env.partition, env.index)
        if row_key in seen:
            self.duplicates += 1
            return False
        seen.add(row_key)
        self.rows += 1
        return True

    def note_commit(self, notice: CommitNotice) -> None:
        self.notices.append(notice)
        del self.notices[:-64]
        if notice.status != "commit" or not notice.query_id:
            return
        q = notice.query_id
        if notice.batch_id > self.committed.get(q, -1):
            self.committed[q] = notice.batch_id
        for key in [k for k in self._seen if k[0] == q and k[1] <= notice.batch_id]:
            del self._seen[key]


def commit_notice_of(value: object) -> CommitNotice | None:
    """The :class:`CommitNotice` a decoded message is, or ``None`` (any commit subject)."""
    if not isinstance(value, dict) or ENVELOPE_KEY in value:
        return None
    if value.get("status") not in ("commit", "abort") or "batch_id" not in value:
        return None
    try:
        return msgspec.convert(value, CommitNotice)
    except msgspec.ValidationError:
        return None


def envelope_of(row: object) -> SinkEnvelope | None:
    """The :class:`SinkEnvelope` of a decoded sink row, or ``None``."""
    if not isinstance(row, dict):
        return None
    raw = row.get(ENVELOPE_KEY)
    if raw is None:
        return None
    try:
        return msgspec.convert(raw, SinkEnvelope)
    except msgspec.ValidationError:
        return None


# ---------------------------------------------------------------------------- sidecar
class SidecarStatistics(msgspec.Struct, frozen=True, kw_only=True):
    rows: int  #: rows published
    chunks: int
    acks: int  #: task/commit acknowledgements sent
    malformed: int  #: messages that were not sidecar protocol


class SinkSidecar:
    """Republishes rows handed over by Spark tasks on ``node``. An async context manager.

    >>> async with SinkSidecar(node) as sidecar:       # doctest: +SKIP
    ...     query = df.writeStream.format("aoz").option("sidecar", sidecar.endpoint)...

    ``bind`` defaults to an ephemeral loopback port; ``endpoint`` is the bound address.
    """

    def __init__(self, node: Node, bind: str = "tcp://127.0.0.1:*") -> None:
        self.node = node
        self.bind = bind
        self.endpoint = ""
        self._ctx: zmq.asyncio.Context | None = None
        self._sock: zmq.asyncio.Socket | None = None
        self._tg: Any = None
        self._rows = 0
        self._chunks = 0
        self._acks = 0
        self._malformed = 0
        self._per_peer: dict[bytes, int] = {}

    async def __aenter__(self) -> SinkSidecar:
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 10_000)
        try:
            sock.bind(self.bind)
        except zmq.ZMQError as exc:
            sock.close()
            ctx.term()
            raise TransportError(f"sink sidecar cannot bind {self.bind}: {exc}") from exc
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._ctx, self._sock = ctx, sock
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._serve, name="aoz-sink-sidecar")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        tg, self._tg = self._tg, None
        if tg is None:
            return
        tg.cancel_scope.cancel()
        try:
            await tg.__aexit__(None, None, None)
        finally:
            if self._sock is not None:
                self._sock.close(linger=0)
            if self._ctx is not None:
                self._ctx.term()
            self._sock = self._ctx = None

    async def _serve(self) -> None:
        sock = self._sock
        assert sock is not None
        node = self.node
        while True:
            parts = await sock.recv_multipart()
            if len(parts) != 3:
                self._malformed += 1
                continue
            peer, kind, body = parts
            if kind == _PUBLISH:
                try:
                    rows = _CHUNK_DEC.decode(body)
                except (msgspec.DecodeError, RecursionError):  # nesting is input too
                    self._malformed += 1
                    continue
                for n, (subject, codec, data) in enumerate(rows, 1):
                    try:
                        node.publish_nowait(subject, msgspec.Raw(data), codec=Codec(codec))
                    except (AozError, ValueError) as exc:
                        self._malformed += 1
                        log.warning("sink sidecar: row for %r not published: %s", subject, exc)
                        continue
                    if n % 2000 == 0:
                        await anyio.lowlevel.checkpoint()  # let the node's reader run
                self._rows += len(rows)
                self._chunks += 1
                self._per_peer[peer] = self._per_peer.get(peer, 0) + len(rows)
            elif kind == _END:
                count = self._per_peer.pop(peer, 0)
                await sock.send_multipart([peer, _ACK, body, _ROW_ENC.encode(count)])
                self._acks += 1
            else:
                self._malformed += 1

    def statistics(self) -> SidecarStatistics:
        return SidecarStatistics(
            rows=self._rows, chunks=self._chunks, acks=self._acks, malformed=self._malformed
        )


class SidecarHandle:
    """A sidecar running in a background thread (see :func:`sink_sidecar`)."""

    def __init__(self, sidecar: SinkSidecar, portal: Any) -> None:
        self._sidecar = sidecar
        self._portal = portal
        self.endpoint = sidecar.endpoint
        self.node_uuid = sidecar.node.uuid

    def statistics(self) -> SidecarStatistics:
        return self._sidecar.statistics()


@contextlib.contextmanager
def sink_sidecar(bind: str = "tcp://127.0.0.1:*", **settings: Any) -> Iterator[SidecarHandle]:
    """Run a node and a :class:`SinkSidecar` in a background thread, for synchronous
    Spark programs. ``settings`` go to :func:`aoz.connect`.

    >>> with sink_sidecar(naming=["tcp://127.0.0.1:5756"]) as sidecar:   # doctest: +SKIP
    ...     df.writeStream.format("aoz").option("sidecar", sidecar.endpoint)...
    """
    from anyio.from_thread import start_blocking_portal

    from ..node import connect

    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(connect(**settings)) as node,
        portal.wrap_async_context_manager(SinkSidecar(node, bind)) as sidecar,
    ):
        yield SidecarHandle(sidecar, portal)


async def serve_sidecar(bind: str = DEFAULT_SIDECAR, **settings: Any) -> None:
    """Run a sidecar until cancelled (one per host on a cluster)."""
    from ..node import connect

    async with connect(**settings) as node, SinkSidecar(node, bind):
        await anyio.sleep_forever()


# ---------------------------------------------------------------------------- task side
class _SidecarClient:
    """A Spark task's connection to the sidecar (blocking; one per task)."""

    def __init__(self, endpoint: str, timeout: float) -> None:
        self.timeout = timeout
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
        self._sock.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
        self.endpoint = endpoint
        try:
            self._sock.connect(endpoint)
        except zmq.ZMQError as exc:
            self.close()
            raise TransportError(
                f"cannot connect to the aoz sink sidecar {endpoint}: {exc}"
            ) from exc

    def send_rows(self, rows: list[tuple[str, int, bytes]]) -> None:
        try:
            self._sock.send_multipart([_PUBLISH, _ROW_ENC.encode(rows)])
        except zmq.Again:
            raise WaitTimeout(
                f"the aoz sink sidecar at {self.endpoint} took no rows for {self.timeout} s",
                timeout=self.timeout,
            ) from None

    def finish(self) -> int:
        """Wait until the sidecar published everything sent; return its row count."""
        token = uuidlib.uuid4().bytes
        try:
            self._sock.send_multipart([_END, token])
            deadline = time.monotonic() + self.timeout
            while True:
                parts = self._sock.recv_multipart()
                if len(parts) == 3 and parts[0] == _ACK and parts[1] == token:
                    return int(msgspec.msgpack.decode(parts[2]))
                if time.monotonic() > deadline:
                    raise zmq.Again()
        except zmq.Again:
            raise WaitTimeout(
                f"no acknowledgement from the aoz sink sidecar at {self.endpoint} "
                f"within {self.timeout} s (is it running?)",
                timeout=self.timeout,
            ) from None

    def close(self) -> None:
        self._sock.close(linger=0)
        self._ctx.term()


def _plain(value: Any) -> Any:
    """Spark row values -> values msgpack/JSON encode the same everywhere."""
    if isinstance(value, dt.datetime):
        # PySpark hands timestamps over as naive local-time datetimes.
        return value.astimezone(dt.UTC) if value.tzinfo is None else value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class _Options:
    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.subject = options.get("subject")
        self.subject_column = options.get("subject_column")
        self.subject_prefix = options.get("subject_prefix", "")
        if not self.subject and not self.subject_column:
            raise ConfigError("the aoz sink needs option `subject` or `subject_column`")
        self.commit_subject = commit_subject_for(options)
        self.sidecar = options.get("sidecar", DEFAULT_SIDECAR)
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
        self.chunk_rows = max(1, int(options.get("chunk_rows", "1000")))
        self.timeout = float(options.get("timeout", "30"))

    def encode(self, value: object) -> bytes:
        return _ROW_ENC.encode(value) if self.codec is Codec.MSGPACK else _JSON_ENC.encode(value)


@dataclass
class AozCommitMessage(WriterCommitMessage):
    query_id: str
    batch_id: int
    partition: int
    attempt: int
    rows: int


def _write_rows(
    opts: _Options, rows: Iterator[Any], query_id: str, batch_id: int
) -> AozCommitMessage:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx else 0
    attempt = ctx.attemptNumber() if ctx else 0
    client = _SidecarClient(opts.sidecar, opts.timeout)
    try:
        chunk: list[tuple[str, int, bytes]] = []
        index = 0
        for row in rows:
            d = row.asDict(recursive=True)
            if opts.subject_column:
                subject = f"{opts.subject_prefix}{d[opts.subject_column]}"
            else:
                subject = opts.subject or ""
            out = {c: _plain(d[c]) for c in opts.columns}
            out[ENVELOPE_KEY] = {
                "query_id": query_id, "batch_id": batch_id, "partition": partition,
                "index": index, "attempt": attempt,
            }  # fmt: skip
            chunk.append((subject, int(opts.codec), opts.encode(out)))
            index += 1
            if len(chunk) >= opts.chunk_rows:
                client.send_rows(chunk)
                chunk = []
        if chunk:
            client.send_rows(chunk)
        client.finish()
    finally:
        client.close()
    return AozCommitMessage(query_id, batch_id, partition, attempt, index)


def _announce(
    opts: _Options,
    messages: list[WriterCommitMessage | None],
    batch_id: int,
    status: Literal["commit", "abort"],
    query_id: str = "",
) -> None:
    done = [m for m in messages if isinstance(m, AozCommitMessage)]
    notice = CommitNotice(
        query_id=next((m.query_id for m in done), query_id),
        batch_id=batch_id,
        rows=sum(m.rows for m in done),
        tasks=len(done),
        status=status,
        at=time.time(),
    )
    client = _SidecarClient(opts.sidecar, opts.timeout)
    try:
        client.send_rows([(opts.commit_subject, int(opts.codec), opts.encode(notice))])
        client.finish()
    finally:
        client.close()


class AozStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.opts = _Options(options, schema)

    def write(self, iterator: Iterator[Any]) -> AozCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query_id = (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or ""
        batch = (ctx.getLocalProperty("streaming.sql.batchId") if ctx else None) or "-1"
        return _write_rows(self.opts, iterator, query_id, int(batch))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _announce(self.opts, messages, batchId, "commit")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _announce(self.opts, messages, batchId, "abort")


class AozBatchWriter(DataSourceWriter):
    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.opts = _Options(options, schema)
        self.query_id = f"batch-{uuidlib.uuid4()}"

    def write(self, iterator: Iterator[Any]) -> AozCommitMessage:
        return _write_rows(self.opts, iterator, self.query_id, 0)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _announce(self.opts, messages, 0, "commit", self.query_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _announce(self.opts, messages, 0, "abort", self.query_id)


class AozDataSource(DataSource):
    """``format("aoz")``: write rows to aoz subjects (streaming and batch)."""

    @classmethod
    def name(cls) -> str:
        return "aoz"

    def streamWriter(self, schema: Any, overwrite: bool) -> AozStreamWriter:
        return AozStreamWriter(self.options, schema)

    def writer(self, schema: Any, overwrite: bool) -> AozBatchWriter:
        return AozBatchWriter(self.options, schema)


def register(spark: Any) -> None:
    """Register the ``aoz`` format on a SparkSession (done by :func:`local_session`)."""
    spark.dataSource.register(AozDataSource)
