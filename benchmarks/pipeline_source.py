"""``python -m benchmarks.pipeline_source [--rows N] [--rounds R]``: the ``aoz`` Spark
source against Spark's own Parquet file source, over the same recording, same run.

The recording: ``N`` quotes (msgpack maps of 7 fields behind aoz's sequence header, 4
subjects, one publisher) turned into tables by the recorder's own
:func:`aoz.record.schema.build_tables` (``Quote``'s fields as typed columns) and
written as a Recorder writes them: files of 10,000 rows (its default ``flush_rows``)
under ``date=...``. Rounds alternate so machine noise hits every reader alike; each
read is a full scan of every column into Spark's ``noop`` sink:

* ``parquet``: ``spark.read.parquet(dir)`` (adds ``date``);
* ``aoz``: ``spark.read.format("aoz").load(dir)`` (adds ``date``, ``recorder``,
  ``offset``) with ``failOnDataLoss`` on (the default: the driver also checks sequence
  gaps, from the files' footer summaries where the recording has them);
* ``aoz-noloss``: the same with ``failOnDataLoss=false``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
FILE_ROWS = 10_000


class Quote(msgspec.Struct, tag="quote"):
    symbol: str
    bid: float
    ask: float
    bid_size: int
    ask_size: int
    seq: int
    ts: float


def make_recording(directory: Path, rows: int) -> None:
    from aoz._protocol.sequence import encode_header
    from aoz.record.files import partition_dir, write_atomically
    from aoz.record.schema import build_tables, columns_for

    columns = columns_for([Quote])
    enc = msgspec.msgpack.Encoder()
    t0 = time.time()
    symbols = ["IBM", "AAPL", "MSFT", "GOOG"]
    number = 0
    for start in range(0, rows, FILE_ROWS):
        batch = []
        for i in range(start, min(rows, start + FILE_ROWS)):
            sym = symbols[i % 4]
            q = Quote(sym, 100.0 + i % 50, 100.1 + i % 50, 100, 200, i, t0 + i * 1e-5)
            body = encode_header(1, 0xBEEF, i // 4 + 1) + enc.encode(q)
            batch.append((f"MD.X.{sym}", t0 + i * 1e-5, body))
        tables, _ = build_tables(batch, columns)
        for date, table in tables.items():
            number += 1
            name = f"part-{int(t0 * 1e6) + number}-bench001-{number:06d}.parquet"
            write_atomically(table, partition_dir(directory, date), name)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--master", default="local[2]")
    args = p.parse_args()

    from aoz.spark import local_session

    spark = local_session(args.master, "aoz-bench-source", jvm_log_level="ERROR")
    readers = {
        "parquet": lambda d: spark.read.parquet(d),
        "aoz": lambda d: spark.read.format("aoz").load(d),
        "aoz-noloss": lambda d: spark.read.format("aoz").option("failOnDataLoss", "false").load(d),
    }
    rounds = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            make_recording(Path(tmp), args.rows)
            print(f"recording: {args.rows:,} rows in {time.perf_counter() - t:.1f} s", flush=True)
            for read in readers.values():  # warm-up: JVM, Python workers
                assert read(tmp).count() == args.rows
            for r in range(args.rounds):
                rates = {}
                for name, read in readers.items():
                    t = time.perf_counter()
                    read(tmp).write.format("noop").mode("overwrite").save()
                    rates[name] = args.rows / (time.perf_counter() - t)
                rates["ratio"] = rates["aoz"] / rates["parquet"]
                rates["ratio_noloss"] = rates["aoz-noloss"] / rates["parquet"]
                rounds.append(rates)
                print(f"round {r + 1}: Parquet {rates['parquet']:,.0f} rows/s, aoz "
                      f"{rates['aoz']:,.0f} ({rates['ratio']:.2f}), aoz failOnDataLoss=false "
                      f"{rates['aoz-noloss']:,.0f} ({rates['ratio_noloss']:.2f})",
                      flush=True)  # fmt: skip
    finally:
        spark.stop()
    for key in ("ratio", "ratio_noloss"):
        values = [x[key] for x in rounds]
        print(f"aoz source : Spark Parquet source ({key}) = {statistics.median(values):.2f} "
              f"(median of {len(values)}, min {min(values):.2f}, max {max(values):.2f}), "
              f"{args.rows:,} rows, {args.master}, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "pipeline-source.json").write_text(json.dumps(rounds, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
