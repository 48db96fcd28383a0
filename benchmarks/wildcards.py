"""``python -m benchmarks.wildcards [--rounds N] [--n N]``: wildcard vs exact delivery.

One publisher process (``await node.publish(...)`` per message, 100 B, as users write
it) and one subscriber process per case, in interleaved rounds so machine drift hits
every case alike:

- ``zmq.asyncio``: raw zmq.asyncio publisher and batched subscriber (the baseline);
- ``exact``: an aoz ``async for`` over ``node.subscribe("BENCH.DATA")``;
- ``>``: the same over ``node.subscribe(">")``;
- ``tokens``: the same over ``node.subscribe("BENCH.*")``.

Every pair is lossless (``send_policy="block"``, ``overflow="block"``, the raw
publisher with ``XPUB_NODROP``: the harness's defaults) and each case prints its loss; a
ratio whose side lost more than 0.1% in a round is printed as ``n/a``. Ratios are taken
round by round (same round, same noise) and reported as the median and min-max;
``benchmarks/out/wildcards.json`` keeps every figure, loss included.
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
    losses: list[dict[str, float]] = []
    for r in range(args.rounds):
        row: dict[str, float] = {}
        lost: dict[str, float] = {}
        for name, (system, extra) in CASES.items():
            res = run_pubsub(system, args.size, args.n, 60.0, sub_extra=extra)
            row[name] = res["msgs_per_s"]
            lost[name] = res["loss"]
            print(f"round {r + 1}: {name:12s} {res['msgs_per_s']:>10,.0f} msg/s "
                  f"(received {res['received']:,} of {res['sent']:,}, "
                  f"lost {res['loss'] * 100:.2f}%)", flush=True)
        rounds.append(row)
        losses.append(lost)
    summary: dict[str, Any] = {"size": args.size, "n": args.n, "rounds": rounds,
                               "loss": losses, "ratios": {}}
    print(f"\n{'ratio':24s} median [min-max]   target")
    for label, num, den, target in RATIOS:
        worst = max(max(lost[num], lost[den]) for lost in losses)
        if worst > 0.001:
            summary["ratios"][label] = {"median": None, "worst_loss": worst, "target": target}
            print(f"{label:24s} n/a (a side lost {worst * 100:.1f}%)")
            continue
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
