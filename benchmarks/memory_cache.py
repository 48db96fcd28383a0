"""``python -m benchmarks.memory_cache [--rounds N] [--n N]``: what the publisher cache
costs, and how fast a late joiner gets its history (issue #21).

Three measurements, each as a ratio against its baseline in the same run, rounds
interleaved so machine drift hits both sides alike:

- ``await publish``: a node publishing 100 B on 1 and on 1,000 subjects in a tight
  loop with no subscriber (nothing but the send path), ``publish_cache=1`` against no
  cache: two nodes in this process, timed in twenty alternating slices (rates from
  each side's median slice);
- ``async for``: the harness's lossless pair (one publisher process, one subscriber
  process: ``send_policy="block"``, ``overflow="block"``), the publisher with memory
  on (heartbeats at their default 1 s and ``publish_cache=1``) against off
  (``publisher_heartbeat=0``, no cache), run off, on, on, off in odd rounds and on,
  off, off, on in even ones (drift of a shared machine hits both alike); a round's
  ratio is its two "on" rates' sum over its two "off" rates' sum. Each run's loss is
  printed and a round where a run lost more than 0.1% counts as ``n/a``. The CPU
  seconds per message of each process (publisher over its send loop, subscriber while
  it receives) are compared the same way: less moved by other work than the rates;
- ``async for``, side by side: the same two pairs at once (four processes), each
  subscriber timing every hundredth of its messages on the one monotonic clock; each
  side's rate is over the window both were receiving in, so whatever else the machine
  does hits both at the same moment (which pair starts first alternates by round; the
  window needs several seconds, ``--n 1000000``, before start-up jitter stops mattering;
  ``--side-by-side 0`` leaves it out);
- history: the time from ``subscribe("MD.>", history=1)`` to the last of 1,000
  historical messages (a publisher node with a cache of 1, a subscriber node linked to
  it, both in this process, on one event loop).

``benchmarks/out/memory_cache.json`` keeps every figure. The machine's load average
is printed with the results (2 shared cores: other work moves the absolute numbers;
the ratios are what to read).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aoz

from .harness import ROOT, run_pubsub

ANY = "tcp://127.0.0.1:*"


async def _publish_rates(subjects: int, n: int, slices: int = 20) -> tuple[float, float]:
    """``await publish`` rates without and with a cache of 1: two nodes open at once,
    ``n`` publishes each in ``slices`` slices, alternating (and which goes first, too);
    each rate is from the median slice, so a slice another process preempted does not
    move it."""
    async with (
        aoz.connect(bind=[ANY]) as off,
        aoz.connect(bind=[ANY], publish_cache=1) as on,
    ):
        names = [f"MD.S{i:04d}" for i in range(subjects)]
        body = b"x" * 100
        for node in (off, on):
            for s in names:  # warm: headers built, cache entries made
                await node.publish(s, body)
        spent: dict[int, list[float]] = {0: [], 1: []}
        per = n // slices
        for j in range(slices):
            order = ((0, off), (1, on)) if j % 2 == 0 else ((1, on), (0, off))
            for key, node in order:
                publish = node.publish
                t0 = time.perf_counter()
                for i in range(per):
                    await publish(names[i % subjects], body)
                spent[key].append(time.perf_counter() - t0)
        return per / statistics.median(spent[0]), per / statistics.median(spent[1])


#: the publisher's settings of each side of the ``async for`` comparison
SIDES: dict[str, dict[str, Any]] = {
    "off": {"settings": {"publisher_heartbeat": 0}},
    "on": {"settings": {"publish_cache": 1}},  # heartbeats at their default (1 s)
}


def _received_by(marks: list[float], every: int, t: float) -> float:
    """Messages a subscriber had received at time ``t`` (``marks[i]``: when it had
    ``(i + 1) * every``), interpolated between marks."""
    i = bisect.bisect_right(marks, t)
    if i == 0:
        return every * t / marks[0] if marks[0] > 0 else 0.0  # before the first mark
    if i == len(marks):
        return float(every * len(marks))
    t0, t1 = marks[i - 1], marks[i]
    return every * (i + (t - t0) / (t1 - t0) if t1 > t0 else i)


def _side_by_side(n: int, first: str, marks: int = 100) -> dict[str, Any]:
    """Both sides' pairs at once (``first`` started a moment before the other: callers
    alternate it); each side's rate over the window both received in."""
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(run_pubsub, "aoz", 100, n, 60.0,
                                     pub_extra=SIDES[name],
                                     sub_extra={"idle": 3.0, "marks": marks})
                   for name in ((first, "on" if first == "off" else "off"))}
        res = {name: f.result() for name, f in futures.items()}
    every = n // marks
    lo = max(r["marks"][0] for r in res.values() if r.get("marks"))
    hi = min(r["marks"][-1] for r in res.values() if r.get("marks"))
    out: dict[str, Any] = {"window_s": max(hi - lo, 0.0)}
    for name, r in res.items():
        m = r.get("marks") or [0.0]
        got = _received_by(m, every, hi) - _received_by(m, every, lo) if hi > lo else 0.0
        out[name] = {"rate": got / (hi - lo) if hi > lo else 0.0, "loss": r["loss"],
                     "messages_in": r.get("messages_in", 0)}
    return out


