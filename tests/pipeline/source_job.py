"""Driver program for the ``aoz`` source's cluster tests (a subprocess: one driver JVM per
run, so a driver can be killed and restarted).

``stream``: a streaming query reading ``format("aoz")`` (from ``earliest``, at most
``--max-rows`` rows per micro-batch) into ``foreachBatch``, which writes each batch's
``(recorder, offset)`` pairs to ``OUT/batch-<id>-<pid>.json`` and prints
``batch <id> <rows>``. With ``--die-at K`` the driver SIGKILLs itself once batch K's
file is written (the batch is in the offset log, not in the commit log). With
``--available-now`` it reads what is recorded and exits; else it runs until killed.

``checks``: the batch and ``availableNow`` reads the tests judge, printed as one JSON
line ``result {...}``: a query over a recording with a gap, with and without
``failOnDataLoss``, and a read from a ``startingOffsets`` time. ``stream --checks ...``
runs them after the stream (a driver JVM start is the expensive part of these tests).

    python source_job.py MASTER stream RECORDING CHECKPOINT OUT [--max-rows N] [--die-at K]
        [--available-now [--checks GAP_RECORDING TIME_RECORDING START_TIME CHECKPOINTS]]
    python source_job.py MASTER checks GAP_RECORDING TIME_RECORDING START_TIME CHECKPOINTS
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any


def session(master: str) -> Any:
    from aoz.spark import activate, local_session

    spark = local_session(
        master, "aoz-source-test", shuffle_partitions=1,
        conf={
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.cores.max": "1",
            "spark.driver.memory": "512m",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executorEnv.PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        },
    )  # fmt: skip
    activate(spark)
    return spark


def stream(spark: Any, args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def each(df: Any, batch_id: int) -> None:
        rows = [(r.recorder, r.offset) for r in df.select("recorder", "offset").collect()]
        name = f"batch-{batch_id}-{os.getpid()}.json"
        (out / f".{name}").write_text(json.dumps(rows))
        os.replace(out / f".{name}", out / name)
        say(f"batch {batch_id} {len(rows)}")
        if batch_id == args.die_at:
            os.kill(os.getpid(), signal.SIGKILL)

    reader = spark.readStream.format("aoz").option("startingOffsets", "earliest")
    if args.max_rows:
        reader = reader.option("maxRowsPerTrigger", str(args.max_rows))
    writer = (
        reader.load(args.recording).writeStream.foreachBatch(each)
        .option("checkpointLocation", args.checkpoint)
    )  # fmt: skip
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="200 milliseconds")
    say("started")
    query = writer.start()
    query.awaitTermination()
    exc = query.exception()
    if exc is not None:
        print(f"query failed: {exc}", file=sys.stderr)
        return 1
    if args.checks:  # the same driver goes on with the checks: one JVM start less
        return checks(spark, argparse.Namespace(
            gap_recording=args.checks[0], time_recording=args.checks[1],
            start_time=args.checks[2], checkpoints=args.checks[3],
        ))  # fmt: skip
    return 0


def checks(spark: Any, args: argparse.Namespace) -> int:
    result: dict[str, Any] = {}
    ck = Path(args.checkpoints)

    def run(name: str, **options: str) -> None:
        reader = spark.readStream.format("aoz").option("startingOffsets", "earliest")
        for key, value in options.items():
            reader = reader.option(key, value)
        seen: list[int] = []

        def each(df: Any, batch_id: int) -> None:
            seen.append(df.count())

        query = (
            reader.load(args.gap_recording).writeStream.foreachBatch(each)
            .option("checkpointLocation", str(ck / name)).trigger(availableNow=True).start()
        )  # fmt: skip
        try:
            query.awaitTermination()
            result[name] = {"rows": sum(seen), "error": None}
        except Exception as exc:  # the query's failure, as the user sees it
            result[name] = {"rows": sum(seen), "error": str(exc)[:2000]}

    run("gap_default")
    run("gap_off", failOnDataLoss="false")
    at = (
        spark.read.format("aoz").option("startingOffsets", args.start_time)
        .load(args.time_recording).select("sequence").collect()
    )  # fmt: skip
    result["from_time"] = sorted(r.sequence for r in at)
    say("result " + json.dumps(result))
    return 0


def say(line: str) -> None:
    """A line for the test (on the pipe only this process holds: see main)."""
    os.write(_OUT, (line + "\n").encode())


_OUT = 1


def main() -> int:
    global _OUT
    # The driver JVM would inherit stdout and hold the test's pipe open after this
    # process is killed: keep the pipe on a private descriptor, give the JVM stderr.
    _OUT = os.dup(1)
    os.dup2(2, 1)
    p = argparse.ArgumentParser()
    p.add_argument("master")
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("stream")
    s.add_argument("recording")
    s.add_argument("checkpoint")
    s.add_argument("out")
    s.add_argument("--max-rows", type=int, default=0)
    s.add_argument("--die-at", type=int, default=-1)
    s.add_argument("--available-now", action="store_true")
    s.add_argument(
        "--checks",
        nargs=4,
        metavar=("GAP", "TIMED", "START", "CKS"),
        help="then run the checks (see `checks`)",
    )
    c = sub.add_parser("checks")
    c.add_argument("gap_recording")
    c.add_argument("time_recording")
    c.add_argument("start_time")
    c.add_argument("checkpoints")
    args = p.parse_args()
    spark = session(args.master)
    try:
        return stream(spark, args) if args.mode == "stream" else checks(spark, args)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
