"""``python -m benchmarks.pipeline_recorder [--n N] [--rounds R]``: can the Recorder keep
up with one aoz publisher at 100 B?

The publisher is another OS process (as a feed is): an aoz node sending ``N`` 100-byte
msgpack maps (``sender``, ``seq``, ``ts``, ``symbol``, ``price`` and padding) with
``await node.publish`` per message, as fast as it can; it reports its own send rate. The
recorder (this process) subscribes ``BENCH.>`` with decoded columns for ``symbol`` and
``price``, and is timed from its first received message to the last row on disk. The
figure is the ratio recorder rows/s : publisher messages/s, per round (same round, same
machine noise), plus the messages that never made it into a file (0 means it kept up:
with aoz's default ``send_policy="drop"`` a recorder that falls ``send_hwm`` behind
loses messages at the publisher).

Also reported: ``build_tables`` alone (decode + Arrow columns) in rows/s.
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
from typing import Any

import anyio
import msgspec

ROOT = Path(__file__).resolve().parents[1]


class Tick(msgspec.Struct):
    symbol: str
    price: float


def payload(i: int) -> dict[str, Any]:
    return {"sender": "bench", "seq": i, "ts": time.time(), "symbol": "SYM1", "price": 1.5,
            "pad": "x" * 38}  # fmt: skip


async def publisher(n: int) -> None:
    """Role (subprocess): bind, say where, wait for the recorder's interest, send n."""
    import aoz

    async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
        print(json.dumps({"event": "ready", "endpoint": node.endpoint}), flush=True)
        await node.wait_for_interest("BENCH.X", timeout=30)
        size = len(msgspec.msgpack.encode(payload(0)))
        t0 = time.perf_counter()
        for i in range(n):
            await node.publish("BENCH.X", payload(i))
        dt = time.perf_counter() - t0
        print(json.dumps({"event": "result", "rate": n / dt, "size": size + 1}), flush=True)
        sys.stdin.read()  # stay until released, so queued frames are delivered


