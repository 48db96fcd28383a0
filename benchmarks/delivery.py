"""``python -m benchmarks.delivery [--rounds N] [--n N]``: what delivery guarantees cost.

1. The sequence header: aoz ``async for`` throughput at 100 B, exact subject, with
   ``await node.publish(...)`` per message, with ``sequence=True`` (the default) and
   ``sequence=False``, in interleaved rounds; the ratio is taken round by round.
2. A stalled subscriber (its event loop blocked, nothing read) and a publisher that
   sends ``--stall-n`` 1 KiB messages: the publisher's RSS growth, against the bound
   the settings document (``send_hwm`` x (1 KiB + 100 B) + kernel socket buffers).

Prints the figures; ``benchmarks/out/delivery.json`` keeps them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

import aoz

from .harness import ROOT, run_pubsub

MIB = 1024 * 1024
KERNEL_BUFFERS_MIB = 6.0  # loopback TCP send + receive buffers of one connection, at most


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--stall-n", type=int, default=300_000)
    args = ap.parse_args(argv)
    summary: dict[str, Any] = {"rounds": []}
    for r in range(args.rounds):
        row: dict[str, float] = {}
        for name, seq in (("sequence", True), ("plain", False)):
            extra = {"settings": {"sequence": seq}}
            res = run_pubsub("aoz", 100, args.n, 60.0, sub_extra=extra, pub_extra=extra)
            row[name] = res["msgs_per_s"]
            print(f"round {r + 1}: {name:9s} {res['msgs_per_s']:>10,.0f} msg/s "
                  f"(received {res['received']:,} of {res['sent']:,})", flush=True)
        summary["rounds"].append(row)
    ratios = [row["sequence"] / row["plain"] for row in summary["rounds"] if row["plain"]]
    med = statistics.median(ratios)
    summary["sequence_vs_plain"] = {"median": med, "min": min(ratios), "max": max(ratios)}
    print(f"\nsequence header / plain, exact subject, 100 B: {med:.3f}x "
          f"[{min(ratios):.3f}-{max(ratios):.3f}] (cost {100 * (1 - med):.1f}%, target <= 5%)")

    hwm = aoz.Settings().send_hwm
    bound = hwm * (1024 + 100) / MIB + KERNEL_BUFFERS_MIB
    stall = run_pubsub("aoz", 1024, args.stall_n, 120.0, stall=True)
    summary["stall"] = {**stall, "bound_mib": bound, "send_hwm": hwm}
    verdict = "within" if stall["rss_growth_mib"] <= bound else "OVER"
    print(f"stalled subscriber, {args.stall_n:,} x 1 KiB: publisher RSS grew "
          f"{stall['rss_growth_mib']:.1f} MiB ({verdict} the documented bound of {bound:.1f} MiB "
          f"for send_hwm={hwm:,})")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "delivery.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
