"""Exactly-once delivery of the ``aoz`` Spark sink's rows, on the consumer side. Pure.

The sink publishes every row it is given, including rows of task attempts that later
fail and rows of batches a restarted query replays; after a batch succeeded, the driver
publishes a :class:`CommitNotice` that names, per partition, the one task attempt Spark
committed and how many rows it wrote. :class:`Deduplicator` holds rows per task attempt
and releases exactly the committed attempts' rows, once, when their notice and all of
their rows are in (in whatever order they arrive, through however many sidecars)::

    dedup = Deduplicator()
    async for msg in node.subscribe("BARS.>"):
        for row in dedup.feed(msg):          # each committed row once; nothing else
            handle(row.decode(Bar))
    dedup.statistics()                       # duplicates, discarded attempts, gaps

This module does no I/O and imports neither Spark nor ZeroMQ, so consumers need
neither; the argument for why this is exactly-once is in :mod:`aoz.spark.sink`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeVar

import msgspec

from ..errors import AozError

if TYPE_CHECKING:
    from .._mesh.message import Message

__all__ = [
    "ENVELOPE_KEY",
    "CommitNotice",
    "Deduplicator",
    "DeliveryStatistics",
    "Gap",
    "SinkEnvelope",
    "commit_notice_of",
    "envelope_of",
]

ENVELOPE_KEY: Final = "_aoz"

T = TypeVar("T")


class SinkEnvelope(msgspec.Struct, frozen=True, array_like=True):
    """Where a published row came from; sent as ``[query_id, batch_id, partition, task,
    index]`` under the ``"_aoz"`` key of the row's map.

    ``task`` is a random 63-bit number drawn by each task attempt: unlike Spark's attempt
    numbers it never repeats, not even after the driver restarts.
    """

    query_id: str
    batch_id: int
    partition: int
    task: int
    index: int


class CommitNotice(msgspec.Struct, frozen=True, kw_only=True):
    """Published on the commit subject when a micro-batch succeeded (or failed).

    ``parts`` lists ``(partition, task, rows)`` for every committed task attempt: a
    consumer accepts exactly these attempts' rows.
    """

    query_id: str
    batch_id: int
    rows: int
    tasks: int
    parts: list[tuple[int, int, int]] = []
    status: Literal["commit", "abort"] = "commit"
    at: float = 0.0  #: time.time() of the announcement


class Gap(msgspec.Struct, frozen=True):
    """A committed batch still missing rows (see :meth:`Deduplicator.gaps`)."""

    query_id: str
    batch_id: int
    missing: int  #: committed rows not received yet


class DeliveryStatistics(msgspec.Struct, frozen=True, kw_only=True):
    received: int  #: sink rows fed in
    delivered: int  #: rows released, each committed row once
    duplicates: int  #: rows of a batch already released (a replay or a late retry)
    discarded: int  #: rows of attempts that were not committed (failed or aborted tasks)
    evicted: int  #: rows dropped unreleased because max_open_batches was exceeded
    malformed: int  #: sink rows or notices that could not be read
    pending: int  #: rows held, waiting for their notice or for the rest of their batch
    released_batches: int


@dataclass
class _Batch(Generic[T]):
    rows: dict[int, dict[int, T]] = field(default_factory=dict)  # task -> index -> item
    notice: CommitNotice | None = None
    held: int = 0


class Deduplicator(Generic[T]):
    """Releases each committed sink row exactly once; see the module docstring.

    ``feed(msg)`` returns the messages that became deliverable: non-sink messages at
    once, sink rows when their batch's commit notice and every committed row are in.
    Commit notices themselves are consumed. Memory: at most ``max_open_batches``
    unreleased batches are held (older ones are evicted and counted); released batches
    are remembered per query up to ``remember`` batch ids.
    """

    def __init__(self, *, max_open_batches: int = 64, remember: int = 100_000) -> None:
        self.max_open_batches = max_open_batches
        self.remember = remember
        self.notices: list[CommitNotice] = []
        self._open: OrderedDict[tuple[str, int], _Batch[T]] = OrderedDict()
        self._released: dict[str, set[int]] = {}
        self._received = self._delivered = self._duplicates = 0
        self._discarded = self._evicted = self._malformed = 0
        self._batches = 0

    @property
    def last_commit(self) -> CommitNotice | None:
        return self.notices[-1] if self.notices else None

    # ------------------------------------------------------------------ messages
    def feed(self, msg: Message) -> list[Any]:
        """Feed one received message; return the messages now deliverable, in order."""
        try:
            value = msg.decode()
        except (AozError, RecursionError):  # not a sink row as far as anyone can tell
            return [msg]
        if isinstance(value, dict) and ENVELOPE_KEY in value:
            env = envelope_of(value)
            if env is None:
                self._malformed += 1
                return []
            return self.feed_row(env, msg)  # type: ignore[arg-type]
        notice = commit_notice_of(value)
        if notice is not None:
            return self.feed_notice(notice)
        return [msg]

    # ------------------------------------------------------------------ pure core
    def feed_row(self, env: SinkEnvelope, item: T) -> list[T]:
        """Hold ``item`` (a row with envelope ``env``); return what became deliverable."""
        self._received += 1
        if env.batch_id in self._released.get(env.query_id, ()):
            self._duplicates += 1
            return []
        batch = self._batch(env.query_id, env.batch_id)
        if batch is None:
            return []
        if batch.notice is not None and (env.partition, env.task) not in _committed(batch.notice):
            self._discarded += 1
            return []
        rows = batch.rows.setdefault(env.task, {})
        if env.index in rows:
            self._duplicates += 1
            return []
        rows[env.index] = item
        batch.held += 1
        return self._try_release(env.query_id, env.batch_id, batch)

    def feed_notice(self, notice: CommitNotice) -> list[T]:
        """Take a commit notice; return the rows it makes deliverable."""
        self.notices.append(notice)
        del self.notices[:-64]
        if notice.status != "commit":
            return []  # the batch will be retried; its attempts' rows wait for that notice
        if not notice.query_id or any(n < 0 for part in notice.parts for n in part):
            self._malformed += 1
            return []
        if notice.batch_id in self._released.get(notice.query_id, ()):
            return []  # a replayed batch's second notice: its rows were delivered once
        batch = self._batch(notice.query_id, notice.batch_id)
        if batch is None:
            return []
        batch.notice = notice
        committed = _committed(notice)
        for task in [t for t in batch.rows if not any(t == c[1] for c in committed)]:
            gone = batch.rows.pop(task)
            self._discarded += len(gone)
            batch.held -= len(gone)
        return self._try_release(notice.query_id, notice.batch_id, batch)

    def _batch(self, query_id: str, batch_id: int) -> _Batch[T] | None:
        key = (query_id, batch_id)
        batch = self._open.get(key)
        if batch is None:
            batch = self._open[key] = _Batch()
            while len(self._open) > self.max_open_batches:
                _, old = self._open.popitem(last=False)
                self._evicted += old.held
        return batch

    def _try_release(self, query_id: str, batch_id: int, batch: _Batch[T]) -> list[T]:
        notice = batch.notice
        if notice is None:
            return []
        out: list[T] = []
        for _, task, rows in notice.parts:
            got = batch.rows.get(task, {})
            if len(got) < rows:
                return []
        for _, task, rows in notice.parts:
            got = batch.rows.get(task, {})
            out.extend(got[i] for i in sorted(got) if i < rows)
            self._discarded += sum(1 for i in got if i >= rows)
        del self._open[(query_id, batch_id)]
        released = self._released.setdefault(query_id, set())
        released.add(batch_id)
        if len(released) > self.remember:
            released.discard(min(released))
        self._delivered += len(out)
        self._batches += 1
        return out

    # ------------------------------------------------------------------ reporting
    def gaps(self) -> list[Gap]:
        """Committed batches still waiting for rows (e.g. lost by a slow subscriber)."""
        out = []
        for (query_id, batch_id), batch in self._open.items():
            if batch.notice is None:
                continue
            missing = sum(
                max(0, rows - len(batch.rows.get(task, {}))) for _, task, rows in batch.notice.parts
            )
            out.append(Gap(query_id, batch_id, missing))
        return out

    def statistics(self) -> DeliveryStatistics:
        return DeliveryStatistics(
            received=self._received,
            delivered=self._delivered,
            duplicates=self._duplicates,
            discarded=self._discarded,
            evicted=self._evicted,
            malformed=self._malformed,
            pending=sum(b.held for b in self._open.values()),
            released_batches=self._batches,
        )


def _committed(notice: CommitNotice) -> set[tuple[int, int]]:
    return {(p, t) for p, t, _ in notice.parts}


def commit_notice_of(value: object) -> CommitNotice | None:
    """The :class:`CommitNotice` a decoded message is, or ``None``."""
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
