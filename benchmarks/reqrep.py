"""``python -m benchmarks.reqrep``: request/reply only, interleaved, with CPU per request.

The suite's request/reply figures (``python -m benchmarks``: sequential p50 and 64
requests in flight, the requester and the replier each in its own process), without
its pub/sub rounds, plus what explains them on a shared machine: each process's CPU
time (user + system, libzmq's I/O threads included) and context switches per request,
read from ``/proc`` between the requester's ``ready`` and its ``result`` (so the
warm-up and the sequential round trips are in it: keep ``--n-pipe`` large).

Rounds interleave the systems (A, B, C, A, B, C...); ratios are taken per round
against raw zmq.asyncio (64 in flight) and zenoh (p50), then summarized as median
[min-max]. ``--tree NAME=PATH`` adds aoz from another checkout (its ``benchmarks/``
and ``aoz/``, built in place) as system NAME, e.g. ``--tree main=/tmp/main``: a
before/after figure from one run. Results go to stdout and ``benchmarks/out/reqrep.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from . import harness

OUT = Path(__file__).resolve().parent / "out"
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    """User + system seconds of process ``pid`` (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _switches(pid: int) -> int:
    """Voluntary + involuntary context switches of every thread of ``pid``."""
    n = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/status") as f:
            n += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
    return n


def one(system: str, root: Path, n_seq: int, n_pipe: int) -> dict[str, Any]:
    """One request/reply round of ``system`` (aoz taken from ``root``)."""
    harness.ROOT = root
    module = harness.MODULES[system]
    env = harness._env_of(system)
    req_p: dict[str, Any] = {"size": 100, "n_seq": n_seq, "n_pipe": n_pipe, "window": 64,
                             "deadline": 60.0, "env": env}
    rep_p: dict[str, Any] = {"env": env}
    if system == "zenoh":
        rep_p["port"] = req_p["port"] = harness.free_port()
    elif system in ("aoz", "aoz-py"):
        rep_p["peer"] = req_p["bind"] = f"tcp://127.0.0.1:{harness.free_port()}"
    with harness.started(module, "rep", rep_p) as rep:
        info = rep.wait_event("ready", 30)
        info.pop("event", None)
        with harness.started(module, "req", {**req_p, **info}) as req:
            req.wait_event("ready", 30)
            pids = (req.popen.pid, rep.popen.pid)
            cpu0 = [_cpu(p) for p in pids]
            cs0 = [_switches(p) for p in pids]
            r = req.wait_event("result", 120)
            cpu1 = [_cpu(p) for p in pids]  # a zombie keeps its figures until reaped
            try:
                cs1 = [_switches(p) for p in pids]
            except OSError:  # the requester's threads are gone already
                cs1 = cs0
    n = 200 + n_seq + n_pipe  # the roles' warm-up, then both phases
    return {
        "p50_us": r["p50_us"], "p99_us": r["p99_us"], "rps64": r["pipelined_rps"],
        "req_cpu_us": (cpu1[0] - cpu0[0]) / n * 1e6, "rep_cpu_us": (cpu1[1] - cpu0[1]) / n * 1e6,
        "req_switches": (cs1[0] - cs0[0]) / n, "rep_switches": (cs1[1] - cs0[1]) / n,
    }


def _span(xs: list[float], f: str) -> str:
    return f"{statistics.median(xs):{f}} [{min(xs):{f}}-{max(xs):{f}}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.reqrep",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-seq", type=int, default=500)
    ap.add_argument("--n-pipe", type=int, default=20_000)
    ap.add_argument("--systems", default="zmq.asyncio,aoz,aoz-py,zenoh")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH")
    args = ap.parse_args(argv)
    here = harness.ROOT
    trees = {name: Path(path) for name, path in (t.split("=", 1) for t in args.tree)}
    systems = [s.strip() for s in args.systems.split(",") if s.strip()] + list(trees)
    res: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for rnd in range(args.rounds):
        for s in systems:
            r = one("aoz" if s in trees else s, trees.get(s, here), args.n_seq, args.n_pipe)
            res[s].append(r)
            print(f"round {rnd + 1}: {s} {json.dumps({k: round(v, 2) for k, v in r.items()})}",
                  file=sys.stderr, flush=True)
    harness.ROOT = here
    print(f"{'system':12} {'p50 us':>16} {'req/s, 64 in flight':>24} {'/ zmq.asyncio':>18} "
          f"{'p50 / zenoh':>18} {'CPU us/req':>14} {'switches/req':>13}")
    for s, rs in res.items():
        line = f"{s:12} {_span([r['p50_us'] for r in rs], '.0f'):>16} "
        line += f"{_span([r['rps64'] for r in rs], '.0f'):>24} "
        for base, key in (("zmq.asyncio", "rps64"), ("zenoh", "p50_us")):
            ratios = [a[key] / b[key] for a, b in zip(rs, res.get(base, []), strict=False)]
            line += f"{_span(ratios, '.2f') if ratios else '-':>18} "
        line += f"{statistics.median(r['req_cpu_us'] for r in rs):6.1f}|"
        line += f"{statistics.median(r['rep_cpu_us'] for r in rs):<6.1f} "
        line += f"{statistics.median(r['req_switches'] for r in rs):5.2f}|"
        line += f"{statistics.median(r['rep_switches'] for r in rs):.2f}"
        print(line)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "reqrep.json").write_text(json.dumps({"load": os.getloadavg(), "results": res},
                                                indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
