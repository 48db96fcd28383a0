"""Spark jobs over a recording, checked against plain-Python computations (one session)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from aoz.spark import jobs
from examples.marketdata import Quote, Trade

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def python_bars(directory: Path) -> dict[tuple[str, dt.datetime], dict[str, Any]]:
    """OHLCV/VWAP per symbol per 1-s window of send time, from the Parquet files directly."""
    table = ds.dataset(directory, format="parquet", partitioning="hive").to_table()
    trades = [r for r in table.to_pylist() if r["type"] == "trade"]
    groups: dict[tuple[str, dt.datetime], list[dict[str, Any]]] = defaultdict(list)
    for t in trades:
        start = t["send_ts"].replace(microsecond=0)
        groups[(t["symbol"], start)].append(t)
    out = {}
    for key, rows in groups.items():
        rows.sort(key=lambda r: (r["send_ts"], r["sequence"]))
        volume = sum(r["size"] for r in rows)
        out[key] = {
            "open": rows[0]["price"],
            "high": max(r["price"] for r in rows),
            "low": min(r["price"] for r in rows),
            "close": rows[-1]["price"],
            "volume": volume,
            "vwap": sum(r["price"] * r["size"] for r in rows) / volume,
            "trades": len(rows),
            "last_ts": rows[-1]["send_ts"],
        }
    return out


def spark_rows_by_key(df: Any) -> dict[tuple[str, dt.datetime], dict[str, Any]]:
    out = {}
    for row in df.collect():
        d = row.asDict()
        start = d["start"].astimezone(dt.UTC)
        assert d["end"].astimezone(dt.UTC) - start == dt.timedelta(seconds=1)
        d["last_ts"] = d["last_ts"].astimezone(dt.UTC)
        out[(d["symbol"], start)] = d
    return out


def test_batch_bars_equal_plain_python(spark, recording):
    expected = python_bars(recording)
    assert len(expected) >= 8  # 4 symbols x several seconds
    got = spark_rows_by_key(jobs.ohlcv_bars(jobs.trades(spark.read.parquet(str(recording)))))
    assert got.keys() == expected.keys()
    for key, want in expected.items():
        have = got[key]
        for field in ("open", "high", "low", "close", "volume", "trades", "last_ts"):
            assert have[field] == want[field], (key, field)
        assert have["vwap"] == pytest.approx(want["vwap"], rel=1e-12)


def test_streaming_bars_equal_batch_bars(spark, recording, tmp_path):
    stream = jobs.read_recording_stream(spark, str(recording), types=[Quote, Trade])
    bars = jobs.ohlcv_bars(jobs.trades(stream))
    query = (
        bars.writeStream.outputMode("complete").format("memory").queryName("bars_stream_test")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    try:
        assert query.awaitTermination(120), "streaming query did not finish in 120 s"
        assert query.exception() is None
        got = spark_rows_by_key(spark.table("bars_stream_test"))
    finally:
        query.stop()
    expected = python_bars(recording)
    assert got.keys() == expected.keys()
    assert {k: (v["volume"], v["close"]) for k, v in got.items()} == {
        k: (v["volume"], v["close"]) for k, v in expected.items()
    }


def test_rates_and_latency(spark, recording):
    df = spark.read.parquet(str(recording))
    table = ds.dataset(recording, format="parquet", partitioning="hive").to_table()
    rates = jobs.message_rates(df).collect()
    assert sum(r["messages"] for r in rates) == table.num_rows
    assert all(r["rate"] == r["messages"] for r in rates)  # 1-second windows
    (lat,) = jobs.latency_percentiles(df, window=None).collect()
    micros = pa.compute.subtract(
        table.column("receive_ts").cast(pa.int64()), table.column("send_ts").cast(pa.int64())
    ).to_pylist()
    assert lat["messages"] == len(micros)
    assert lat["max_ms"] == pytest.approx(max(micros) / 1000)
    assert lat["mean_ms"] == pytest.approx(sum(micros) / len(micros) / 1000)
    assert lat["p50_ms"] <= lat["p90_ms"] <= lat["p99_ms"] <= lat["max_ms"]
