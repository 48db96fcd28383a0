"""A SparkSession with defaults that work on a laptop, and take a cluster URL when you have one.

>>> from aoz.spark.session import local_session
>>> spark = local_session()                          # doctest: +SKIP
>>> spark = local_session("spark://head:7077")       # doctest: +SKIP

Why each default:

* ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` = ``sys.executable``: Python workers
  (UDFs, the ``aoz`` data source) must import the same aoz and pyarrow as the driver;
  the first ``python3`` on ``PATH`` often has neither.
* ``spark.driver.host`` / ``bindAddress`` = ``127.0.0.1`` (local masters only): no
  dependence on the machine's hostname resolving, nothing listening on other interfaces.
* ``spark.ui.enabled=false``: no web UI port to collide with in tests and demos.
* ``spark.sql.session.timeZone=UTC``: recordings store UTC microseconds; windows and
  dates are then UTC too.
* ``spark.sql.shuffle.partitions`` small (default 2): the default 200 makes every tiny
  streaming micro-batch schedule 200 tasks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["activate", "local_session"]


def local_session(
    master: str = "local[*]",
    app_name: str = "aoz",
    *,
    shuffle_partitions: int = 2,
    conf: Mapping[str, str] | None = None,
    register_sink: bool = True,
) -> Any:
    """Build (or return the running) SparkSession with aoz's defaults.

    ``master`` is any Spark master URL (``local[2]``, ``spark://host:7077``...). Extra
    ``conf`` entries override the defaults. With ``register_sink`` the ``aoz`` streaming
    sink (:mod:`aoz.spark.sink`) is registered, so ``df.writeStream.format("aoz")`` works.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings: dict[str, str] = {
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(max(shuffle_partitions, 1)),
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Small local micro-batches: keep the driver's state store and logs light.
        "spark.sql.streaming.minBatchesToRetain": "20",
        "spark.ui.showConsoleProgress": "false",
    }
    if master.startswith("local"):
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    settings["spark.executorEnv.PYSPARK_PYTHON"] = os.environ["PYSPARK_PYTHON"]
    if conf:
        settings.update(conf)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if register_sink:
        from .sink import register

        register(spark)
    return spark


def activate(spark: Any) -> None:
    """Make ``spark`` the active session of the calling thread.

    py4j runs each Python thread on a JVM thread of its own, and Spark looks Python data
    sources (the ``aoz`` format) up through the thread's *active* session; a query
    started from a worker thread (``anyio.to_thread.run_sync``, ``threading.Thread``)
    fails with ``DATA_SOURCE_NOT_FOUND`` unless the thread calls this first.
    """
    jvm = spark.sparkContext._jvm
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
