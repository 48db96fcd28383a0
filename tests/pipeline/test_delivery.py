"""Exactly-once on the consumer side (pure): rows are released per committed attempt, once,
whatever order retries, sidecars and replays produce."""

from __future__ import annotations

import random

from aoz.spark.delivery import CommitNotice, Deduplicator, Gap, SinkEnvelope

Q = "query-1"


Row = tuple[SinkEnvelope, int]


def rows(batch: int, partition: int, task: int, values: list[int]) -> list[Row]:
    return [(SinkEnvelope(Q, batch, partition, task, i), v) for i, v in enumerate(values)]


def notice(batch: int, *parts: tuple[int, int, int]) -> CommitNotice:
    return CommitNotice(
        query_id=Q, batch_id=batch, rows=sum(p[2] for p in parts), tasks=len(parts),
        parts=list(parts),
    )  # fmt: skip


def feed_all(d: Deduplicator[int], items: list[object]) -> list[int]:
    out: list[int] = []
    for item in items:
        if isinstance(item, CommitNotice):
            out += d.feed_notice(item)
        else:
            env, value = item  # type: ignore[misc]
            out += d.feed_row(env, value)
    return out


def test_a_retry_that_reorders_rows_after_a_shuffle_is_delivered_exactly_once() -> None:
    # The case: attempt 1 of partition 0 died after sending a prefix; its retry
    # sends the same rows in another order. Position-based dedup got this wrong.
    values = list(range(100))
    failed = rows(0, 0, task=11, values=values[:40])
    shuffled = values[:]
    random.Random(3).shuffle(shuffled)
    retry = rows(0, 0, task=12, values=shuffled)
    other = rows(0, 1, task=21, values=list(range(100, 150)))
    d: Deduplicator[int] = Deduplicator()
    out = feed_all(d, [*failed, *other, *retry, notice(0, (0, 12, 100), (1, 21, 50))])
    assert sorted(out) == list(range(150))
    s = d.statistics()
    assert (s.delivered, s.discarded, s.duplicates, s.pending) == (150, 40, 0, 0)


def test_a_notice_that_overtakes_rows_from_another_sidecar_waits_for_them() -> None:
    a = rows(0, 0, task=1, values=[1, 2, 3])  # through sidecar A
    b = rows(0, 1, task=2, values=[4, 5])  # through sidecar B, slower
    d: Deduplicator[int] = Deduplicator()
    n = notice(0, (0, 1, 3), (1, 2, 2))
    assert feed_all(d, [*a, n, b[0]]) == []  # complete only when B's rows are in
    assert d.gaps() == [Gap(Q, 0, 1)]
    assert sorted(feed_all(d, [b[1]])) == [1, 2, 3, 4, 5]
    assert d.gaps() == [] and d.statistics().discarded == 0


def test_rows_of_an_uncommitted_attempt_after_the_notice_are_discarded() -> None:
    d: Deduplicator[int] = Deduplicator()
    out = feed_all(d, [*rows(0, 0, 1, [1]), notice(0, (0, 1, 1))])
    assert out == [1]
    assert feed_all(d, rows(0, 0, 9, [1])) == []  # a late speculative attempt
    assert d.statistics().duplicates == 1  # batch already released


def test_a_replayed_batch_after_a_driver_restart_is_not_delivered_again() -> None:
    d: Deduplicator[int] = Deduplicator()
    first = feed_all(d, [*rows(5, 0, 1, [1, 2]), notice(5, (0, 1, 2))])
    # the driver died before recording the commit; the replay has new attempt ids
    again = feed_all(d, [*rows(5, 0, 7, [2, 1]), notice(5, (0, 7, 2))])
    assert first == [1, 2] and again == []
    assert d.statistics().duplicates == 2


def test_a_killed_sidecar_loses_rows_of_an_attempt_that_is_then_never_named() -> None:
    d: Deduplicator[int] = Deduplicator()
    lost = rows(0, 0, 1, [1, 2, 3])[:1]  # the sidecar died holding the rest
    retry = rows(0, 0, 2, [1, 2, 3])
    abort = CommitNotice(query_id=Q, batch_id=0, rows=0, tasks=0, status="abort")
    assert feed_all(d, [*lost, abort]) == []  # an abort releases nothing, keeps waiting
    assert sorted(feed_all(d, [*retry, notice(0, (0, 2, 3))])) == [1, 2, 3]
    assert d.statistics().discarded == 1


def test_memory_is_bounded_and_evictions_are_counted() -> None:
    d: Deduplicator[int] = Deduplicator(max_open_batches=2)
    feed_all(d, [*rows(0, 0, 1, [1]), *rows(1, 0, 1, [1, 2]), *rows(2, 0, 1, [1])])
    s = d.statistics()
    assert s.evicted == 1 and s.pending == 3
