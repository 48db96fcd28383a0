"""Spark over a recording, batch and streaming, with results published back onto the mesh.

1. records a few seconds of the simulated feed (see pipeline_record.py);
2. batch: Spark's own Parquet reader + aoz.spark.jobs -> bars, rates, latency percentiles;
3. streaming: the same bar job as a Structured Streaming query over the recording,
   written with `format("aoz")` through a sidecar node, and read back by a plain
   (blocking) subscriber that drops duplicate deliveries.

This is a synchronous program: the sidecar and the subscriber run their event loops in
background threads (aoz.spark.sidecar.sink_sidecar, aoz.BlockingNode).

Run:  .venv/bin/python examples/pipeline_spark_bars.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio
from marketdata import Bar, MarketSimulator, Quote, Trade, run_feed  # examples/marketdata

import aoz
from aoz.record import Recorder
from aoz.spark import jobs, local_session
from aoz.spark.delivery import Deduplicator
from aoz.spark.sidecar import sink_sidecar


async def record(directory: Path, nsd_endpoint: str) -> None:
    async with (
        aoz.connect(naming=[nsd_endpoint], program="feed") as feed,
        aoz.connect(naming=[nsd_endpoint], program="recorder") as node,
        Recorder(node, ["MD.>"], directory, types=[Quote, Trade]) as rec,
    ):
        await feed.wait_for_interest("MD.XNYS.IBM")
        sim = MarketSimulator(["IBM", "AAPL", "MSFT"], seed=3)
        sent = await run_feed(feed, sim, rate=2000, duration=3)
        await rec.wait_until(received=sent)


async def with_nsd(directory: Path) -> None:
    async with aoz.NamingDaemon(port=0) as nsd:
        await record(directory, nsd.endpoint)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="aoz-spark-"))
    recording = work / "recording"
    anyio.run(with_nsd, recording)

    spark = local_session("local[2]", "aoz-example")
    try:
        df = spark.read.parquet(str(recording))  # batch: Spark's own Parquet reader
        jobs.ohlcv_bars(jobs.trades(df)).orderBy("symbol", "start").show(6, truncate=False)
        jobs.message_rates(df).orderBy("window_start").show(3, truncate=False)
        jobs.latency_percentiles(df, window=None).show(truncate=False)

        # Streaming: same job, results published as BARS.<symbol>.
        with (
            BackgroundNsd() as nsd_endpoint,
            sink_sidecar(naming=[nsd_endpoint], program="spark-sidecar") as sidecar,
            aoz.BlockingNode(naming=[nsd_endpoint], program="bars-reader") as reader,
            reader.subscribe("BARS.>") as bars_sub,
        ):
            stream = jobs.read_recording_stream(spark, str(recording), types=[Quote, Trade])
            query = (
                jobs.ohlcv_bars(jobs.trades(stream))
                .writeStream.outputMode("complete")
                .format("aoz")
                .option("sidecar", sidecar.endpoint)
                .option("subject_column", "symbol")
                .option("subject_prefix", "BARS.")
                .option("checkpointLocation", str(work / "checkpoint"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(120)
            dedup: Deduplicator[aoz.Message] = Deduplicator()
            while not dedup.statistics().released_batches:  # rows come out on commit
                for row in dedup.feed(bars_sub.next(timeout=30)):
                    bar = row.decode(Bar)
                    print(
                        f"{row.subject:10} {bar.start:%H:%M:%S} O {bar.open:8.2f} "
                        f"C {bar.close:8.2f} V {bar.volume:7,} VWAP {bar.vwap:9.3f}"
                    )
            notice = dedup.last_commit
            assert notice is not None
            print(f"commit: query {notice.query_id} batch {notice.batch_id}, {notice.rows} rows")
    finally:
        spark.stop()


class BackgroundNsd:
    """An embedded nsd on a free port, run in a background thread; gives its endpoint."""

    def __enter__(self) -> str:
        from anyio.from_thread import start_blocking_portal

        self._portal_cm = start_blocking_portal()
        portal = self._portal_cm.__enter__()
        self._nsd_cm = portal.wrap_async_context_manager(aoz.NamingDaemon(port=0))
        return str(self._nsd_cm.__enter__().endpoint)

    def __exit__(self, *exc: object) -> None:
        self._nsd_cm.__exit__(None, None, None)
        self._portal_cm.__exit__(None, None, None)


if __name__ == "__main__":
    main()
