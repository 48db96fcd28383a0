"""Record market data to Parquet and read it back: the recorder without Spark.

An embedded nsd, the simulated feed (quotes and trades on MD.<venue>.<symbol>) and a
Recorder writing MD.> under ./recording-example for a few seconds; then pyarrow reads
the dataset back (Spark would use `spark.read.parquet("recording-example")`).

Run:  .venv/bin/python examples/pipeline_record.py [seconds]
"""

from __future__ import annotations

import sys
import time

import anyio
import pyarrow.compute as pc
import pyarrow.dataset as ds
from marketdata import MarketSimulator, Quote, Trade, run_feed  # examples/marketdata

import aoz
from aoz.record import Recorder

DIRECTORY = "recording-example"


async def main(seconds: float) -> None:
    async with (
        aoz.NamingDaemon(port=0) as nsd,
        aoz.connect(naming=[nsd.endpoint], program="feed") as feed,
        aoz.connect(naming=[nsd.endpoint], program="recorder") as node,
        Recorder(node, ["MD.>"], DIRECTORY, types=[Quote, Trade], flush_interval=0.5) as rec,
    ):
        await feed.wait_for_interest("MD.XNYS.IBM")  # the recorder's filter reached the feed
        sent = await run_feed(feed, MarketSimulator(seed=1), rate=5000, duration=seconds)
        await rec.wait_until(received=sent)
    stats = rec.statistics()  # after the close: everything received is on disk
    print(f"published {sent:,}; recorded {stats.written:,} rows in {stats.files} files")

    table = ds.dataset(DIRECTORY, format="parquet", partitioning="hive").to_table()
    trades = table.filter(pc.equal(table["type"], "trade"))
    latency_ms = pc.divide(
        pc.subtract(trades["receive_ts"].cast("int64"), trades["send_ts"].cast("int64")), 1000
    )
    print(f"{table.num_rows:,} rows, {trades.num_rows:,} trades; columns: {table.column_names}")
    print(f"feed -> recorder latency: mean {pc.mean(latency_ms).as_py():.3f} ms")
    print(trades.slice(0, 3).select(["subject", "symbol", "price", "size", "send_ts"]).to_pylist())


if __name__ == "__main__":
    t = time.perf_counter()
    anyio.run(main, float(sys.argv[1]) if len(sys.argv) > 1 else 3.0)
    print(f"done in {time.perf_counter() - t:.1f} s")
