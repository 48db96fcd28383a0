"""``python -m benchmarks.pipeline_recorder [--duration S | --n N | --quick] [--rounds R]``:
can the Recorder keep up with one aoz publisher at 100 B?

The publisher is another OS process (as a feed is): an aoz node sending 100-byte
msgpack maps (``sender``, ``seq``, ``ts``, ``symbol``, ``price`` and padding) with
``await node.publish`` per message, as fast as it can, for ``--duration`` seconds (30
by default); it reports its own send rate. The recorder (this process, the node's
default queue size) subscribes ``BENCH.>`` with decoded columns for ``symbol`` and
``price``. Per round (same round, same machine noise), against the publisher's rate:
the recorder's intake (messages received from the first to the last, per second) and
its rate to disk (rows written from its first received message to the last row on
disk, per second), the messages that never made it into a file (0 means it kept up:
with aoz's default ``send_policy="drop"`` a recorder that falls ``send_hwm`` behind
loses messages at the publisher, counted as ``lost``; a full subscription queue counts
``dropped``), and the largest backlog seen (rows received and not yet written, plus the
subscription's queue).

Also reported: the CPU per row of building the tables, and what the writer takes from
the recorder's own process (``time.process_time``, independent of the load).
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


async def publisher(n: int, duration: float) -> None:
    """Role (subprocess): bind, say where, wait for the recorder's interest, send n
    messages, or for ``duration`` seconds when n is 0."""
    import aoz

    async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
        print(json.dumps({"event": "ready", "endpoint": node.endpoint}), flush=True)
        await node.wait_for_interest("BENCH.X", timeout=30)
        size = len(msgspec.msgpack.encode(payload(0)))
        t0 = time.perf_counter()
        t_end = t0 + duration
        i = 0
        while (i < n) if n else (time.perf_counter() < t_end):
            for _ in range(min(1024, n - i) if n else 1024):
                await node.publish("BENCH.X", payload(i))
                i += 1
        dt = time.perf_counter() - t0
        print(json.dumps({"event": "result", "sent": i, "rate": i / dt, "seconds": dt,
                          "size": size + 1}), flush=True)  # fmt: skip
        sys.stdin.read()  # stay until released, so queued frames are delivered


async def one_round(
    n: int, directory: Path, pattern: str = "BENCH.>", writer: str = "process",
    duration: float = 30.0,
) -> dict[str, Any]:
    """One publisher, one recorder with the node's default queue size: a recorder that
    falls behind fills its subscription queue (``dropped``) or the publisher's send
    queue (``lost``, from the sequence numbers) within seconds."""
    import aoz
    from aoz.errors import WaitTimeout
    from aoz.record import Recorder

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = await anyio.open_process(
        [sys.executable, "-m", "benchmarks.pipeline_recorder", "--role", "--n", str(n),
         "--duration", str(duration)],
        env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    lines = _lines(proc.stdout)
    ready = json.loads(await anext(lines))
    cpu0 = time.process_time()
    async with aoz.connect(bind=["tcp://127.0.0.1:*"], connect=[ready["endpoint"]]) as node:
        async with Recorder(node, [pattern], directory, types=[Tick], flush_rows=50_000,
                            flush_interval=0.5, writer=writer) as rec:  # type: ignore[arg-type]  # fmt: skip
            first = anyio.Event()
            t_first = [0.0]
            t_last = [0.0]  # when the count of received messages last grew
            backlog = [0]  # the most rows received and not yet on disk, seen

            async def watch() -> None:
                await rec.wait_until(received=1, timeout=60)
                t_first[0] = t_last[0] = time.perf_counter()
                first.set()
                seen = 0
                while True:  # sampled until the round's task group is cancelled
                    s = rec.statistics()
                    queued = sum(sub.pending for sub in rec._subs)
                    backlog[0] = max(backlog[0], s.pending + queued)
                    if s.received > seen:
                        seen, t_last[0] = s.received, time.perf_counter()
                    await anyio.sleep(0.05)

            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                result = json.loads(await anext(lines))
                await first.wait()
                stats = rec.statistics()
                # until every row is written, or nothing more arrives for 3 s with no row
                # pending (the rest was lost upstream). Rows still pending are slow, not
                # lost: on a loaded machine one write can take over 3 s.
                t_done = time.perf_counter()
                sent = result["sent"]
                for _ in range(10_000):  # bounded; each step waits for progress
                    if stats.written >= sent:
                        break
                    try:
                        stats = await rec.wait_until(written=stats.written + 1, timeout=3)
                        t_done = time.perf_counter()
                    except WaitTimeout:
                        stats = rec.statistics()
                        if stats.pending == 0:
                            break
                tg.cancel_scope.cancel()
            stats = rec.statistics()
            lost_upstream = sum(sub.lost for sub in rec._subs)  # (main's tree: no stats.lost)
        await proc.stdin.aclose()
        await proc.wait()
    intake = stats.received / max(t_last[0] - t_first[0], 1e-9)
    rec_rate = stats.written / (t_done - t_first[0])
    cpu = (time.process_time() - cpu0) / max(stats.written, 1) * 1e6
    return {
        "cpu_us_per_row": cpu, "sent": sent, "seconds": result["seconds"],
        "publisher": result["rate"], "recorder": rec_rate, "ratio": rec_rate / result["rate"],
        "intake": intake / result["rate"], "backlog": backlog[0],
        "dropped": stats.dropped, "lost_upstream": lost_upstream, "lost": sent - stats.written,
        "size": result["size"], "writer": writer,
    }  # fmt: skip


async def _lines(stream: Any) -> Any:
    buf = b""
    async for chunk in stream:
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode()


def sample_frames(n: int) -> tuple[list[bytes], list[float]]:
    """Frames as the recorder gets them from an aoz publisher: sequenced msgpack."""
    from aoz._protocol.builder import FrameBuilder
    from aoz._protocol.codecs import Codec

    b = FrameBuilder(Codec.MSGPACK, publisher=0x5EED)
    return [b.publish("BENCH.X", payload(i)) for i in range(n)], [time.time()] * n


def build_rate(n: int = 200_000) -> dict[str, float]:
    """CPU microseconds per row (``time.process_time``, whatever the machine's load) of
    building the tables: from ``(subject, time, payload)`` rows taken from messages
    (before) and from the frames joined into one buffer (now)."""
    from aoz.record.bulk import pack, rows_of, tables_from_frames
    from aoz.record.schema import build_tables, columns_for

    frames, times = sample_frames(n)
    cols = columns_for([Tick])
    out: dict[str, list[float]] = {"rows": [], "frames": []}
    for _ in range(3):
        t = time.process_time()
        build_tables(rows_of(pack(frames, times)), cols)
        out["rows"].append(time.process_time() - t)
        t = time.process_time()
        tables_from_frames(pack(frames, times), cols)
        out["frames"].append(time.process_time() - t)
    return {k: statistics.median(v) / n * 1e6 for k, v in out.items()}


def writer_cost(n: int = 100_000, rounds: int = 3) -> dict[str, float]:
    """CPU seconds per million rows that the recorder's own process spends writing
    (``time.process_time``: every thread of this process, not the worker process):
    what the writer takes from the event loop's GIL, whatever the machine's load."""
    from aoz.record.bulk import pack
    from aoz.record.recorder import _new_pool, write_frames
    from aoz.record.schema import columns_for

    frames, times = sample_frames(n)
    cols = columns_for([Tick])
    pool = _new_pool()
    out: dict[str, list[float]] = {"thread": [], "process": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            warm = pack(frames[:10], times[:10])
            pool.submit(write_frames, warm, cols, tmp, "warm0000", 0, "snappy", False).result()
            for r in range(rounds):
                t = time.process_time()
                write_frames(pack(frames, times), cols, tmp, "thread00", 10 * r, "snappy", False)
                out["thread"].append(time.process_time() - t)
                t = time.process_time()
                args = (pack(frames, times), cols, tmp, "proc0000", 10 * r, "snappy", False)
                pool.submit(write_frames, *args).result()
                out["process"].append(time.process_time() - t)
    finally:
        pool.shutdown()
    return {k: statistics.median(v) / n * 1e6 for k, v in out.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=30.0,
                   help="seconds the publisher sends at full speed (default 30)")
    p.add_argument("--n", type=int, default=0, help="send N messages instead of --duration")
    p.add_argument("--quick", action="store_true", help="a smoke test: 3 s, one round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pattern", default="BENCH.>", help="what the recorder subscribes")
    p.add_argument("--writer", choices=["thread", "process", "both"], default="both",
                   help="the recorder's writer; both: alternate them in each round")
    p.add_argument("--cost-only", action="store_true", help="only the writers' CPU cost")
    p.add_argument("--role", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.duration, args.rounds = 3.0, 1
    if args.role:
        anyio.run(publisher, args.n, args.duration)
        return 0
    if args.cost_only:
        cost = writer_cost()
        print(f"recorder-process CPU per million rows written: thread writer "
              f"{cost['thread']:.2f} s, process writer {cost['process']:.2f} s")
        return 0
    writers = ["thread", "process"] if args.writer == "both" else [args.writer]
    rounds = []
    print(f"load {os.getloadavg()[0]:.1f} at the start", flush=True)
    for r in range(args.rounds):
        for writer in writers:
            with tempfile.TemporaryDirectory() as tmp:
                res = anyio.run(one_round, args.n, Path(tmp), args.pattern, writer,
                                args.duration)  # fmt: skip
            rounds.append(res)
            print(f"round {r + 1} ({writer} writer): publisher {res['sent']:,} in "
                  f"{res['seconds']:.1f} s = {res['publisher']:,.0f} msg/s; recorder "
                  f"intake {res['intake']:.2f}x, to disk {res['recorder']:,.0f} rows/s = "
                  f"{res['ratio']:.2f}x; not recorded {res['lost']:,} (dropped "
                  f"{res['dropped']:,}, lost upstream {res['lost_upstream']:,}); peak "
                  f"backlog {res['backlog']:,} rows; {res['size']} B messages; recorder "
                  f"process CPU {res['cpu_us_per_row']:.2f} us/row; load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    for writer in writers:
        mine = [x for x in rounds if x["writer"] == writer]
        for key in ("intake", "ratio"):
            v = [x[key] for x in mine]
            print(f"recorder ({writer} writer) {key} : publisher = {statistics.median(v):.2f}"
                  f" (median of {len(v)}, min {min(v):.2f}, max {max(v):.2f})")
        cpu = statistics.median(x["cpu_us_per_row"] for x in mine)
        print(f"  not recorded {[x['lost'] for x in mine]}, recorder process CPU "
              f"{cpu:.2f} us/row, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    try:
        import aoz.record.bulk  # noqa: F401
    except ImportError:  # an older tree (the "before" of PIPELINE.md): end to end only
        args.quick = True
    if not args.quick:
        rate = build_rate()
        print(f"tables, CPU per row: from message rows {rate['rows']:.2f} us, from joined "
              f"frames {rate['frames']:.2f} us")
        cost = writer_cost()
        print(f"recorder-process CPU per million rows written: thread writer "
              f"{cost['thread']:.2f} s, process writer {cost['process']:.2f} s")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "pipeline-recorder.json").write_text(json.dumps(rounds, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
