"""The recorder: subscribe to subject patterns, write every message to Parquet.

::

    async with aoz.connect() as node:
        async with Recorder(node, ["MD.>"], "recordings", types=[Quote, Trade]) as rec:
            ...                     # runs until the block ends
            print(rec.statistics())

How it works. A consumer task per pattern takes messages from its subscription in
batches (``batches()``) and appends their raw frames and receive times to an in-memory
buffer; nothing is decoded on the event loop.
The tasks live in a :class:`aoz._mesh.tasks.TaskOwner`, so a recorder opened in one task
can be closed in another. A flusher task swaps the buffer out every ``flush_rows`` rows
or ``flush_interval`` seconds and, in a worker thread (:func:`anyio.to_thread.run_sync`),
joins the frames into one buffer (:class:`aoz.record.bulk.FrameBatch`) and, in that
thread or a worker process, cuts and decodes them in bulk
(:func:`aoz.record.bulk.tables_from_frames`: numpy over the buffer, one decoder call,
Arrow buffers), builds one Arrow table per UTC date
and writes each to a hidden temporary
file that is then renamed into ``<directory>/date=YYYY-MM-DD/`` (see
:mod:`aoz.record.files`), so readers only ever see complete files. The columns are
described in :mod:`aoz.record.schema`.

Closing (end of the ``async with``, cancellation, or SIGINT/SIGTERM in
:func:`record_main`) stops the consumers, moves what the subscriptions still hold
into the buffer, and writes it: every message the node handed to the recorder ends
up in a file. Messages can only be lost before that, and then they are counted: when
the writer falls behind by ``max_pending_rows`` the consumers stop taking messages,
the subscription queue (``queue_size``) fills, and its overflow drops show in
:meth:`Recorder.statistics` as ``dropped``.

Read recordings back with Spark's own Parquet reader (``spark.read.parquet(dir)``) or
pyarrow (``pyarrow.dataset.dataset(dir, partitioning="hive")``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
import time
import uuid as uuidlib
import zlib
from array import array
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import anyio
import anyio.abc
import msgspec

from .._mesh.tasks import TaskOwner
from .._protocol.builder import FrameBuilder
from .._protocol.codecs import Codec
from ..errors import AozError, ConfigError, UsageError, WaitTimeout
from .bulk import FrameBatch, pack, tables_from_frames
from .files import dictionary_columns, partition_dir, write_atomically, write_parquet
from .reading import with_summaries
from .schema import Column, build_tables, columns_for

if TYPE_CHECKING:
    from .._mesh.node import Node
    from .._mesh.subscription import Subscription

__all__ = ["Recorder", "RecorderStatistics", "record_main", "resolve_types"]

log = logging.getLogger("aoz.record")

_Row = tuple[str, float, bytes]
_FRAME: Final = attrgetter("frame")
_RECEIVED_AT: Final = attrgetter("received_at")


class RecorderStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of one recorder."""

    received: int  #: messages taken from the subscriptions
    written: int  #: rows in files on disk
    pending: int  #: rows buffered or being written
    files: int  #: files written
    bytes: int  #: bytes of Parquet written
    dropped: int  #: messages the subscriptions' overflow policy discarded
    #: messages known missing upstream (sequence gaps: a publisher's full send queue...)
    lost: int = 0
    decode_errors: int  #: msgpack/JSON payloads that did not parse (kept, with null fields)
    write_errors: int  #: failed writes (their rows are kept and retried)
    elapsed: float  #: seconds since the recorder started
    rate: float  #: rows written per second since the start
    last_file: str | None = None


