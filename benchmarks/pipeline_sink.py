"""``python -m benchmarks.pipeline_sink [--rows N] [--rounds R] [--sidecars K]``: the
``aoz`` Spark sink against Spark's own writers, same DataFrame, same run.

The DataFrame: ``N`` small rows (``symbol`` of 100 values, ``n`` bigint, ``price``
double), cached in memory first so no writer pays for producing it. Each round runs
every writer once, one after the other, so machine noise hits them alike; ratios are
taken per round.

* no-op Arrow writer: ``df.mapInArrow(f)`` where ``f`` takes every Arrow batch in a
  Python worker and drops it (the rows make the same JVM -> Python trip as the sink's),
  written to Spark's ``noop`` sink.
* Parquet: ``df.write.mode("overwrite").parquet(tmp)``.
* aoz, before: ``df.write.format("aoz")`` with the former wire (one ZeroMQ frame per
  row: ``rows_per_frame=1``, ``chunk_rows=2000``, ``window=4``).
* aoz: ``df.write.format("aoz")`` with the defaults (packed frames, a deeper window).
* publish: ``aoz.spark.publish_dataframe(df, ...)``, the same rows and wire as a
  ``mapInArrow`` job (no Data Source API: no Python processes on the driver per write).

The aoz writes go through ``K`` sidecars (``aoz sidecar`` processes, static mode, as
on a host) and are timed until one subscriber has received every row: ``--subscriber
raw`` (default) is a ZeroMQ SUB in this process counting rows (a packed frame's count
is read from its header); ``--subscriber aoz`` is an aoz node in another process whose
subscription unpacks each packed frame into one message per row, as consumers see
them. ``save()`` returning means every row was acknowledged, i.e. in ZeroMQ's queues
(the sidecars never drop).
"""

from __future__ import annotations

import argparse
import json
import os
import select
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
    """A raw SUB on every sidecar, counting rows whose subject starts with B. (one per
    plain frame, the count of a packed one)."""

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
            start = frame.index(b"\0") + 3
            if 0x10 <= frame[start] <= 0x13:  # packed rows (aoz._protocol.packed)
                self.count += int.from_bytes(frame[start + 1 : start + 5], "little")
            else:
                self.count += 1
            if self.count >= self.target >= 0:
                self.target = -1
                self.reached = time.perf_counter()
                self.done.set()


class AozCounter:
    """An aoz node in another process subscribed to ``B.>`` on every sidecar, counting
    the messages its subscription delivers (packed frames unpacked, one per row)."""

    def __init__(self, pubs: list[str]) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.pipeline_sink", "--role-subscriber",
             ",".join(pubs)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stdin is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the aoz subscriber did not start")
        self.count = 0
        self.reached = 0.0
        self.done = threading.Event()
        self._lines: list[str] = []

    def expect(self, n: int) -> None:
        assert self.proc.stdin is not None
        self.done.clear()
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        self._n = n

    def wait(self, timeout: float) -> bool:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return False
        count, reached = self.proc.stdout.readline().split()
        self.count, self.reached = int(count), float(reached)
        return self.count >= self._n

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


async def subscriber_role(pubs: str) -> None:
    """Role (subprocess): count ``B.`` rows; after each target read from stdin, print
    ``count time.monotonic()`` when it is reached."""
    import anyio

    import aoz

    async with aoz.connect(bind=["tcp://127.0.0.1:*"], connect=pubs.split(","),
                           queue_size=1_000_000) as node:
        sub = node.subscribe("B.>")
        stdin = anyio.wrap_file(sys.stdin)
        print("ready", flush=True)
        while line := await stdin.readline():
            target, got = int(line), 0
            async for batch in sub.batches(4096):
                got += sum(1 for m in batch if not m.subject.startswith("B._COMMIT"))
                if got >= target:
                    break
            print(got, time.monotonic(), flush=True)


