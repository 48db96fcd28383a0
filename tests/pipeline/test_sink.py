"""The `aoz` Spark sink on local Spark: rows of a streaming query come out of the
Deduplicator once, a replayed batch does not; batch writes; failures reported fast."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import anyio
import pytest

from aoz.spark import activate, jobs
from aoz.spark.delivery import Deduplicator, envelope_of
from aoz.spark.sidecar import SinkSidecar
from examples.marketdata import Bar, Quote, Trade

from ..ports import free_endpoint

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def start_bars_query(spark: Any, recording: Path, checkpoint: Path, sidecar: str) -> Any:
    stream = jobs.read_recording_stream(spark, str(recording), types=[Quote, Trade])
    bars = jobs.ohlcv_bars(jobs.trades(stream))
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


async def collect_until_released(
    sub: Any, dedup: Deduplicator[Any], batches: int
) -> tuple[list[Any], list[Any]]:
    """(every message received, rows released) until `batches` batches were released."""
    got, released = [], []
    with anyio.fail_after(60):
        async for msg in sub:
            got.append(msg)
            released += dedup.feed(msg)
            if dedup.statistics().released_batches >= batches:
                return got, released
    raise AssertionError("subscription ended before the commit notice")


async def test_sink_delivers_every_row_and_a_replayed_batch_is_dropped(
    spark, recording, tmp_path, aoz_node_factory
):
    expected = {
        (r["symbol"], r["start"].astimezone(dt.UTC)): r["volume"]
        for r in jobs.ohlcv_bars(jobs.trades(spark.read.parquet(str(recording)))).collect()
    }
    publisher = await aoz_node_factory(send_policy="block")
    consumer = await aoz_node_factory()
    checkpoint = tmp_path / "ck"
    dedup: Deduplicator[Any] = Deduplicator()
    async with SinkSidecar(publisher) as sidecar, consumer.subscribe("BARS.>") as sub:
        await publisher.wait_for_interest("BARS.IBM", timeout=10)

        # First run: one batch (availableNow over a finished recording).
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                anyio.to_thread.run_sync, run_query, spark, recording, checkpoint, sidecar.endpoint
            )
            first, rows = await collect_until_released(sub, dedup, 1)
        notice = dedup.last_commit
        assert notice is not None and notice.status == "commit"
        assert notice.rows == len(rows) == len(expected) == len(first) - 1
        envelopes = [envelope_of(m.decode()) for m in rows]
        assert {(e.query_id, e.batch_id) for e in envelopes if e} == {(notice.query_id, 0)}
        assert len({(e.partition, e.task, e.index) for e in envelopes if e}) == len(rows)
        bars = [m.decode(Bar) for m in rows]
        assert {(b.symbol, b.start): b.volume for b in bars} == expected
        assert all(m.subject == f"BARS.{b.symbol}" for m, b in zip(rows, bars, strict=True))

        # Make Spark believe batch 0 never committed: the restarted query replays it with
        # the same query id and batch id, new attempts, and a second notice.
        (checkpoint / "commits" / "0").unlink()
        for crc in (checkpoint / "commits").glob(".0.crc"):
            crc.unlink()
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                anyio.to_thread.run_sync, run_query, spark, recording, checkpoint, sidecar.endpoint
            )
            second: list[Any] = []
            with anyio.fail_after(60):
                while len(dedup.notices) < 2:
                    msg = await sub.next()
                    second.append(msg)
                    assert dedup.feed(msg) == []  # nothing of a replay is released
        assert dedup.notices[1].query_id == notice.query_id
        assert dedup.notices[1].batch_id == 0
        stats = dedup.statistics()
        assert stats.duplicates == len(second) - 1 == len(rows)
        assert stats.delivered == len(rows)
        assert sidecar.statistics().malformed == 0


async def test_batch_write_with_json_codec(spark, tmp_path, aoz_node_factory):
    """`df.write.format("aoz")` (not streaming): one query id, batch 0, a commit notice."""
    publisher = await aoz_node_factory(send_policy="block")
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
        dedup: Deduplicator[Any] = Deduplicator()
        _, rows = await collect_until_released(sub, dedup, 1)
    assert all(m.codec.name == "JSON" for m in rows)
    values = [m.decode() for m in rows]
    assert sorted(v["n"] for v in values) == list(range(25))
    assert all(m.subject == f"OUT.{v['name']}" for m, v in zip(rows, values, strict=True))
    notice = dedup.last_commit
    assert notice is not None and notice.rows == 25 and notice.batch_id == 0
    assert notice.query_id.startswith("batch-")
    assert {envelope_of(v).query_id for v in values} == {notice.query_id}


async def test_publish_dataframe_delivers_each_row_once_in_packed_frames(
    spark, aoz_node_factory
):
    """`publish_dataframe` (a mapInArrow job, no Data Source API): the notice it returns
    names the attempts whose rows the consumer gets, each once, as one message per row
    although the sidecar packed each subject's rows into a few frames."""
    from aoz.spark import publish_dataframe

    publisher = await aoz_node_factory(send_policy="block")
    consumer = await aoz_node_factory()
    df = spark.createDataFrame([(f"S{i % 3}", i) for i in range(300)], "name STRING, n BIGINT")

    async with SinkSidecar(publisher) as sidecar, consumer.subscribe("PD.>") as sub:
        await publisher.wait_for_interest("PD.S0", timeout=10)
        notice = await anyio.to_thread.run_sync(
            lambda: publish_dataframe(df.repartition(2), sidecar=sidecar.endpoint,
                                      subject_column="name", subject_prefix="PD.",
                                      rows_per_frame=40)
        )
        dedup: Deduplicator[Any] = Deduplicator()
        _, rows = await collect_until_released(sub, dedup, 1)
        sidecar_rows = sidecar.statistics().rows
    values = [m.decode() for m in rows]
    assert sorted(v["n"] for v in values) == list(range(300))
    assert all(m.subject == f"PD.{v['name']}" for m, v in zip(rows, values, strict=True))
    assert dedup.last_commit == notice and notice.rows == 300 and len(notice.parts) == 2
    assert sidecar_rows == 301 and publisher.statistics().messages_out < 301  # packed


