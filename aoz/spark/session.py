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
* ``jvm_log_level`` (e.g. ``"ERROR"``): a log4j2 configuration for the driver JVM given
  at its launch, so even its start-up lines (default profile, native-hadoop warning)
  stay quiet; ``setLogLevel`` alone comes too late for those. ``jvm_stderr`` (a file)
  takes what the JVM itself writes to stderr, for good.
"""

from __future__ import annotations

import os
import sys
import tempfile
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
    jvm_log_level: str | None = None,
    jvm_stderr: str | os.PathLike[str] | None = None,
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
    if jvm_log_level:
        config = _log4j2_config(jvm_log_level)
        settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{config}"
    if conf:
        settings.update(conf)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if jvm_stderr is None:
        spark = builder.getOrCreate()
    else:
        # The driver JVM inherits file descriptor 2 when it is launched: point it at a
        # file for the launch only, so the JVM's own lines (module warnings...) go there.
        saved = os.dup(2)
        try:
            with open(jvm_stderr, "ab") as log:
                os.dup2(log.fileno(), 2)
            spark = builder.getOrCreate()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    spark.sparkContext.setLogLevel(jvm_log_level or "ERROR")
    if register_sink:
        from .sink import register

        register(spark)
    return spark


def _log4j2_config(level: str) -> str:
    """A log4j2 properties file: everything at ``level`` to stderr, one line each."""
    text = (
        f"rootLogger.level = {level.lower()}\n"
        "rootLogger.appenderRef.stderr.ref = console\n"
        "appender.console.type = Console\n"
        "appender.console.name = console\n"
        "appender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n\n"
        # pyspark counts as a shell: Spark prints "Setting default log level" unless the
        # shell's logger is at the root's level
        "logger.repl.name = org.apache.spark.repl.Main\n"
        f"logger.repl.level = {level.lower()}\n"
    )
    fd, path = tempfile.mkstemp(prefix="aoz-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def activate(spark: Any) -> None:
    """Make ``spark`` the active session of the calling thread.

    py4j runs each Python thread on a JVM thread of its own, and Spark looks Python data
    sources (the ``aoz`` format) up through the thread's *active* session; a query
    started from a worker thread (``anyio.to_thread.run_sync``, ``threading.Thread``)
    fails with ``DATA_SOURCE_NOT_FOUND`` unless the thread calls this first.
    """
    jvm = spark.sparkContext._jvm
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
