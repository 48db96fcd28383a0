"""``python -m benchmarks.transport [--rounds N] [--n N] [--sizes 100,1024] [--policy P]``:
ipc vs tcp.

The same aoz publisher and subscriber processes (static mode, ``await node.publish`` per
message, ``async for`` on the other side) on tcp loopback (``tcp://127.0.0.1:*``) and on
``ipc://`` (a socket file in a private temporary directory), in interleaved rounds so
machine drift hits both alike. ``--policy lossless`` (the default) runs both ends
lossless (``send_policy="block"``, ``overflow="block"``), so the rates compare like with
like; ``--policy drop`` uses the default settings, where a slow subscriber loses
messages and the rates are not comparable by themselves.
Every line shows the rate beside its loss; the ratio ipc/tcp is taken round by round.
The load average before and after is printed: on a shared machine, read figures with it.
``benchmarks/out/transport.json`` keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from typing import Any

from .harness import ROOT, run_pubsub


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (1 min) {five:.2f} (5 min), {os.cpu_count()} cores"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=200_000, help="messages per case and round")
    ap.add_argument("--sizes", default="100,1024", help="payload sizes, bytes")
    ap.add_argument("--policy", choices=("lossless", "drop"), default="lossless")
    args = ap.parse_args(argv)
    pub_settings: dict[str, Any] = {}
    sub_settings: dict[str, Any] = {}
    if args.policy == "lossless":
        pub_settings, sub_settings = {"send_policy": "block"}, {"overflow": "block"}
    sizes = [int(x) for x in args.sizes.split(",")]
    directory = tempfile.mkdtemp(prefix="aozb")  # short: an ipc path fits in 107 bytes
    print(f"policy {args.policy}; before: {_load()}", flush=True)
    results: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            for size in sizes:
                row: dict[str, Any] = {"round": r + 1, "size": size}
                for transport in ("tcp", "ipc"):
                    bind = "tcp://127.0.0.1:*" if transport == "tcp" else f"ipc://{directory}/p{r}"
                    res = run_pubsub(
                        "aoz", size, args.n, 60.0,
                        pub_extra={"bind": bind, "settings": pub_settings},
                        sub_extra={"settings": sub_settings},
                    )
                    row[transport] = res
                    print(f"round {r + 1} {size:>5} B {transport}: {res['msgs_per_s']:>10,.0f} "
                          f"msg/s, loss {res['loss']:.2%} (received {res['received']:,} of "
                          f"{res['sent']:,})", flush=True)
                results.append(row)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"after: {_load()}\n\n{'size':>6}  {'tcp msg/s':>12}  {'ipc msg/s':>12}  "
          "ipc/tcp median [min-max]  loss tcp / ipc (max)")
    for size in sizes:
        rows = [row for row in results if row["size"] == size]
        tcp = [row["tcp"]["msgs_per_s"] for row in rows]
        ipc = [row["ipc"]["msgs_per_s"] for row in rows]
        ratio = [i / t for i, t in zip(ipc, tcp, strict=True) if t > 0]
        loss_t = max(row["tcp"]["loss"] for row in rows)
        loss_i = max(row["ipc"]["loss"] for row in rows)
        med = "-"
        if ratio:
            med = f"{statistics.median(ratio):.2f} [{min(ratio):.2f}-{max(ratio):.2f}]"
        print(f"{size:>6}  {statistics.median(tcp):>12,.0f}  {statistics.median(ipc):>12,.0f}  "
              f"{med:>24}  {loss_t:.2%} / {loss_i:.2%}")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    summary = {"n": args.n, "policy": args.policy, "rounds": results}
    (out / "transport.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
