"""aoz on Spark (the ``aoz[spark]`` extra): a SparkSession helper, DataFrame jobs over
recordings, the ``aoz`` sink (:mod:`aoz.spark.sink`), its sidecar
(:mod:`aoz.spark.sidecar`) and exactly-once delivery for consumers
(:mod:`aoz.spark.delivery`). The core package never imports this.

>>> from aoz.spark import local_session, jobs          # doctest: +SKIP
>>> spark = local_session()
>>> jobs.ohlcv_bars(jobs.trades(spark.read.parquet("recordings"))).show()

Consumers of the sink need neither Spark nor Java: :mod:`aoz.spark.delivery` and
:mod:`aoz.spark.sidecar` import no pyspark; names from :mod:`aoz.spark.sink` are
loaded on first use.
"""

from __future__ import annotations

from typing import Any

from .._extras import missing_modules, require

# The Spark side (jobs, the sink, local_session) needs the whole 'spark' extra; say so
# at once, with everything missing, rather than naming 'record' now and 'spark' later.
if missing_modules("record"):
    require("aoz.spark", "spark")

from . import jobs
from .delivery import CommitNotice, Deduplicator, SinkEnvelope
from .session import activate, local_session
from .sidecar import SinkSidecar, probe_sidecar, run_sidecar, sink_sidecar

__all__ = [
    "AozDataSource",
    "CommitNotice",
    "Deduplicator",
    "SinkEnvelope",
    "SinkSidecar",
    "activate",
    "jobs",
    "local_session",
    "probe_sidecar",
    "publish_dataframe",
    "register",
    "run_sidecar",
    "sink_sidecar",
]


def __getattr__(name: str) -> Any:
    if name in ("AozDataSource", "publish_dataframe", "register"):
        from . import sink

        return getattr(sink, name)
    raise AttributeError(f"module 'aoz.spark' has no attribute {name!r}")