async def one_round(
    n: int, directory: Path, pattern: str = "BENCH.>", writer: str = "process"
) -> dict[str, Any]:
    import aoz
    from aoz.errors import WaitTimeout
    from aoz.record import Recorder

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = await anyio.open_process(
        [sys.executable, "-m", "benchmarks.pipeline_recorder", "--role", "--n", str(n)],
        env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    lines = _lines(proc.stdout)
    ready = json.loads(await anext(lines))
    cpu0 = time.process_time()
    async with aoz.connect(bind=["tcp://127.0.0.1:*"], connect=[ready["endpoint"]]) as node:
        async with Recorder(node, [pattern], directory, types=[Tick], flush_rows=50_000,
                            flush_interval=0.5, queue_size=1_000_000,
                            writer=writer) as rec:  # type: ignore[arg-type]  # fmt: skip
            first = anyio.Event()
            t_first = [0.0]

            async def watch() -> None:
                await rec.wait_until(received=1, timeout=60)
                t_first[0] = time.perf_counter()
                first.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                result = json.loads(await anext(lines))
                await first.wait()
            stats = rec.statistics()
            # until every row is written, or nothing more arrives for 3 s with no row
            # pending (the rest was lost upstream: the publisher's queue to a recorder
            # that fell behind). Rows still pending are slow, not lost: on a loaded
            # machine one write can take over 3 s.
            t_done = time.perf_counter()
            for _ in range(10_000):  # bounded; each step waits for progress
                if stats.written >= n:
                    break
                try:
                    stats = await rec.wait_until(written=stats.written + 1, timeout=3)
                    t_done = time.perf_counter()
                except WaitTimeout:
                    stats = rec.statistics()
                    if stats.pending == 0:
                        break
            stats = rec.statistics()
        await proc.stdin.aclose()
        await proc.wait()
    rec_rate = stats.written / (t_done - t_first[0])
    cpu = (time.process_time() - cpu0) / max(stats.written, 1) * 1e6
    return {
        "cpu_us_per_row": cpu,
        "publisher": result["rate"], "recorder": rec_rate, "ratio": rec_rate / result["rate"],
        "dropped": stats.dropped, "lost": n - stats.written, "size": result["size"],
        "writer": writer,
    }  # fmt: skip


async def _lines(stream: Any) -> Any:
    buf = b""
    async for chunk in stream:
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode()


def sample_rows(n: int) -> list[tuple[str, float, bytes]]:
    """Rows as the recorder gets them from an aoz publisher: sequenced msgpack payloads."""
    from aoz.protocol.builder import FrameBuilder
    from aoz.protocol.codecs import Codec

    b = FrameBuilder(Codec.MSGPACK, publisher=0x5EED)
    frames = (b.publish("BENCH.X", payload(i)) for i in range(n))
    return [("BENCH.X", time.time(), f[f.index(b"\0") + 3 :]) for f in frames]


def build_rate(n: int = 200_000) -> float:
    from aoz.record.schema import build_tables, columns_for

    rows = sample_rows(n)
    cols = columns_for([Tick])
    t0 = time.perf_counter()
    build_tables(rows, cols)
    return n / (time.perf_counter() - t0)


def writer_cost(n: int = 100_000, rounds: int = 3) -> dict[str, float]:
    """CPU seconds per million rows that the recorder's own process spends writing
    (``time.process_time``: every thread of this process, not the worker process):
    what the writer takes from the event loop's GIL, whatever the machine's load."""
    from aoz.record.recorder import _new_pool, write_rows
    from aoz.record.schema import columns_for

    rows = sample_rows(n)
    cols = columns_for([Tick])
    pool = _new_pool()
    out: dict[str, list[float]] = {"thread": [], "process": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            pool.submit(write_rows, rows[:10], cols, tmp, "warm0000", 0, "snappy", False).result()
            for r in range(rounds):
                t = time.process_time()
                write_rows(rows, cols, tmp, "thread00", 10 * r, "snappy", False)
                out["thread"].append(time.process_time() - t)
                t = time.process_time()
                job = [(m[0], m[1], m[2]) for m in rows]  # what _write builds from messages
                args = (job, cols, tmp, "proc0000", 10 * r, "snappy", False)
                pool.submit(write_rows, *args).result()
                out["process"].append(time.process_time() - t)
    finally:
        pool.shutdown()
    return {k: statistics.median(v) / n * 1e6 for k, v in out.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=300_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pattern", default="BENCH.>", help="what the recorder subscribes")
    p.add_argument("--writer", choices=["thread", "process", "both"], default="both",
                   help="the recorder's writer; both: alternate them in each round")
    p.add_argument("--cost-only", action="store_true", help="only the writers' CPU cost")
    p.add_argument("--role", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role:
        anyio.run(publisher, args.n)
        return 0
    if args.cost_only:
        cost = writer_cost()
        print(f"recorder-process CPU per million rows written: thread writer "
              f"{cost['thread']:.2f} s, process writer {cost['process']:.2f} s")
        return 0
    writers = ["thread", "process"] if args.writer == "both" else [args.writer]
    rounds = []
    for r in range(args.rounds):
        for writer in writers:
            with tempfile.TemporaryDirectory() as tmp:
                res = anyio.run(one_round, args.n, Path(tmp), args.pattern, writer)
            rounds.append(res)
            print(f"round {r + 1} ({writer} writer): publisher {res['publisher']:,.0f} msg/s, "
                  f"recorder {res['recorder']:,.0f} rows/s, ratio {res['ratio']:.2f}, not "
                  f"recorded {res['lost']:,} of {args.n:,} (subscription drops "
                  f"{res['dropped']:,}), {res['size']} B messages, recorder process CPU "
                  f"{res['cpu_us_per_row']:.2f} us/row, load {os.getloadavg()[0]:.1f}",
                  flush=True)  # fmt: skip
    for writer in writers:
        ratios = [x["ratio"] for x in rounds if x["writer"] == writer]
        cpu = statistics.median(x["cpu_us_per_row"] for x in rounds if x["writer"] == writer)
        print(f"recorder ({writer} writer) : publisher = {statistics.median(ratios):.2f} "
              f"(median of {len(ratios)}, min {min(ratios):.2f}, max {max(ratios):.2f}), "
              f"recorder process CPU {cpu:.2f} us/row, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"build_tables alone {build_rate():,.0f} rows/s")
    cost = writer_cost()
    print(f"recorder-process CPU per million rows written: thread writer "
          f"{cost['thread']:.2f} s, process writer {cost['process']:.2f} s")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "pipeline-recorder.json").write_text(json.dumps(rounds, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