class Recorder:
    """Record messages matching ``patterns`` into Parquet files under ``directory``.

    Args:
        node: a started node.
        patterns: subject patterns (``"MD.>"``, ``"MD.*.IBM"``...). Overlapping patterns
            record a message once per matching pattern.
        directory: root of the recording; ``date=YYYY-MM-DD`` directories go under it.
        types: ``msgspec.Struct`` types whose fields become decoded columns
            (see :func:`aoz.record.schema.columns_for`).
        flush_rows: write when this many rows are buffered...
        flush_interval: ...or when this many seconds passed since the last write.
        max_pending_rows: stop taking messages while this many rows wait to be written
            (default ``10 * flush_rows``).
        queue_size: per-subscription queue bound (default: the node's setting).
        fsync: fsync each file and its directory before reporting it written.
        compression: Parquet codec (``snappy``, ``zstd``, ``none``...).
        writer: where payloads are decoded and files built: ``"thread"`` (a worker
            thread: it holds the GIL while it decodes, not in numpy's and Arrow's
            kernels nor while Parquet is written) or ``"process"`` (a worker process
            started by a fork server: each flush's frames go to it as one buffer).
        partition: ``(i, n)``: record only the subjects whose stable hash (CRC-32) modulo
            ``n`` is ``i``, so ``n`` recorders (``aoz record --partition i/n``) share
            the subjects of the same patterns.
    """

    def __init__(
        self,
        node: Node,
        patterns: str | Sequence[str],
        directory: str | os.PathLike[str],
        *,
        types: Iterable[type[Any]] = (),
        flush_rows: int = 10_000,
        flush_interval: float = 1.0,
        max_pending_rows: int | None = None,
        queue_size: int | None = None,
        fsync: bool = False,
        compression: str = "snappy",
        writer: Literal["process", "thread"] = "thread",
        partition: tuple[int, int] | None = None,
    ) -> None:
        if writer not in ("process", "thread"):
            raise ConfigError(f"recorder writer must be 'process' or 'thread', not {writer!r}")
        if partition is not None and not 0 <= partition[0] < partition[1]:
            raise ConfigError(f"recorder partition {partition}: need 0 <= i < n")
        self.writer = writer
        self.partition = partition
        self._mine: dict[str, bool] = {}
        self._pool: Any = None
        if flush_rows < 1:
            raise ConfigError("flush_rows must be >= 1")
        if flush_interval <= 0:
            raise ConfigError("flush_interval must be > 0 seconds")
        self.node = node
        self.patterns = [patterns] if isinstance(patterns, str) else list(patterns)
        if not self.patterns:
            raise ConfigError("the recorder needs at least one subject pattern")
        self.directory = Path(directory)
        try:
            self.columns: tuple[Column, ...] = columns_for(types)
        except TypeError as exc:
            raise ConfigError(str(exc)) from None
        self.flush_rows = flush_rows
        self.flush_interval = flush_interval
        self.max_pending_rows = max_pending_rows or 10 * flush_rows
        self.queue_size = queue_size
        self.fsync = fsync
        self.compression = compression
        self._id = uuidlib.uuid4().hex[:8]
        self._subs: list[Subscription] = []
        self._frames: list[bytes] = []  # the buffer: raw frames...
        self._times: list[float] = []  # ...and when each was received
        self._writing = 0
        self._owner: TaskOwner | None = None
        # anyio primitives need a running loop: made in start().
        self._flush_wanted: anyio.Event
        self._room: anyio.Event
        self._consumers: anyio.CancelScope
        self._flusher: anyio.CancelScope
        self._write_lock: anyio.Lock
        self._progress: anyio.Event
        self._started = 0.0
        self._closed = False
        self._file_no = 0
        self._received = 0
        self._written = 0
        self._files = 0
        self._bytes = 0
        self._decode_errors = 0
        self._write_errors = 0
        self._last_file: str | None = None

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Recorder:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Subscribe and start the consumer and flusher tasks."""
        if self._owner is not None or self._closed:
            raise UsageError("a recorder can be started once; create a new Recorder instead")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._flush_wanted = anyio.Event()
        self._room = anyio.Event()
        self._consumers = anyio.CancelScope()
        self._flusher = anyio.CancelScope()
        self._write_lock = anyio.Lock()
        self._progress = anyio.Event()
        self._started = time.monotonic()
        # the write path once, on one made-up row, before anything is subscribed: its
        # first run pays for imports and first calls (0.6 s measured), and a first flush
        # that slow left a backlog that made the recorder drop at a full-speed publisher
        await anyio.to_thread.run_sync(self._warm_up)
        self._subs = [self.node.subscribe(p, queue_size=self.queue_size) for p in self.patterns]

        async def setup(tg: anyio.abc.TaskGroup) -> None:
            tg.start_soon(self._run_consumers, name="aoz-recorder-consume")
            tg.start_soon(self._run_flusher, name="aoz-recorder-flush")

        self._owner = TaskOwner("aoz-recorder")
        await self._owner.start(setup)

    async def aclose(self) -> None:
        """Stop, write everything received, and release the subscriptions. Idempotent,
        and safe from another task than the one that started the recorder."""
        if self._closed or self._owner is None:
            self._closed = True
            return
        self._closed = True
        self._consumers.cancel()
        self._flusher.cancel()  # a write in progress still completes (shielded)
        try:
            await self._owner.aclose()
        finally:
            with anyio.CancelScope(shield=True):
                for sub in self._subs:
                    while (msg := sub.get_nowait()) is not None:
                        self._frames.append(msg.frame)
                        self._times.append(msg.received_at)
                        self._received += 1
                    sub.close()
                self._signal_progress()
                try:
                    await self.flush()
                finally:
                    if self._pool is not None:
                        pool, self._pool = self._pool, None
                        await anyio.to_thread.run_sync(pool.shutdown)

    # ------------------------------------------------------------------ tasks
    async def _run_consumers(self) -> None:
        with self._consumers:
            async with anyio.create_task_group() as tg:
                for sub in self._subs:
                    tg.start_soon(self._consume, sub)

    async def _consume(self, sub: Subscription) -> None:
        # batches up to a flush: a queue that holds many is taken whole (one C-level copy)
        async for batch in sub.batches(max(1024, self.flush_rows)):
            if self.partition is not None:
                batch = [m for m in batch if self._is_mine(m.subject)]
            self._frames += map(_FRAME, batch)
            self._times += map(_RECEIVED_AT, batch)
            self._received += len(batch)
            self._signal_progress()
            if len(self._frames) >= self.flush_rows:
                self._flush_wanted.set()
            while len(self._frames) + self._writing >= self.max_pending_rows:
                self._flush_wanted.set()
                await self._room.wait()

    def _is_mine(self, subject: str) -> bool:
        mine = self._mine.get(subject)
        if mine is None:
            assert self.partition is not None
            if len(self._mine) > 100_000:
                self._mine.clear()
            i, n = self.partition
            mine = self._mine[subject] = in_partition(subject, i, n)
        return mine

    async def _run_flusher(self) -> None:
        with self._flusher:
            while True:
                self._flush_wanted = anyio.Event()
                if len(self._frames) < self.flush_rows:
                    with anyio.move_on_after(self.flush_interval):
                        await self._flush_wanted.wait()
                try:
                    await self.flush()
                except AozError as exc:
                    log.error("%s", exc)

    async def flush(self) -> list[Path]:
        """Write what is buffered now (in a worker thread); return the new files."""
        async with self._write_lock:
            frames, times = self._frames, self._times
            if not frames:
                return []
            self._frames, self._times = [], []
            self._writing = len(frames)
            try:
                with anyio.CancelScope(shield=True):
                    paths, errors = await anyio.to_thread.run_sync(self._write, frames, times)
            except Exception as exc:  # whatever went wrong, one bad row never loses the buffer
                self._write_errors += 1
                self._frames[:0] = frames  # keep them; the next flush retries
                self._times[:0] = times
                raise AozError(f"recorder could not write to {self.directory}: {exc}") from exc
            finally:
                self._writing = 0
                room, self._room = self._room, anyio.Event()
                room.set()
            self._decode_errors += errors
            self._written += len(frames)
            self._signal_progress()
            return paths

    def _signal_progress(self) -> None:
        progress, self._progress = self._progress, anyio.Event()
        progress.set()

    async def wait_until(
        self, *, received: int = 0, written: int = 0, timeout: float = 10.0
    ) -> RecorderStatistics:
        """Wait until at least ``received`` messages were taken and ``written`` rows are in
        files; raises :class:`aoz.WaitTimeout` after ``timeout`` seconds.

        >>> await rec.wait_until(received=1000)  # doctest: +SKIP
        """
        try:
            with anyio.fail_after(timeout):
                while self._received < received or self._written < written:
                    await self._progress.wait()
        except TimeoutError:
            raise WaitTimeout(
                f"recorder: {self._received}/{received} received, {self._written}/{written} "
                f"written after {timeout} s",
                timeout=timeout,
            ) from None
        return self.statistics()

    def _write(self, frames: list[bytes], times: list[float]) -> tuple[list[Path], int]:
        job = (pack(frames, times), self.columns, str(self.directory), self._id, self._file_no,
               self.compression, self.fsync)  # fmt: skip
        if self.writer == "thread":
            written, errors = write_frames(*job)
        else:
            written, errors = self._in_process(job)
        paths = []
        for path, size in written:
            self._file_no += 1
            self._files += 1
            self._bytes += size
            self._last_file = path
            paths.append(Path(path))
        return paths, errors

    def _warm_up(self) -> None:
        """Run :func:`warm_up` where the writes will run (blocking: called in a thread)."""
        if self.writer == "thread":
            warm_up(self.columns, self.compression)
            return
        if self._pool is None:
            self._pool = _new_pool()
        self._pool.submit(warm_up, self.columns, self.compression).result()

    def _in_process(self, job: tuple[Any, ...]) -> tuple[list[tuple[str, int]], int]:
        """:func:`write_frames` in the worker process (blocking: called in a thread); a
        worker that died is replaced, and the rows are retried by the next flush."""
        from concurrent.futures.process import BrokenProcessPool

        if self._pool is None:
            self._pool = _new_pool()
        batch, *rest = job
        spool = _spool(batch, self.directory, self._id)
        try:
            result: tuple[list[tuple[str, int]], int] = self._pool.submit(
                write_spooled, str(spool), len(batch.lengths), *rest
            ).result()
        except BrokenProcessPool:
            self._pool.shutdown(wait=False)
            self._pool = None
            raise
        finally:
            spool.unlink(missing_ok=True)
        return result

    # ------------------------------------------------------------------ statistics
    def statistics(self) -> RecorderStatistics:
        elapsed = time.monotonic() - self._started if self._started else 0.0
        return RecorderStatistics(
            received=self._received,
            written=self._written,
            pending=len(self._frames) + self._writing,
            files=self._files,
            bytes=self._bytes,
            dropped=sum(s.dropped for s in self._subs),
            lost=sum(s.lost for s in self._subs),
            decode_errors=self._decode_errors,
            write_errors=self._write_errors,
            elapsed=elapsed,
            rate=self._written / elapsed if elapsed > 0 else 0.0,
            last_file=self._last_file,
        )

    def __repr__(self) -> str:
        return f"<Recorder {self.patterns} -> {self.directory} written={self._written}>"


def in_partition(subject: str, i: int, n: int) -> bool:
    """Whether ``subject`` belongs to partition ``i`` of ``n`` (CRC-32 of its UTF-8 bytes:
    the same in every process and on every host).

    >>> [in_partition("MD.IBM", i, 3) for i in range(3)].count(True)
    1
    """
    return zlib.crc32(subject.encode()) % n == i


def write_rows(
    rows: list[_Row],
    columns: tuple[Column, ...],
    directory: str,
    recorder_id: str,
    file_no: int,
    compression: str,
    fsync: bool,
) -> tuple[list[tuple[str, int]], int]:
    """Build the tables of ``(subject, received_at, payload)`` rows and write them as
    files ``file_no + 1``... of recorder run ``recorder_id`` (see :func:`write_frames`)."""
    tables, errors = build_tables(rows, columns)
    return _write_tables(tables, directory, recorder_id, file_no, compression, fsync), errors


def write_frames(
    batch: FrameBatch,
    columns: tuple[Column, ...],
    directory: str,
    recorder_id: str,
    file_no: int,
    compression: str,
    fsync: bool,
) -> tuple[list[tuple[str, int]], int]:
    """Build the tables of the received frames of ``batch`` and write them as files
    ``file_no + 1``... of recorder run ``recorder_id``, each with its stream summaries in
    its footer (:func:`aoz.record.reading.with_summaries`); returns
    ``([(path, bytes)], errors)``. Runs in the recorder's worker process (or a thread):
    everything it needs is in its arguments."""
    tables, errors = tables_from_frames(batch, columns)
    return _write_tables(tables, directory, recorder_id, file_no, compression, fsync), errors


def warm_up(columns: tuple[Column, ...], compression: str) -> None:
    """Build and write (to memory, no file) the tables of one made-up sequenced msgpack
    frame, as :func:`write_frames` does: the imports and first calls of the write path
    happen here rather than in the first flush."""
    import pyarrow as pa

    frame = FrameBuilder(Codec.MSGPACK, publisher=1).publish("WARMUP", {"warm": 1})
    tables, _ = tables_from_frames(pack([frame], [time.time()]), columns)
    for table in tables.values():
        write_parquet(with_summaries(table), pa.BufferOutputStream(), compression=compression,
                      dictionary=dictionary_columns(table.schema))


def write_spooled(
    path: str, n: int, columns: tuple[Column, ...], directory: str, recorder_id: str,
    file_no: int, compression: str, fsync: bool,
) -> tuple[list[tuple[str, int]], int]:
    """:func:`write_frames` of the ``n`` frames the recorder spooled to ``path`` (their
    lengths, receive times and the frames, one read: see :func:`_spool`)."""
    data = memoryview(Path(path).read_bytes())
    lengths, received = array("q"), array("d")
    lengths.frombytes(data[: 8 * n])
    received.frombytes(data[8 * n : 16 * n])
    batch = FrameBatch(bytes(data[16 * n :]), lengths, received)
    return write_frames(batch, columns, directory, recorder_id, file_no, compression, fsync)


def _spool(batch: FrameBatch, directory: Path, recorder_id: str) -> Path:
    """Write ``batch`` to a hidden file for the worker process, in memory (``/dev/shm``)
    where there is one, else in the recording's directory (readers skip hidden names):
    a few large writes and one read instead of pickling megabytes through a pipe, 64 KiB
    and two context switches at a time. The caller removes it."""
    where = _SHM if _SHM.is_dir() and os.access(_SHM, os.W_OK) else directory
    fd, name = tempfile.mkstemp(prefix=f".aoz-frames-{recorder_id}-", suffix=".tmp", dir=where)
    try:
        with open(fd, "wb") as f:
            f.write(batch.lengths)
            f.write(batch.received)
            f.write(batch.blob)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


_SHM: Final = Path("/dev/shm")


def _write_tables(
    tables: dict[str, Any], directory: str, recorder_id: str, file_no: int,
    compression: str, fsync: bool,
) -> list[tuple[str, int]]:
    written = []
    stamp = int(time.time() * 1_000_000)
    for date, table in tables.items():
        file_no += 1
        name = f"part-{stamp}-{recorder_id}-{file_no:06d}.parquet"
        path, size = write_atomically(
            with_summaries(table), partition_dir(Path(directory), date), name,
            compression=compression, fsync=fsync, dictionary=dictionary_columns(table.schema),
        )  # fmt: skip
        written.append((str(path), size))
    return written


def _new_pool() -> Any:
    """One worker process, started by a fork server (never a fork of this process, whose
    ZeroMQ threads a child must not inherit)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("forkserver"))