async def _history_time(subjects: int) -> tuple[float, int]:
    async with (
        aoz.connect(bind=[ANY], publish_cache=1) as pub,
        aoz.connect(bind=[ANY], connect=[pub.endpoint]) as sub,
    ):
        pub.connect_endpoint(sub.endpoint)
        for i in range(subjects):
            await pub.publish(f"MD.S{i:04d}", {"bid": i, "ask": i + 1})
        async with sub.subscribe("PROBE.A"), pub.subscribe("PROBE.B"):  # links up both ways
            await pub.wait_for_interest("PROBE.A", timeout=10)
            await sub.wait_for_interest("PROBE.B", timeout=10)
        t0 = time.perf_counter()
        got = 0
        async with sub.subscribe("MD.>", history=1) as s:
            async with asyncio.timeout(30):
                async for msg in s:
                    got += msg.replayed
                    if got == subjects:
                        break
        return time.perf_counter() - t0, got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=200_000, help="messages per case and round")
    ap.add_argument("--side-by-side", type=int, default=1,
                    help="1: also run the async for pairs at once (0: not)")
    args = ap.parse_args(argv)
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)
    summary: dict[str, Any] = {"n": args.n, "load_start": load, "publish": [],
                               "async_for": [], "side_by_side": [], "history": []}
    for r in range(args.rounds):
        row: dict[str, float] = {}
        for subjects in (1, 1000):
            row[f"{subjects}/0"], row[f"{subjects}/1"] = asyncio.run(
                _publish_rates(subjects, args.n))
        summary["publish"].append(row)
        print(f"round {r + 1}: await publish  1 subject {row['1/1'] / row['1/0']:.2f}x "
              f"({row['1/0']:,.0f} -> {row['1/1']:,.0f}/s), 1,000 subjects "
              f"{row['1000/1'] / row['1000/0']:.2f}x ({row['1000/0']:,.0f} -> "
              f"{row['1000/1']:,.0f}/s)", flush=True)
        pair: dict[str, Any] = {"off": [], "on": []}
        order = ("off", "on", "on", "off") if r % 2 == 0 else ("on", "off", "off", "on")
        for name in order:
            # the subscriber waits out a stall of up to 3 s (the harness's default,
            # 0.5 s, ends a run early when another process starves it on a loaded
            # machine, and the messages not yet read then count as lost)
            res = run_pubsub("aoz", 100, args.n, 60.0, pub_extra=SIDES[name],
                             sub_extra={"idle": 3.0})
            pair[name].append({"rate": res["msgs_per_s"], "loss": res["loss"],
                               "pub_cpu_s": res.get("pub_cpu_s", 0.0),
                               "sub_cpu_s": res.get("sub_cpu_s", 0.0)})
            print(f"round {r + 1}: async for {name:8s} {res['msgs_per_s']:>10,.0f} msg/s "
                  f"(received {res['received']:,} of {res['sent']:,}, "
                  f"lost {res['loss'] * 100:.2f}%; CPU pub "
                  f"{res.get('pub_cpu_s', 0.0) * 1e6 / args.n:.2f} us/msg, sub "
                  f"{res.get('sub_cpu_s', 0.0) * 1e6 / args.n:.2f} us/msg)", flush=True)
        summary["async_for"].append(pair)
        if args.side_by_side:
            both = _side_by_side(args.n, order[0])
            summary["side_by_side"].append(both)
            print(f"round {r + 1}: side by side  off {both['off']['rate']:>10,.0f} msg/s, on "
                  f"{both['on']['rate']:>10,.0f} msg/s over {both['window_s']:.2f} s "
                  f"(lost {both['off']['loss'] * 100:.2f}% / {both['on']['loss'] * 100:.2f}%)",
                  flush=True)
        dt, got = asyncio.run(_history_time(1000))
        summary["history"].append({"seconds": dt, "messages": got})
        print(f"round {r + 1}: history of 1,000 subjects: {dt * 1000:.1f} ms ({got} messages)",
              flush=True)
    pub1 = [row["1/1"] / row["1/0"] for row in summary["publish"]]
    pub1000 = [row["1000/1"] / row["1000/0"] for row in summary["publish"]]
    ok = [p for p in summary["async_for"]
          if max(run["loss"] for runs in p.values() for run in runs) <= 0.001]

    def ratio(p: dict[str, list[dict[str, float]]], key: str) -> float:
        return sum(run[key] for run in p["on"]) / sum(run[key] for run in p["off"])

    fors = [ratio(p, "rate") for p in ok]
    pub_cpu = [ratio(p, "pub_cpu_s") for p in ok]
    sub_cpu = [ratio(p, "sub_cpu_s") for p in ok]
    sides = [b["on"]["rate"] / b["off"]["rate"] for b in summary["side_by_side"]
             if b["off"]["rate"] > 0 and b["window_s"] > 0.2
             and max(b["off"]["loss"], b["on"]["loss"]) <= 0.001]
    hist = [h["seconds"] for h in summary["history"]]
    load = os.getloadavg()
    summary["load_end"] = load
    summary["ratios"] = {
        "publish_1_subject": statistics.median(pub1),
        "publish_1000_subjects": statistics.median(pub1000),
        "async_for": statistics.median(fors) if fors else None,
        "async_for_pub_cpu": statistics.median(pub_cpu) if pub_cpu else None,
        "async_for_sub_cpu": statistics.median(sub_cpu) if sub_cpu else None,
        "async_for_side_by_side": statistics.median(sides) if sides else None,
        "history_1000_s": statistics.median(hist),
    }
    print(f"\nawait publish, cache=1 / off: 1 subject {statistics.median(pub1):.2f}x "
          f"[{min(pub1):.2f}-{max(pub1):.2f}], 1,000 subjects "
          f"{statistics.median(pub1000):.2f}x [{min(pub1000):.2f}-{max(pub1000):.2f}]")
    if fors:
        print(f"async for, heartbeats + cache=1 / both off: {statistics.median(fors):.2f}x "
              f"[{min(fors):.2f}-{max(fors):.2f}] over {len(fors)} lossless rounds "
              "(target >= 0.95)")
        print(f"async for, CPU per message on / off: publisher {statistics.median(pub_cpu):.2f}x "
              f"[{min(pub_cpu):.2f}-{max(pub_cpu):.2f}], subscriber "
              f"{statistics.median(sub_cpu):.2f}x [{min(sub_cpu):.2f}-{max(sub_cpu):.2f}]")
    else:
        print("async for: n/a (every round lost more than 0.1% on a side)")
    if sides:
        print(f"async for side by side, on / off over the common window: "
              f"{statistics.median(sides):.2f}x [{min(sides):.2f}-{max(sides):.2f}] over "
              f"{len(sides)} lossless rounds")
    elif args.side_by_side:
        print("async for side by side: n/a (no lossless round with a common window)")
    print(f"history, subscribe -> last of 1,000: median {statistics.median(hist) * 1000:.1f} ms "
          f"[{min(hist) * 1000:.1f}-{max(hist) * 1000:.1f}]")
    print(f"load average at end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory_cache.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
