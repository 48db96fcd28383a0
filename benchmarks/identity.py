"""``python -m benchmarks.identity``: what binding identities to keys costs on receipt.

Two CURVE meshes of two nodes on one event loop, over one plain nsd: the mesh-key model
(every node holds the mesh server secret) and ``curve_identity=True`` (each node its own
key; the subscriber traces every frame to its connection's key, ``ZMQ_SRCFD``, and
checks the sequence header's publisher id: :class:`aoz._mesh.security.VerifyingSub`).
Each round sends N sequenced 100-byte messages with ``send_policy="block"`` (nothing is
lost: the run checks ``received == sent``) and times first publish to last receipt;
rounds alternate between the cases and the table gives medians and the ratio. Both
nodes share one loop and one machine, so the rates are lower than across processes;
the ratio is the figure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import anyio

import aoz
from aoz._discovery.nsd import NamingDaemon
from aoz._mesh.security import keypair


def _settings(case: str, nsd: str) -> list[dict[str, Any]]:
    (a, a_sec), (b, b_sec) = keypair(), keypair()
    common: dict[str, Any] = {"naming": [nsd], "send_policy": "block", "connect_interval": 0.05}
    if case == "identity":
        common.update(curve_identity=True, curve_allow=[a, b])
    else:
        server, server_sec = keypair()
        common.update(curve_server_public=server, curve_server_secret=server_sec,
                      curve_allow=[a, b])
    return [dict(common, curve_public=a, curve_secret=a_sec),
            dict(common, curve_public=b, curve_secret=b_sec)]


async def _round(case: str, nsd: str, n: int) -> float:
    pub_s, sub_s = _settings(case, nsd)
    async with aoz.connect(**pub_s) as pub, aoz.connect(**sub_s) as sub:
        await sub.wait_for_peer(pub.uuid, timeout=10)
        async with sub.subscribe("BENCH.ID", queue_size=n + 1) as s:
            await pub.wait_for_interest("BENCH.ID", timeout=10)
            body = b"x" * 100
            t0 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                tg.start_soon(pub.publish_many, "BENCH.ID", [body] * n)
                got = 0
                while got < n:
                    batch = await s.next(timeout=30)
                    got += 1 if batch is not None else 0
            elapsed = time.perf_counter() - t0
            stats = s.statistics()
            if got != n or stats.dropped:
                raise SystemExit(f"{case}: received {got} of {n}, dropped {stats.dropped}")
            return n / elapsed


async def main(rounds: int, n: int) -> int:
    rates: dict[str, list[float]] = {"mesh key": [], "identity": []}
    async with NamingDaemon(port=0) as nsd:
        for _ in range(rounds):
            for case in rates:
                rates[case].append(await _round(case, nsd.endpoint, n))
    base = statistics.median(rates["mesh key"])
    print(f"{n} x 100 B sequenced messages, {rounds} rounds, medians (msg/s), one loop")
    for case, values in rates.items():
        med = statistics.median(values)
        print(f"  {case:<9} {med:>10,.0f}  x{med / base:.2f}  "
              f"(min {min(values):,.0f}, max {max(values):,.0f})")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-n", type=int, default=50_000)
    args = parser.parse_args()
    sys.exit(anyio.run(main, args.rounds, args.n))
