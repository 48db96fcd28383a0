"""``python -m benchmarks.wildcards [--rounds N] [--n N]``: wildcard vs exact delivery.

One publisher process (``await node.publish(...)`` per message, 100 B, as users write
it) and one subscriber process per case, in interleaved rounds so machine drift hits
every case alike:

- ``zmq.asyncio``: raw zmq.asyncio publisher and batched subscriber (the baseline);
- ``exact``: an aoz ``async for`` over ``node.subscribe("BENCH.DATA")``;
- ``>``: the same over ``node.subscribe(">")``;
- ``tokens``: the same over ``node.subscribe("BENCH.*")``.

Ratios are taken round by round (same round, same noise) and reported as the median
and min-max; ``benchmarks/out/wildcards.json`` keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from .harness import ROOT, run_pubsub

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "zmq.asyncio": ("zmq.asyncio", {}),
    "exact": ("aoz", {}),
    ">": ("aoz", {"pattern": ">"}),
    "tokens": ("aoz", {"pattern": "BENCH.*"}),
}
RATIOS = [
    ("> / exact", ">", "exact", 0.9),
    ("BENCH.* / exact", "tokens", "exact", 0.9),
    ("exact / zmq.asyncio", "exact", "zmq.asyncio", 0.6),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=200_000, help="messages per case and round")
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args(argv)
    rounds: list[dict[str, float]] = []
    for r in range(args.rounds):
        row: dict[str, float] = {}
        for name, (system, extra) in CASES.items():
            res = run_pubsub(system, args.size, args.n, 60.0, sub_extra=extra)
            row[name] = res["msgs_per_s"]
            print(f"round {r + 1}: {name:12s} {res['msgs_per_s']:>10,.0f} msg/s "
                  f"(received {res['received']:,} of {res['sent']:,})", flush=True)
        rounds.append(row)
    summary: dict[str, Any] = {"size": args.size, "n": args.n, "rounds": rounds, "ratios": {}}
    print(f"\n{'ratio':24s} median [min-max]   target")
    for label, num, den, target in RATIOS:
        per = [row[num] / row[den] for row in rounds if row[den] > 0]
        med = statistics.median(per)
        summary["ratios"][label] = {"median": med, "min": min(per), "max": max(per),
                                    "target": target}
        verdict = "meets" if med >= target else "short"
        print(f"{label:24s} {med:.2f}x [{min(per):.2f}-{max(per):.2f}]   >= {target} {verdict}")
    for name in CASES:
        print(f"{name:12s} median {statistics.median(r[name] for r in rounds):>10,.0f} msg/s")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "wildcards.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
