"""Spark jobs over recordings, as DataFrame -> DataFrame functions.

The same function runs in batch and in Structured Streaming::

    from aoz.spark import jobs

    trades = spark.read.parquet("recordings")                    # batch: Spark's own reader
    jobs.ohlcv_bars(jobs.trades(trades)).show()

    stream = jobs.read_recording_stream(spark, "recordings", types=[Quote, Trade])
    bars = jobs.ohlcv_bars(jobs.trades(stream), watermark="2 seconds")
    bars.writeStream.format("aoz").option("subject_column", "symbol") ...

Batch reading of a recording is just ``spark.read.parquet(dir)``: the files are plain
Parquet with microsecond UTC timestamps, partitioned by ``date=YYYY-MM-DD``. A streaming
read needs the schema up front (:func:`recording_schema`), which
:func:`read_recording_stream` supplies; it picks up each file when the recorder renames
it into place.

aoz knows no domain types: the decoded columns come from the ``msgspec.Struct`` types you
recorded with (``types=``), and every job takes its column names as parameters (the
defaults are only names, e.g. ``symbol``/``price``/``size``, of no particular feed).

Streaming aggregations take a ``watermark`` (how late an event may be): with append
output a window's row is emitted once the watermark passes the window's end, so bars
arrive about ``window + watermark`` after their first trade plus the trigger interval.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..record.schema import columns_for, spark_ddl

__all__ = [
    "latency_percentiles",
    "message_rates",
    "ohlcv_bars",
    "read_recording_stream",
    "recording_schema",
    "trades",
]


def recording_schema(types: Iterable[type[Any]] = ()) -> str:
    """The DDL schema of a recording made with these decoded ``types`` (the
    ``types=`` given to the :class:`~aoz.record.Recorder`; none: fixed columns only)."""
    return spark_ddl(columns_for(types))


def read_recording_stream(
    spark: Any,
    directory: str,
    *,
    types: Iterable[type[Any]] = (),
    max_files_per_trigger: int | None = None,
) -> Any:
    """``spark.readStream.schema(recording_schema(types)).parquet(directory)``."""
    reader = spark.readStream.schema(recording_schema(types))
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    return reader.parquet(directory)


def trades(
    df: Any, *, type_column: str = "type", kind: str = "trade", price_column: str = "price"
) -> Any:
    """Rows whose ``type_column`` is ``kind`` and that have a ``price_column`` value (the
    trades of a feed that tags its events, like ``msgspec.Struct(tag="trade")``)."""
    from pyspark.sql import functions as F

    return df.where((F.col(type_column) == kind) & F.col(price_column).isNotNull())


def _with_watermark(df: Any, column: str, watermark: str | None) -> Any:
    return df.withWatermark(column, watermark) if watermark else df


def message_rates(
    df: Any,
    *,
    window: str = "1 second",
    time_column: str = "receive_ts",
    watermark: str | None = None,
) -> Any:
    """Messages per subject per window: ``window_start, window_end, subject, messages, rate``.

    ``rate`` is messages per second over the window.
    """
    from pyspark.sql import functions as F

    w = F.window(time_column, window)
    seconds = F.col("window.end").cast("double") - F.col("window.start").cast("double")
    return (
        _with_watermark(df, time_column, watermark)
        .groupBy(w.alias("window"), F.col("subject"))
        .agg(F.count(F.lit(1)).alias("messages"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "subject",
            "messages",
            (F.col("messages") / seconds).alias("rate"),
        )
    )


def latency_percentiles(
    df: Any,
    *,
    window: str | None = "1 second",
    percentiles: Sequence[float] = (0.5, 0.9, 0.99),
    watermark: str | None = None,
    accuracy: int = 10_000,
) -> Any:
    """End-to-end latency ``receive_ts - send_ts`` in milliseconds: count, mean, max and
    approximate percentiles (columns ``p50_ms``, ``p90_ms``...), per ``window`` of receive
    time, or over everything with ``window=None`` (batch only). Rows without a send time
    are ignored.
    """
    from pyspark.sql import functions as F

    lat = (F.unix_micros("receive_ts") - F.unix_micros("send_ts")) / 1000.0
    src = df.where(F.col("send_ts").isNotNull()).withColumn("latency_ms", lat)
    names = [f"p{round(p * 100, 1):g}".replace(".", "_") + "_ms" for p in percentiles]
    aggs = [
        F.count(F.lit(1)).alias("messages"),
        F.avg("latency_ms").alias("mean_ms"),
        F.max("latency_ms").alias("max_ms"),
        *[
            F.percentile_approx("latency_ms", p, accuracy).alias(name)
            for p, name in zip(percentiles, names, strict=True)
        ],
    ]
    if window is None:
        return src.agg(*aggs)
    return (
        _with_watermark(src, "receive_ts", watermark)
        .groupBy(F.window("receive_ts", window).alias("window"))
        .agg(*aggs)
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "messages",
            "mean_ms",
            "max_ms",
            *names,
        )
    )


def ohlcv_bars(
    df: Any,
    *,
    window: str = "1 second",
    time_column: str = "send_ts",
    watermark: str | None = None,
    symbol_column: str = "symbol",
    price_column: str = "price",
    size_column: str = "size",
    sequence_column: str = "sequence",
) -> Any:
    """OHLCV bars and VWAP per symbol per ``window`` from trade rows.

    Input columns (names are parameters): ``symbol_column``, ``price_column``,
    ``size_column``, ``sequence_column`` and ``time_column`` (default the trade's send
    time). Output: ``symbol, start, end, open, high, low, close, volume, vwap, trades,
    last_ts`` (``symbol`` named after ``symbol_column``). ``open``/``close`` are the prices of the
    first/last trade by (time, sequence); ``vwap = sum(price*size) / sum(size)``;
    ``last_ts`` is the last trade's time (consumers measure latency from it).
    """
    from pyspark.sql import functions as F

    price, size = price_column, size_column
    order = F.struct(F.col(time_column), F.col(sequence_column))
    return (
        _with_watermark(df, time_column, watermark)
        .groupBy(F.window(time_column, window).alias("window"), F.col(symbol_column))
        .agg(
            F.min_by(price, order).alias("open"),
            F.max(price).alias("high"),
            F.min(price).alias("low"),
            F.max_by(price, order).alias("close"),
            F.sum(size).alias("volume"),
            (F.sum(F.col(price) * F.col(size)) / F.sum(size)).alias("vwap"),
            F.count(F.lit(1)).alias("trades"),
            F.max(time_column).alias("last_ts"),
        )
        .select(
            symbol_column,
            F.col("window.start").alias("start"),
            F.col("window.end").alias("end"),
            "open",
            "high",
            "low",
            "close",
            "volume",
            "vwap",
            "trades",
            "last_ts",
        )
    )
