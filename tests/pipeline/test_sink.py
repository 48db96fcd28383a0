"""The `aoz` Spark sink: rows of a streaming query reach a subscriber, with batch ids, and a
replayed batch is recognised by the duplicate filter."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from aoz.marketdata import Bar
from aoz.spark import activate, jobs
from aoz.spark.sink import CommitNotice, Deduplicator, SinkSidecar, envelope_of

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def start_bars_query(spark: Any, recording: Path, checkpoint: Path, sidecar: str) -> Any:
    bars = jobs.ohlcv_bars(jobs.trades(jobs.read_recording_stream(spark, str(recording))))
    return (
        bars.writeStream.outputMode("complete").format("aoz")
        .option("sidecar", sidecar)
        .option("subject_column", "symbol").option("subject_prefix", "BARS.")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start()
    )  # fmt: skip


def run_query(spark: Any, recording: Path, checkpoint: Path, sidecar: str) -> None:
    activate(spark)  # runs in a worker thread
    query = start_bars_query(spark, recording, checkpoint, sidecar)
    try:
        assert query.awaitTermination(120), "streaming query did not finish in 120 s"
        assert query.exception() is None
    finally:
        query.stop()


async def collect_until_commit(sub: Any, batch_id: int) -> tuple[list[Any], CommitNotice]:
    """Messages up to and including the commit notice of `batch_id` (bounded in time)."""
    got = []
    with anyio.fail_after(60):
        async for msg in sub:
            got.append(msg)
            if msg.subject == "BARS._COMMIT":
                notice = msg.decode(CommitNotice)
                if notice.batch_id == batch_id:
                    return got, notice
    raise AssertionError("subscription ended before the commit notice")


async def test_sink_delivers_every_row_and_a_replayed_batch_is_dropped(
    spark, recording, tmp_path, aoz_node_factory
):
    expected = {
        (r["symbol"], r["start"].astimezone(dt.UTC)): r["volume"]
        for r in jobs.ohlcv_bars(jobs.trades(spark.read.parquet(str(recording)))).collect()
    }
    publisher = await aoz_node_factory()
    consumer = await aoz_node_factory()
    checkpoint = tmp_path / "ck"
    dedup = Deduplicator()
    async with SinkSidecar(publisher) as sidecar, consumer.subscribe("BARS.>") as sub:
        await publisher.wait_for_interest("BARS.IBM", timeout=10)

        # First run: one batch (availableNow over a finished recording).
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                anyio.to_thread.run_sync, run_query, spark, recording, checkpoint, sidecar.endpoint
            )
            first, notice = await collect_until_commit(sub, 0)
        rows = [m for m in first if m.subject != "BARS._COMMIT"]
        assert notice.status == "commit" and notice.rows == len(rows) == len(expected)
        envelopes = [envelope_of(m.decode()) for m in rows]
        assert all(e is not None for e in envelopes)
        assert {(e.query_id, e.batch_id) for e in envelopes if e} == {(notice.query_id, 0)}
        assert len({(e.partition, e.index) for e in envelopes if e}) == len(rows)
        bars = [m.decode(Bar) for m in rows]
        assert {(b.symbol, b.start): b.volume for b in bars} == expected
        assert all(m.subject == f"BARS.{b.symbol}" for m, b in zip(rows, bars, strict=True))
        assert [dedup.accept(m) for m in first].count(True) == len(rows)

        # Make Spark believe batch 0 never committed: the restarted query replays it with
        # the same query id and batch id, and republishes every row.
        (checkpoint / "commits" / "0").unlink()
        shutil.rmtree(checkpoint / "commits" / ".0.crc", ignore_errors=True)
        for crc in (checkpoint / "commits").glob(".0.crc"):
            crc.unlink()
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                anyio.to_thread.run_sync, run_query, spark, recording, checkpoint, sidecar.endpoint
            )
            second, notice2 = await collect_until_commit(sub, 0)
        replay = [m for m in second if m.subject != "BARS._COMMIT"]
        assert notice2.query_id == notice.query_id and notice2.rows == len(replay) == len(rows)
        assert [dedup.accept(m) for m in second] == [False] * len(second)
        assert dedup.duplicates == len(replay)
        assert dedup.rows == len(rows)
        assert sidecar.statistics().malformed == 0


def _row(batch: int, partition: int, index: int, query: str = "q") -> dict[str, Any]:
    return {"x": 1, "_aoz": {"query_id": query, "batch_id": batch, "partition": partition,
                             "index": index, "attempt": 0}}  # fmt: skip


def test_deduplicator_drops_retried_task_rows_and_committed_batches() -> None:
    d = Deduplicator(max_open_batches=2)
    assert d.accept_row({"plain": "message"})  # not a sink row: always accepted
    assert d.accept_row(_row(0, 0, 0)) and d.accept_row(_row(0, 1, 0))
    assert not d.accept_row(_row(0, 0, 0))  # a retried task re-sends partition 0, row 0
    assert d.accept_row(_row(0, 0, 0, query="other"))  # another query's batch 0 is distinct
    d.note_commit(CommitNotice(query_id="q", batch_id=0, rows=2, tasks=2))
    assert not d.accept_row(_row(0, 7, 7))  # any row of a committed batch is a replay
    assert d.accept_row(_row(1, 0, 0))
    d.note_commit(CommitNotice(query_id="q", batch_id=1, rows=0, tasks=1, status="abort"))
    assert not d.accept_row(_row(1, 0, 0))  # an aborted batch's retry: seen rows dropped
    assert d.accept_row(_row(1, 0, 1))
    assert d.duplicates == 3 and d.committed == {"q": 0}


async def test_batch_write_with_json_codec(spark, tmp_path, aoz_node_factory):
    """`df.write.format("aoz")` (not streaming): one query id, batch 0, a commit notice."""
    publisher = await aoz_node_factory()
    consumer = await aoz_node_factory()
    df = spark.createDataFrame([(f"S{i % 3}", i) for i in range(25)], "name STRING, n BIGINT")

    def write(endpoint: str) -> None:
        activate(spark)
        (
            df.repartition(2).write.format("aoz").mode("append")
            .option("sidecar", endpoint).option("codec", "json")
            .option("subject_column", "name").option("subject_prefix", "OUT.")
            .save()
        )  # fmt: skip

    async with SinkSidecar(publisher) as sidecar, consumer.subscribe("OUT.>") as sub:
        await publisher.wait_for_interest("OUT.S0", timeout=10)
        await anyio.to_thread.run_sync(write, sidecar.endpoint)
        rows, notices = [], []
        with anyio.fail_after(30):
            while not notices:
                msg = await sub.next()
                (notices if msg.subject == "OUT._COMMIT" else rows).append(msg)
    assert all(m.codec.name == "JSON" for m in rows)
    values = [m.decode() for m in rows]
    assert sorted(v["n"] for v in values) == list(range(25))
    assert all(m.subject == f"OUT.{v['name']}" for m, v in zip(rows, values, strict=True))
    notice = notices[0].decode(CommitNotice)
    assert notice.rows == 25 and notice.batch_id == 0 and notice.query_id.startswith("batch-")
    assert {envelope_of(v).query_id for v in values} == {notice.query_id}
