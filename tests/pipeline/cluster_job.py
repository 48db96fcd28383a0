"""Driver program for the cluster tests (run as a subprocess: one JVM per driver, so a
driver can be restarted). A streaming query over a Parquet directory, shuffled by symbol,
written to the ``aoz`` sink, with a fault injected into attempt 0 of partition
``--fault-partition`` of batch ``--fault-batch`` once the sink took ``--fault-after``
rows of it (so rows of that attempt are already published):

``--fault crash --fault-marker FILE``: the Python worker writing the partition writes
FILE and SIGKILLs itself: a real worker crash, so Spark fails the task and retries it.

``--fault hold --fault-control ENDPOINT``: the writer connects a DEALER to the test's
ROUTER at ENDPOINT, says ``held`` and waits for ``go`` (sent once the test closed the
partition's sidecar), then sends on; when the attempt fails (no sidecar acknowledges its
rows) it says ``failed``, so that the test restarts the sidecar for the retry only then.

    python cluster_job.py MASTER SOURCE CHECKPOINT SIDECARS [--fault crash|hold ...]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zmq
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from aoz.spark.sink import AozDataSource

HOLD_LIMIT = 60.0  # seconds a held writer waits for `go` before failing its attempt


def where() -> str:
    ctx = TaskContext.get()
    return f"stage {ctx.stageId()} task {ctx.taskAttemptId()}" if ctx else "?"


def faulty(
    batches: Iterator[Any], rows: int, marker: str, control: zmq.Socket[bytes] | None
) -> Iterator[Any]:
    """Yield ``batches``; when the sink asks for more once it took ``rows`` rows, crash
    (``control`` None: write ``marker``, SIGKILL this worker) or hold (say ``held`` on
    ``control``, wait for ``go``). The sink asks for the next batch only after sending
    every chunk of the previous one and with fewer than ``window`` (4) chunks
    unacknowledged, so by then at least ``rows - 3 * chunk_rows`` rows of this attempt were
    published by a sidecar."""
    taken = 0
    for batch in batches:
        if taken >= rows:
            note = f"{where()}: after {taken} rows in the sink"
            if control is None:
                Path(marker).write_text(note + "\n")
                os.kill(os.getpid(), signal.SIGKILL)
            else:
                control.send_multipart([b"held", note.encode()])
                if not control.poll(int(HOLD_LIMIT * 1000)):
                    raise RuntimeError(f"no `go` from the test within {HOLD_LIMIT} s")
                control.recv()
                rows = sys.maxsize  # once
        yield batch
        taken += batch.num_rows


class FaultyWriter(DataSourceStreamArrowWriter):
    """The ``aoz`` stream writer with a fault in attempt 0 of one partition of one batch
    (see :func:`faulty`), configured by the ``fault*`` options of ``aoz_faulty``."""

    def __init__(self, inner: Any, options: dict[str, str]) -> None:
        self.inner = inner
        self.fault = options["fault"]
        self.marker = options.get("fault_marker", "")
        self.control = options.get("fault_control", "")
        self.rows = int(options["fault_after"])
        self.partition = int(options["fault_partition"])
        self.batch = options["fault_batch"]

    def write(self, iterator: Iterator[Any]) -> Any:
        ctx = TaskContext.get()
        if not (
            ctx and ctx.partitionId() == self.partition and ctx.attemptNumber() == 0
            and ctx.getLocalProperty("streaming.sql.batchId") == self.batch
        ):  # fmt: skip
            return self.inner.write(iterator)
        if self.fault == "crash":
            return self.inner.write(faulty(iterator, self.rows, self.marker, None))
        ctx = zmq.Context()
        control = ctx.socket(zmq.DEALER)
        control.connect(self.control)
        try:
            return self.inner.write(faulty(iterator, self.rows, "", control))
        except Exception as exc:
            control.send_multipart([b"failed", f"{where()}: {exc}".encode()])
            raise
        finally:
            control.close(linger=5000)  # the test is there: `failed` gets out
            ctx.term()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.inner.commit(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.inner.abort(messages, batchId)


class FaultyAoz(AozDataSource):
    """``format("aoz_faulty")``: the ``aoz`` sink with an injected fault."""

    @classmethod
    def name(cls) -> str:
        return "aoz_faulty"

    def streamWriter(self, schema: Any, overwrite: bool) -> FaultyWriter:
        return FaultyWriter(super().streamWriter(schema, overwrite), self.options)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("master")
    p.add_argument("source")
    p.add_argument("checkpoint")
    p.add_argument("sidecars")
    p.add_argument("--fault", choices=["crash", "hold"])
    p.add_argument("--fault-marker", default="")
    p.add_argument("--fault-control", default="")
    p.add_argument("--fault-after", type=int, default=600)
    p.add_argument("--fault-partition", type=int, default=0)
    p.add_argument("--fault-batch", type=int, default=0)
    p.add_argument("--timeout", default="2")
    args = p.parse_args()

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
    rows = (
        spark.readStream.schema("symbol STRING, n BIGINT").parquet(args.source)
        .repartition(2, "symbol")
    )  # fmt: skip
    writer = rows.writeStream.format("aoz")
    if args.fault:
        spark.dataSource.register(FaultyAoz)
        writer = (
            writer.format("aoz_faulty")
            .option("fault", args.fault).option("fault_marker", args.fault_marker)
            .option("fault_control", args.fault_control)
            .option("fault_after", str(args.fault_after))
            .option("fault_partition", str(args.fault_partition))
            .option("fault_batch", str(args.fault_batch))
        )  # fmt: skip
    query = (
        writer.option("sidecar", args.sidecars)
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
