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


async def one_round(n: int, directory: Path, pattern: str = "BENCH.>") -> dict[str, float]:
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
    async with aoz.connect(bind=["tcp://127.0.0.1:*"], connect=[ready["endpoint"]]) as node:
        async with Recorder(node, [pattern], directory, types=[Tick], flush_rows=50_000,
                            flush_interval=0.5, queue_size=1_000_000) as rec:  # fmt: skip
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
    return {
        "publisher": result["rate"], "recorder": rec_rate, "ratio": rec_rate / result["rate"],
        "dropped": stats.dropped, "lost": n - stats.written, "size": result["size"],
    }  # fmt: skip


async def _lines(stream: Any) -> Any:
    buf = b""
    async for chunk in stream:
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode()


def build_rate(n: int = 200_000) -> float:
    from aoz.record.schema import build_tables, columns_for

    rows = [
        ("BENCH.X", time.time(), b"\x01" + msgspec.msgpack.encode(payload(i))) for i in range(n)
    ]
    cols = columns_for([Tick])
    t0 = time.perf_counter()
    build_tables(rows, cols)
    return n / (time.perf_counter() - t0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=300_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pattern", default="BENCH.>", help="what the recorder subscribes")
    p.add_argument("--role", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role:
        anyio.run(publisher, args.n)
        return 0
    rounds = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            res = anyio.run(one_round, args.n, Path(tmp), args.pattern)
        rounds.append(res)
        print(f"round {r + 1}: publisher {res['publisher']:,.0f} msg/s, recorder "
              f"{res['recorder']:,.0f} rows/s, ratio {res['ratio']:.2f}, not recorded "
              f"{res['lost']:,} of {args.n:,} (subscription drops {res['dropped']:,}), "
              f"{res['size']} B messages", flush=True)  # fmt: skip
    ratios = [x["ratio"] for x in rounds]
    print(f"recorder : publisher = {statistics.median(ratios):.2f} (median of {len(ratios)}, "
          f"min {min(ratios):.2f}, max {max(ratios):.2f}); build_tables alone "
          f"{build_rate():,.0f} rows/s")  # fmt: skip
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "pipeline-recorder.json").write_text(json.dumps(rounds, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