def resolve_types(specs: Iterable[str]) -> list[type[Any]]:
    """``["examples.marketdata:Quote", ...]`` -> the classes (for command lines)."""
    import importlib

    out: list[type[Any]] = []
    for spec in specs:
        module, _, name = spec.partition(":")
        if not name:
            raise ConfigError(f"type {spec!r} must look like 'package.module:Class'")
        try:
            out.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cannot import {spec!r}: {exc}") from None
    return out


async def record_main(
    patterns: Sequence[str],
    directory: str | os.PathLike[str],
    *,
    types: Iterable[type[Any]] = (),
    flush_rows: int = 10_000,
    flush_interval: float = 1.0,
    duration: float | None = None,
    progress: bool | None = None,
    on_ready: Callable[[Recorder], None] | None = None,
    node: Node | None = None,
    writer: Literal["process", "thread"] = "thread",
    partition: tuple[int, int] | None = None,
    **settings: Any,
) -> RecorderStatistics:
    """Record until SIGINT/SIGTERM (or ``duration`` seconds); return the final statistics.

    Joins the mesh with ``aoz.connect(**settings)`` unless a ``node`` is given. On a
    signal the recorder writes everything it received before returning. With
    ``progress`` (default: when stderr is a terminal) a rich line shows rows, files and
    the write rate. ``on_ready`` is called once the subscriptions are in place.
    """
    from contextlib import AsyncExitStack

    from .._mesh.node import connect

    if progress is None:
        progress = sys.stderr.isatty()
    async with AsyncExitStack() as stack:
        if node is None:
            node = await stack.enter_async_context(connect(**settings))
        rec = await stack.enter_async_context(
            Recorder(node, patterns, directory, types=types, flush_rows=flush_rows,
                     flush_interval=flush_interval, writer=writer, partition=partition)
        )  # fmt: skip
        if on_ready is not None:
            on_ready(rec)
        async with anyio.create_task_group() as tg:

            async def watch_signals() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for signum in signals:
                        log.info("recorder: %s, writing what is buffered", signal.strsignal(signum))
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(watch_signals)
            if progress:
                tg.start_soon(_show_progress, rec)
            if duration is not None:
                await anyio.sleep(duration)
                tg.cancel_scope.cancel()
        await rec.aclose()
        return rec.statistics()
    raise AssertionError("unreachable")  # pragma: no cover


async def _show_progress(rec: Recorder) -> None:
    from rich.console import Console
    from rich.live import Live

    def render() -> str:
        s = rec.statistics()
        return (
            f"[bold]recording[/] {', '.join(rec.patterns)} -> {rec.directory}   "
            f"rows {s.written:,} (+{s.pending:,} pending)   files {s.files:,}   "
            f"{s.rate:,.0f} rows/s   dropped {s.dropped:,}"
        )

    with Live(render(), console=Console(stderr=True), refresh_per_second=4) as live:
        while True:
            await anyio.sleep(0.25)
            live.update(render())