def noop_arrow(batches: Any) -> Any:
    """The no-op writer: every Arrow batch reaches the Python worker and is dropped."""
    import pyarrow as pa

    rows = 0
    for batch in batches:
        rows += batch.num_rows
    yield pa.record_batch({"rows": pa.array([rows], pa.int64())})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sidecars", type=int, default=2)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--subscriber", choices=["raw", "aoz"], default="raw")
    p.add_argument("--role-subscriber", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role_subscriber:
        import anyio

        anyio.run(subscriber_role, args.role_subscriber)
        return 0

    from pyspark.sql import functions as F

    from aoz.spark import local_session, publish_dataframe

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
    counter: Any
    if args.subscriber == "raw":
        counter = Counter(sidecars.pubs)
        counter.start()
        wait = counter.done.wait
    else:
        counter = AozCounter(sidecars.pubs)
        wait = counter.wait
    clock = time.perf_counter if args.subscriber == "raw" else time.monotonic
    before = {"rows_per_frame": "1", "chunk_rows": "2000", "window": "4"}
    target = {"sidecar": ",".join(sidecars.endpoints), "subject_column": "symbol",
              "subject_prefix": "B."}

    def aoz_write(frame: Any, **options: str) -> None:
        (
            frame.write.format("aoz").mode("append")
            .option("sidecar", ",".join(sidecars.endpoints))
            .option("subject_column", "symbol").option("subject_prefix", "B.")
            .options(**options)
            .save()
        )  # fmt: skip

    def noop_write() -> None:
        df.mapInArrow(noop_arrow, "rows long").write.format("noop").mode("overwrite").save()

    # warm-up (JVM, Python workers) until the subscriber demonstrably receives rows
    small = df.limit(1000)
    for _ in range(20):
        counter.expect(1000)
        aoz_write(small)
        if wait(5):
            break
    else:
        raise RuntimeError("the subscriber never received the warm-up rows")
    rounds = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            df.write.mode("overwrite").parquet(tmp + "/warm")
            noop_write()
            for r in range(args.rounds):
                t0 = time.perf_counter()
                noop_write()
                noop = args.rows / (time.perf_counter() - t0)
                t0 = time.perf_counter()
                df.write.mode("overwrite").parquet(f"{tmp}/r{r}")
                parquet = args.rows / (time.perf_counter() - t0)
                res = {"noop": noop, "parquet": parquet}
                for name, write in (("before", lambda: aoz_write(df, **before)),
                                    ("aoz", lambda: aoz_write(df)),
                                    ("publish", lambda: publish_dataframe(df, **target))):
                    counter.expect(args.rows)
                    t0 = clock()
                    write()
                    acked = args.rows / (clock() - t0)
                    if not wait(120):
                        raise RuntimeError(f"subscriber got {counter.count} of {args.rows}")
                    res[name] = args.rows / (counter.reached - t0)
                    res[f"{name}_acked"] = acked
                rounds.append(res)
                print(f"round {r + 1}: no-op Arrow {noop:,.0f} rows/s, Parquet {parquet:,.0f}, "
                      f"aoz before {res['before']:,.0f} ({res['before'] / noop:.2f}x no-op), "
                      f"aoz {res['aoz']:,.0f} rows/s received (acked {res['aoz_acked']:,.0f}): "
                      f"{res['aoz'] / noop:.2f}x no-op, {res['aoz'] / parquet:.2f}x Parquet; "
                      f"publish_dataframe {res['publish']:,.0f} rows/s: "
                      f"{res['publish'] / noop:.2f}x no-op, {res['publish'] / parquet:.2f}x "
                      f"Parquet; load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    finally:
        if isinstance(counter, AozCounter):
            counter.close()
        sidecars.close()
        spark.stop()
    for name in ("before", "aoz", "publish"):
        for base in ("noop", "parquet"):
            ratios = [x[name] / x[base] for x in rounds]
            print(f"aoz sink ({name}) : {base} = {statistics.median(ratios):.2f} (median of "
                  f"{len(ratios)}, min {min(ratios):.2f}, max {max(ratios):.2f})")
    print(f"{args.rows:,} rows, {args.master}, {args.sidecars} sidecars, "
          f"{args.subscriber} subscriber, load {os.getloadavg()[0]:.1f}")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "pipeline-sink.json").write_text(json.dumps(rounds, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
