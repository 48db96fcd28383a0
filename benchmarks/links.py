"""``python -m benchmarks.links [--runs N]``: how fast a node hears that a peer died.

A peer node runs in a child process (discovery through an nsd in this process). Once
its link is up, the child is SIGKILLed and the time from the kill to the ``link_down``
peer event (``node.peer_events(links=True)``) is taken, and to its ``expired`` event
too. Nothing polls link state: the events are pushed by the SUB's monitor and the
XPUB's subscription events (issue #22, item 4); the peer's expiry follows from its link
(``expire_window``). Each run is a fresh child; figures are min / median / max.

Results go to stdout and ``benchmarks/out/links.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.text import TextReceiveStream

import aoz
from aoz._discovery.nsd import NamingDaemon

OUT = Path(__file__).resolve().parent / "out"
SETTINGS: dict[str, Any] = {"beacon_interval": 0.2, "connect_interval": 0.05}

_CHILD = """
import json, sys, anyio, aoz
async def main():
    async with aoz.connect(naming=[sys.argv[1]], **json.loads(sys.argv[2])) as node:
        print(node.uuid, flush=True)
        await anyio.sleep_forever()
anyio.run(main)
"""


async def _first_line(proc: anyio.abc.Process) -> str:
    assert proc.stdout is not None
    buf = ""
    async for chunk in TextReceiveStream(proc.stdout):
        buf += chunk
        if "\n" in buf:
            return buf.split("\n", 1)[0].strip()
    raise RuntimeError("the peer process exited before it was ready")


async def one_run(node: aoz.Node, nsd: str) -> dict[str, float]:
    events = node.peer_events(links=True)
    proc = await anyio.open_process(
        [sys.executable, "-c", _CHILD, nsd, json.dumps(SETTINGS)], stderr=None
    )
    try:
        with anyio.fail_after(30):
            uuid = await _first_line(proc)
            async for ev in events:
                if ev.peer.uuid == uuid and ev.kind == "link_up":
                    break
        t0 = time.perf_counter()
        os.kill(proc.pid, signal.SIGKILL)
        out: dict[str, float] = {}
        with anyio.fail_after(30):
            async for ev in events:
                if ev.peer.uuid == uuid and ev.kind in ("link_down", "expired"):
                    out.setdefault(ev.kind, time.perf_counter() - t0)
                    if len(out) == 2:
                        break
        return out
    finally:
        await events.aclose()
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def measure(runs: int) -> list[dict[str, float]]:
    async with NamingDaemon(port=0) as nsd, aoz.connect(
        naming=[nsd.endpoint], **SETTINGS
    ) as node:
        return [await one_run(node, nsd.endpoint) for _ in range(runs)]


def _summary(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    return f"{ms[0]:.0f} / {statistics.median(ms):.0f} / {ms[-1]:.0f} ms"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    results = anyio.run(measure, max(1, args.runs))
    load = os.getloadavg()[0]
    print(f"SIGKILLed peer, {len(results)} runs (min / median / max), load {load:.1f}:")
    print(f"  link_down after {_summary([r['link_down'] for r in results])}")
    print(f"  expired after   {_summary([r['expired'] for r in results])}")
    OUT.mkdir(exist_ok=True)
    (OUT / "links.json").write_text(json.dumps({"runs": results, "load": load}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
