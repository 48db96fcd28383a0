"""``python -m benchmarks.memory``: what the mesh's memory (issue #21) costs.

Each part is a function of its own, so the publisher cache and history can add theirs.

Publisher heartbeats (``heartbeat_*``):

- **Throughput with heartbeats on vs off**, same run, rounds alternated: a publisher
  node (``send_policy="block"``) and a subscriber node (``overflow="block"``) on
  loopback, ``async for`` over N messages of 100 bytes on one subject, lossless (loss
  is counted and printed: it must be 0). "On" is the worst case we can make: a 0.1 s
  interval and 1,000 other subjects published just before, so every tick announces
  1,000 quiet subjects to the subscriber while the hot subject runs.
- **Idle CPU of a node with 10,000 quiet subjects** (process CPU time, libzmq's I/O
  threads included, over a few seconds): a node that published once on each of 10,000
  subjects and subscribes to them (self-delivery: it also receives and checks its own
  heartbeats, 10,000 tracked streams), with heartbeats off, on inside the window
  (every second all 10,000 are announced: the worst case), and on after the window
  (nothing is sent; the task only scans the builder's entries).

Results go to stdout and ``benchmarks/out/memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import anyio

import aoz

OUT = Path(__file__).resolve().parent / "out"


async def _throughput_round(n: int, heartbeat: float, quiet: int) -> dict[str, Any]:
    body = b"x" * 100
    async with (
        aoz.connect(bind=["tcp://127.0.0.1:*"], send_policy="block",
                    publisher_heartbeat=heartbeat) as pub,
        aoz.connect(connect=[pub.endpoint], overflow="block") as node,
        node.subscribe("BENCH.>") as sub,
    ):
        await pub.wait_for_interest("BENCH.HOT", timeout=10)
        for i in range(quiet):  # subjects that go quiet: announced by every tick
            await pub.publish(f"BENCH.Q{i}", body)
        for _ in range(quiet):
            await sub.next(timeout=10)
        got = 0

        async def produce() -> None:
            for _ in range(n):
                await pub.publish("BENCH.HOT", body)

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            async for _msg in sub:
                got += 1
                if got == n:
                    break
        elapsed = time.perf_counter() - t0
        st = sub.statistics()
        return {
            "heartbeat_s": heartbeat, "messages": n, "received": got,
            "lost": st.lost, "dropped": st.dropped,
            "msgs_per_s": round(n / elapsed),
            "heartbeats_sent": pub.statistics().heartbeats_out,
        }


def heartbeat_throughput(n: int = 200_000, rounds: int = 3,
                         quiet: int = 1000) -> dict[str, Any]:
    """``async for`` throughput, heartbeats on (0.1 s, ``quiet`` quiet subjects) vs
    off, alternated ``rounds`` times in this process; the ratio of the medians."""
    on: list[dict[str, Any]] = []
    off: list[dict[str, Any]] = []
    anyio.run(_throughput_round, n // 4, 0.0, quiet)  # warm-up, not counted
    for i in range(rounds):  # alternated, each side first every other round
        pair = [(off, 0.0), (on, 0.1)]
        for results, hb in pair if i % 2 == 0 else pair[::-1]:
            results.append(anyio.run(_throughput_round, n, hb, quiet))

    def median(rs: list[dict[str, Any]]) -> float:
        return sorted(r["msgs_per_s"] for r in rs)[len(rs) // 2]

    return {
        "on": on, "off": off,
        "median_on": median(on), "median_off": median(off),
        "ratio_on_off": round(median(on) / median(off), 3),
        "loss": sum(r["lost"] + r["dropped"] + r["messages"] - r["received"]
                    for r in on + off),
    }


async def _idle(subjects: int, seconds: float, heartbeat: float,
                window: float) -> dict[str, Any]:
    async with (
        aoz.connect(bind=["tcp://127.0.0.1:*"], publisher_heartbeat=heartbeat,
                    publisher_heartbeat_window=window) as node,
        node.subscribe("IDLE.>", queue_size=subjects) as sub,
    ):
        await node.wait_for_interest("IDLE.X", timeout=10)
        for i in range(subjects):
            await node.publish(f"IDLE.S{i}", b"x")
        for _ in range(subjects):
            await sub.next(timeout=10)
        if heartbeat and window < seconds:
            await anyio.sleep(window + 2 * heartbeat)  # let the window pass
        before = node.statistics()
        c0, t0 = time.process_time(), time.perf_counter()
        await anyio.sleep(seconds)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        after = node.statistics()
        return {
            "heartbeat_s": heartbeat, "window_s": window, "subjects": subjects,
            "cpu_s": round(cpu, 4), "wall_s": round(wall, 2),
            "cpu_percent": round(100 * cpu / wall, 2),
            "heartbeat_frames": after.heartbeats_out - before.heartbeats_out,
            "lost": after.lost_in,
        }


def heartbeat_idle_cpu(subjects: int = 10_000, seconds: float = 4.0) -> list[dict[str, Any]]:
    """Idle CPU of a node with ``subjects`` quiet subjects: heartbeats off, on inside
    their window (the worst case), on after it."""
    return [
        anyio.run(_idle, subjects, seconds, 0.0, 30.0),
        anyio.run(_idle, subjects, seconds, 1.0, 30.0),
        anyio.run(_idle, subjects, seconds, 1.0, 1.0),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--subjects", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args(argv)
    out: dict[str, Any] = {"hot_path": aoz.hot_path(), "load": os.getloadavg()}
    tp = out["heartbeat_throughput"] = heartbeat_throughput(args.messages, args.rounds)
    print(f"async for, block/lossless, {args.messages:,} x 100 B, {args.rounds} rounds: "
          f"heartbeats off {tp['median_off']:,.0f} msg/s, on (0.1 s, 1,000 quiet subjects) "
          f"{tp['median_on']:,.0f} msg/s: {tp['ratio_on_off']}x; loss {tp['loss']}")
    idle = out["heartbeat_idle_cpu"] = heartbeat_idle_cpu(args.subjects, args.seconds)
    for r in idle:
        what = ("off" if not r["heartbeat_s"] else
                "on, in window" if r["window_s"] > args.seconds else "on, after window")
        print(f"idle, {r['subjects']:,} quiet subjects, heartbeats {what:16}: "
              f"{r['cpu_s']:.3f} s CPU in {r['wall_s']} s ({r['cpu_percent']}%), "
              f"{r['heartbeat_frames']} heartbeat frames")
    out["load_after"] = os.getloadavg()
    print(f"load average before {out['load'][0]:.2f}, after {out['load_after'][0]:.2f} "
          f"({os.cpu_count()} CPUs), hot path {out['hot_path']}")
    OUT.mkdir(exist_ok=True)
    (OUT / "memory.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
