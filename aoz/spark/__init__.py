"""aoz on Spark (the ``aoz[spark]`` extra): a local SparkSession helper, DataFrame jobs over
recordings, and the ``aoz`` streaming sink. The core package never imports this.

>>> from aoz.spark import local_session, jobs          # doctest: +SKIP
>>> spark = local_session()
>>> jobs.ohlcv_bars(jobs.trades(spark.read.parquet("recordings"))).show()

Batch reading of recordings is Spark's own Parquet reader, ``spark.read.parquet(dir)``;
streaming reads use :func:`aoz.spark.jobs.read_recording_stream`.
"""

from __future__ import annotations

from .._extras import missing_extra

try:
    import pyspark  # noqa: F401 - fail here with the extra's name, not deep inside
except ImportError as exc:
    raise missing_extra(exc, "spark", "aoz.spark") from exc

from . import jobs
from .session import activate, local_session
from .sink import (
    AozDataSource,
    CommitNotice,
    Deduplicator,
    SinkEnvelope,
    SinkSidecar,
    register,
    sink_sidecar,
)

__all__ = [
    "AozDataSource",
    "CommitNotice",
    "Deduplicator",
    "SinkEnvelope",
    "SinkSidecar",
    "activate",
    "jobs",
    "local_session",
    "register",
    "sink_sidecar",
]
