"""``python -m benchmarks.pipeline_sink [--rows N] [--rounds R] [--sidecars K]``: the
``aoz`` Spark sink against Spark's own Parquet writer, same DataFrame, same run.

The DataFrame: ``N`` small rows (``symbol`` of 100 values, ``n`` bigint, ``price``
double), cached in memory first so neither writer pays for producing it. Rounds
alternate (Parquet, aoz, Parquet, aoz...) so machine noise hits both alike; the ratio
is taken per round.

* Parquet: ``df.write.mode("overwrite").parquet(tmp)``.
* aoz: ``df.write.format("aoz")`` through ``K`` sidecars (``aoz sidecar`` processes,
  static mode, as on a host), timed until a subscriber (a raw ZeroMQ SUB in this
  process, counting frames) has received every row; ``save()`` returning means every
  row was acknowledged, i.e. in ZeroMQ's queues (the sidecars never drop).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import zmq

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Sidecars:
    """K `aoz sidecar` processes; each publishes on a static PUB port of its own."""

    def __init__(self, k: int) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        self.endpoints: list[str] = []
        self.pubs: list[str] = []
        self.procs = []
        for _ in range(k):
            ep, pub = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
            proc = subprocess.Popen(
                [sys.executable, "-m", "aoz", "sidecar", "--bind", ep, "--static-bind", pub],
                stdout=subprocess.PIPE, text=True, env=env,
            )  # fmt: skip
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line.startswith("aoz sidecar ready"):
                raise RuntimeError(f"sidecar did not start: {line!r}")
            self.endpoints.append(ep)
            self.pubs.append(pub)
            self.procs.append(proc)

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
            proc.wait(10)


class Counter(threading.Thread):
    """A raw SUB on every sidecar, counting frames whose subject starts with B."""

    def __init__(self, pubs: list[str]) -> None:
        super().__init__(daemon=True)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"B.")
        for pub in pubs:
            self.sock.connect(pub)
        self.count = 0
        self.target = -1
        self.done = threading.Event()
        self.reached = 0.0

    def expect(self, n: int) -> None:
        self.done.clear()
        self.count = 0
        self.target = n

    def run(self) -> None:
        recv, sock = zmq.backend.Socket.recv, self.sock  # no Python wrapper per frame
        while True:
            frame = recv(sock)
            if frame.startswith(b"B._COMMIT"):
                continue
            self.count += 1
            if self.count == self.target:
                self.reached = time.perf_counter()
                self.done.set()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sidecars", type=int, default=2)
    p.add_argument("--master", default="local[2]")
    args = p.parse_args()

    from pyspark.sql import functions as F

    from aoz.spark import local_session

    spark = local_session(args.master, "aoz-bench-sink", jvm_log_level="ERROR")
    df = (
        spark.range(args.rows, numPartitions=2)
        .select(
            F.concat(F.lit("S"), (F.col("id") % 100).cast("string")).alias("symbol"),
            F.col("id").alias("n"),
            (F.col("id") * 0.01).alias("price"),
        )
        .cache()
    )
    df.count()
    sidecars = Sidecars(args.sidecars)
    counter = Counter(sidecars.pubs)
    counter.start()

    def aoz_write(frame: Any) -> None:
        (
            frame.write.format("aoz").mode("append")
            .option("sidecar", ",".join(sidecars.endpoints))
            .option("subject_column", "symbol").option("subject_prefix", "B.")
            .save()
        )  # fmt: skip

    # warm-up (JVM, Python workers) until the subscriber demonstrably receives rows
    small = df.limit(1000)
    for _ in range(20):
        counter.expect(1000)
        aoz_write(small)
        if counter.done.wait(5):
            break
    else:
        raise RuntimeError("the subscriber never received the warm-up rows")
    rounds = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            df.write.mode("overwrite").parquet(tmp + "/warm")
            for r in range(args.rounds):
                t0 = time.perf_counter()
                df.write.mode("overwrite").parquet(f"{tmp}/r{r}")
                parquet = args.rows / (time.perf_counter() - t0)
                counter.expect(args.rows)
                t0 = time.perf_counter()
                aoz_write(df)
                acked = args.rows / (time.perf_counter() - t0)
                if not counter.done.wait(120):
                    raise RuntimeError(f"subscriber got {counter.count} of {args.rows}")
                sink = args.rows / (counter.reached - t0)
                rounds.append({"parquet": parquet, "aoz": sink, "aoz_acked": acked,
                               "ratio": sink / parquet})  # fmt: skip
                print(f"round {r + 1}: Parquet {parquet:,.0f} rows/s, aoz sink {sink:,.0f} "
                      f"rows/s (received; acked {acked:,.0f}), ratio {sink / parquet:.2f}",
                      flush=True)  # fmt: skip
    finally:
        sidecars.close()
        spark.stop()
    ratios = [x["ratio"] for x in rounds]
    print(f"aoz sink : Spark Parquet writer = {statistics.median(ratios):.2f} (median of "
          f"{len(ratios)}, min {min(ratios):.2f}, max {max(ratios):.2f}), {args.rows:,} rows, "
          f"{args.master}, {args.sidecars} sidecars")  # fmt: skip
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "pipeline-sink.json").write_text(json.dumps(rounds, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
