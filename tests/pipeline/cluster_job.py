"""Driver program for the cluster tests (run as a subprocess: one JVM per driver, so a
driver can be restarted). A streaming query over a Parquet directory, shuffled by symbol,
through a UDF that, with ``--slow-marker``, slows attempt 0 of one partition of one batch down after
``--slow-after`` rows (and says so in the marker file) so that the test can kill a
worker-side Python process mid-batch; written to the ``aoz`` sink.

    python cluster_job.py MASTER SOURCE CHECKPOINT SIDECARS [--slow-marker F] [--slow-after N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("master")
    p.add_argument("source")
    p.add_argument("checkpoint")
    p.add_argument("sidecars")
    p.add_argument("--slow-marker", default="")
    p.add_argument("--slow-after", type=int, default=500)
    p.add_argument("--slow-partition", type=int, default=0)
    p.add_argument("--slow-batch", type=int, default=0)
    p.add_argument("--timeout", default="2")
    args = p.parse_args()

    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    from aoz.spark import activate, local_session

    spark = local_session(
        args.master, "aoz-cluster-test", shuffle_partitions=2,
        conf={
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.cores.max": "1",
            "spark.driver.memory": "512m",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.task.maxFailures": "4",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "200",
            "spark.executorEnv.PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        },
    )  # fmt: skip
    activate(spark)
    marker = args.slow_marker
    slow_after = args.slow_after
    slow_partition, slow_batch = args.slow_partition, args.slow_batch
    seen = {"n": 0}

    def passthrough(n: int) -> int:
        # Attempt 0 of that partition goes slowly once it wrote `slow_after` rows, so that
        # the test can kill the executor's Python workers while the task is mid-batch.
        if marker:
            from pyspark import TaskContext

            ctx = TaskContext.get()
            batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
            if (
                ctx and ctx.partitionId() == slow_partition and ctx.attemptNumber() == 0
                and batch == str(slow_batch)
            ):  # fmt: skip
                seen["n"] += 1
                if seen["n"] == slow_after:
                    Path(marker).write_text(f"stage {ctx.stageId()} task {ctx.taskAttemptId()}\n")
                if seen["n"] >= slow_after:
                    time.sleep(0.005)
        return n

    # nondeterministic: the optimizer must keep it after the shuffle, in the writing stage
    tag = F.udf(passthrough, LongType()).asNondeterministic()
    rows = (
        spark.readStream.schema("symbol STRING, n BIGINT").parquet(args.source)
        .repartition(2, "symbol")
        .withColumn("n", tag("n"))
    )  # fmt: skip
    query = (
        rows.writeStream.format("aoz")
        .option("sidecar", args.sidecars)
        .option("subject_column", "symbol").option("subject_prefix", "CL.")
        .option("chunk_rows", "100").option("timeout", args.timeout)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    exc = query.exception()
    spark.stop()
    if exc is not None:
        print(f"query failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