def test_a_missing_sidecar_fails_the_write_with_a_hint(spark) -> None:
    """No sidecar listening: the driver's probe fails the write before any task runs."""
    activate(spark)
    df = spark.createDataFrame([("A", 1)], "name STRING, n BIGINT")
    with pytest.raises(Exception, match="start `aoz sidecar`") as raised:
        (
            df.write.format("aoz").mode("append")
            .option("sidecar", free_endpoint()).option("timeout", "1")
            .option("subject_column", "name").option("subject_prefix", "OUT.")
            .save()
        )  # fmt: skip
    assert "no sidecar at" in str(raised.value)


async def test_a_failed_streaming_batch_gets_an_abort_notice_with_the_query_id(
    spark, tmp_path, aoz_node_factory
):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    source = tmp_path / "src"
    source.mkdir()
    pq.write_table(pa.table({"name": ["A", "B"], "n": [1, -1]}), source / "part-0.parquet")

    def fail_on_negative(n: int) -> int:
        if n < 0:
            raise ValueError("a bad row")
        return n

    publisher = await aoz_node_factory(send_policy="block")
    consumer = await aoz_node_factory()
    async with SinkSidecar(publisher) as sidecar, consumer.subscribe("OUT.>") as sub:
        await publisher.wait_for_interest("OUT._COMMIT", timeout=10)

        def run() -> str:
            activate(spark)
            bad = F.udf(fail_on_negative, LongType())
            query = (
                spark.readStream.schema("name STRING, n BIGINT").parquet(str(source))
                .withColumn("n", bad("n")).writeStream.format("aoz")
                .option("sidecar", sidecar.endpoint)
                .option("subject_column", "name").option("subject_prefix", "OUT.")
                .option("checkpointLocation", str(tmp_path / "ck"))
                .trigger(availableNow=True).start()
            )  # fmt: skip
            with pytest.raises(Exception, match="a bad row"):
                query.awaitTermination(60)
            return str(query.id)

        query_id = await anyio.to_thread.run_sync(run)
        dedup: Deduplicator[Any] = Deduplicator()
        with anyio.fail_after(30):
            while dedup.last_commit is None:
                assert dedup.feed(await sub.next()) == []
    notice = dedup.last_commit
    assert notice.status == "abort" and notice.batch_id == 0
    assert notice.query_id == query_id
    assert dedup.statistics().delivered == 0
