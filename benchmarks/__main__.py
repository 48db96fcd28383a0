"""``python -m benchmarks [--smoke | --quick | --full]``: aoz side by side with raw
pyzmq, raw zmq.asyncio, nats.py and zenoh, in one run.

Every system is measured in interleaved rounds (A, B, C, A, B, C, ...) so machine drift
hits all alike; each figure is reported as the median and min-max over rounds, and
aoz's ratios against the baselines are taken round by round (same round, same noise).
Output: a rich table on stdout, ``benchmarks/out/results-<mode>.json`` and
``benchmarks/out/ratios-<mode>.png``; ``--full`` also rewrites ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from .harness import (
    DROPPING_SYSTEMS,
    ROOT,
    BenchError,
    NatsServer,
    discovery_available,
    run_discovery,
    run_idle,
    run_pubsub,
    run_reqrep,
)

# Lossless pairs first (the headline), then the dropping ones (shown beside their loss).
PUBSUB_SYSTEMS = [
    "zmq",
    "zmq.asyncio",
    "aoz",
    "aoz-wild",
    "aoz-batch",
    "aoz-py",
    "aoz-batch-py",
    "aoz-rx",
    "aoz-batch-rx",
    "aoz-tx",
    "nats",
    "zenoh",
    "aoz-drop",
    "zenoh-drop",
]
LOSSLESS_SYSTEMS = [s for s in PUBSUB_SYSTEMS if s not in DROPPING_SYSTEMS]
RR_SYSTEMS = ["zmq", "zmq.asyncio", "aoz", "aoz-py", "nats", "zenoh"]
MEM_SYSTEMS = ["zmq", "aoz", "nats", "zenoh"]
SIZES = {"100B": 100, "1KiB": 1024, "16KiB": 16384}
SIZE_LABELS = {"100B": "100 B", "1KiB": "1 KiB", "16KiB": "16 KiB"}
# A ratio is printed only when both sides lost at most this fraction in every round.
LOSS_LIMIT = 0.001

MODES: dict[str, dict[str, Any]] = {
    "smoke": {
        "rounds": 1,
        "n": {"100B": 20_000, "1KiB": 10_000, "16KiB": 2_000},
        "sizes": ["100B", "16KiB"],
        "n_seq": 300,
        "n_pipe": 2_000,
        "idle_count": 2,
        "stall_n": 20_000,
        "discovery": [8],
        "timeout": 20.0,
    },
    "quick": {
        "rounds": 3,
        # a round of 100,000 x 100 B lasted ~0.1 s: start-up swung single rounds by 2x
        "n": {"100B": 300_000, "1KiB": 100_000, "16KiB": 20_000},
        "sizes": list(SIZES),
        "n_seq": 2_000,
        "n_pipe": 10_000,
        "idle_count": 3,
        "stall_n": 250_000,
        "discovery": [8, 32],
        "timeout": 30.0,
    },
    "full": {
        "rounds": 7,
        "n": {"100B": 300_000, "1KiB": 150_000, "16KiB": 30_000},
        "sizes": list(SIZES),
        "n_seq": 5_000,
        "n_pipe": 30_000,
        "idle_count": 8,
        "stall_n": 300_000,
        "discovery": [8, 32, 64],
        "timeout": 60.0,
    },
}

Ratio = tuple[str, str, tuple[str, str], tuple[str, str], str, float]


def _pubsub_ratios() -> list[Ratio]:
    """aoz against lossless baselines, per size; targets (issue 24) on 100 B."""
    out: list[Ratio] = []
    pairs = [
        ("iter_vs_zenoh", "aoz async-for (exact) / zenoh BLOCK", "aoz", "zenoh", ">=", 1.0),
        ("wild_vs_zenoh", "aoz async-for ('>') / zenoh BLOCK", "aoz-wild", "zenoh", ">=", 1.0),
        ("iter_vs_zmqasyncio", "aoz async-for (exact) / zmq.asyncio", "aoz", "zmq.asyncio",
         ">=", 0.9),
        ("wild_vs_zmqasyncio", "aoz async-for ('>') / zmq.asyncio", "aoz-wild", "zmq.asyncio",
         ">=", 0.9),
        ("batch_vs_zmqasyncio", "aoz batches() / zmq.asyncio", "aoz-batch", "zmq.asyncio",
         "", 0.0),
        ("pub_vs_zmqasyncio", "send side: aoz publisher -> raw sub / zmq.asyncio", "aoz-tx",
         "zmq.asyncio", ">=", 0.95),
        ("rx_iter_vs_zmqasyncio", "receive side: raw pub -> aoz async-for / zmq.asyncio",
         "aoz-rx", "zmq.asyncio", ">=", 1.0),
        ("rx_batch_vs_zmqasyncio", "receive side: raw pub -> aoz batches() / zmq.asyncio",
         "aoz-batch-rx", "zmq.asyncio", ">=", 1.0),
        ("iter_vs_nats", "aoz async-for / nats.py", "aoz", "nats", ">=", 1.5),
    ]
    for size in SIZES:
        for key, label, num, den, op, target in pairs:
            op_here = op if size == "100B" or key == "iter_vs_nats" else ""
            out.append(
                (
                    f"{key}_{size}",
                    f"{label}, {SIZE_LABELS[size]}",
                    (f"pubsub_{size}", num),
                    (f"pubsub_{size}", den),
                    op_here,
                    target if op_here else 0.0,
                )
            )
    out += [
        ("iter_vs_zmq_100B", "aoz async-for / raw sync pyzmq, 100 B",
         ("pubsub_100B", "aoz"), ("pubsub_100B", "zmq"), "", 0.0),
        ("iter_py_vs_zenoh_100B", "aoz async-for / zenoh BLOCK, 100 B, pure-Python hot path",
         ("pubsub_100B", "aoz-py"), ("pubsub_100B", "zenoh"), "", 0.0),
        ("batch_py_vs_zmqasyncio_100B",
         "aoz batches() / zmq.asyncio, 100 B, pure-Python hot path",
         ("pubsub_100B", "aoz-batch-py"), ("pubsub_100B", "zmq.asyncio"), "", 0.0),
        ("iter_compiled_vs_py_100B", "aoz async-for, compiled / pure-Python hot path, 100 B",
         ("pubsub_100B", "aoz"), ("pubsub_100B", "aoz-py"), "", 0.0),
    ]
    return out


# (key, label, numerator, denominator, target op, target value). Every pub/sub
# denominator is a lossless system: a dropping run is never a baseline.
RATIOS: list[Ratio] = [
    *_pubsub_ratios(),
    ("rr_p50_vs_zmqasyncio", "aoz req/rep p50 / zmq.asyncio p50",
     ("rr_p50_us", "aoz"), ("rr_p50_us", "zmq.asyncio"), "<=", 1.1),
    ("rr_p50_vs_nats", "aoz req/rep p50 / nats.py p50",
     ("rr_p50_us", "aoz"), ("rr_p50_us", "nats"), "<", 1.0),
    ("rr_p50_vs_zenoh", "aoz req/rep p50 / zenoh p50",
     ("rr_p50_us", "aoz"), ("rr_p50_us", "zenoh"), "<", 1.0),
    ("rr64_vs_zmqasyncio", "aoz 64-in-flight req/s / zmq.asyncio",
     ("rr_rps64", "aoz"), ("rr_rps64", "zmq.asyncio"), ">=", 0.8),
    ("rr64_py_vs_zmqasyncio", "aoz 64-in-flight req/s / zmq.asyncio, pure-Python hot path",
     ("rr_rps64", "aoz-py"), ("rr_rps64", "zmq.asyncio"), "", 0.0),
    ("rr64_vs_nats", "aoz 64-in-flight req/s / nats.py",
     ("rr_rps64", "aoz"), ("rr_rps64", "nats"), "", 0.0),
]


# ---------------------------------------------------------------------------- statistics
def summarize(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"median": None, "min": None, "max": None, "values": []}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "values": values,
    }


def _meets(op: str, value: float, target: float) -> bool | None:
    if not op:
        return None
    return {">=": value >= target, "<=": value <= target, "<": value < target}[op]


def _loss_figure(figure: str) -> str | None:
    """The loss figure that goes with a throughput figure (none for request/reply)."""
    return "loss_" + figure.removeprefix("pubsub_") if figure.startswith("pubsub_") else None


def _worst_loss(
    rounds: dict[str, dict[str, list[float | None]]], figure: str, system: str
) -> float:
    lf = _loss_figure(figure)
    if lf is None:
        return 0.0
    return max((x for x in rounds.get(lf, {}).get(system, []) if x is not None), default=0.0)


def compute_ratios(
    rounds: dict[str, dict[str, list[float | None]]], skipped: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Ratios taken per round (both systems measured in that round), then summarized.

    A ratio whose system was skipped on purpose (``skipped``: e.g. nats when there is no
    ``nats-server`` on this machine) is reported with ``"skipped": True`` and no value, so
    a reader (and the smoke test) can tell "not measured here" from "measurement failed".

    A ratio whose baseline or aoz side lost more than :data:`LOSS_LIMIT` of its messages
    in any round is not a comparison: it has no value, and ``"na"`` says who lost how
    much (``n/a (baseline lost 37.7%)``), the worst round's loss.
    """
    out: dict[str, Any] = {}
    for key, label, (fa, sa), (fb, sb), op, target in RATIOS:
        if fa not in rounds and fb not in rounds:
            continue  # a size this mode does not measure
        a = rounds.get(fa, {}).get(sa, [])
        b = rounds.get(fb, {}).get(sb, [])
        per = [x / y for x, y in zip(a, b, strict=False) if x and y]
        loss_a, loss_b = _worst_loss(rounds, fa, sa), _worst_loss(rounds, fb, sb)
        na = ""
        if loss_b > LOSS_LIMIT:
            na = f"n/a (baseline lost {loss_b * 100:.1f}%)"
        elif loss_a > LOSS_LIMIT:
            na = f"n/a (aoz side lost {loss_a * 100:.1f}%)"
        s = summarize([] if na else per)
        s.update(
            label=label,
            target=f"{op} {target}" if op else "",
            meets=_meets(op, s["median"], target) if s["median"] is not None else None,
            skipped=sa in skipped or sb in skipped,
            na=na,
            loss_numerator=loss_a,
            loss_baseline=loss_b,
        )
        out[key] = s
    return out


def versions(nats: NatsServer) -> dict[str, str]:
    v: dict[str, str] = {"python": platform.python_version()}
    for dist in ("aoz", "pyzmq", "msgspec", "anyio", "nats-py", "eclipse-zenoh"):
        try:
            v[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            v[dist] = "missing"
    try:
        import zmq

        v["libzmq"] = zmq.zmq_version()
    except ImportError:
        v["libzmq"] = "missing"
    # what the "aoz" systems run; the "-py" systems run with AOZ_PURE_PYTHON=1
    import aoz

    v["aoz hot path"] = aoz.hot_path()
    if nats.available and not nats.version:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([str(nats.binary), "--version"], capture_output=True, timeout=10)
            nats.version = out.stdout.decode().strip()
    v["nats-server"] = nats.version or "missing"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=ROOT,
            capture_output=True,
            timeout=10,
        )
        if out.returncode == 0:
            v["aoz-git"] = out.stdout.decode().strip()
    return v


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "loadavg_start": list(os.getloadavg()),
    }


# ---------------------------------------------------------------------------- the run
class Run:
    def __init__(self, mode: str, cfg: dict[str, Any], systems: set[str], log: Any) -> None:
        self.mode = mode
        self.cfg = cfg
        self.systems = systems
        self.log = log
        # figure -> system -> one value per round (None when that run failed)
        self.rounds: dict[str, dict[str, list[float | None]]] = {}
        self.details: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.errors: list[str] = []
        self.notes: list[str] = []
        self.aoz_failed = False
        # systems left out because their tool is missing here (not failures)
        self.skipped: set[str] = set()
        self.loadavg_start = list(os.getloadavg())

    def record(
        self, figure: str, system: str, value: float | None, detail: dict[str, Any] | None = None
    ) -> None:
        self.rounds.setdefault(figure, {}).setdefault(system, []).append(value)
        if detail is not None:
            self.details.setdefault(figure, {}).setdefault(system, []).append(detail)

    def attempt(self, what: str, system: str, fn: Any, *args: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            r = fn(*args, **kw)
        except (BenchError, KeyError, OSError) as exc:
            msg = f"{what} [{system}]: {exc}"
            self.errors.append(msg)
            self.log(f"  ! {msg}")
            if system.startswith("aoz"):
                self.aoz_failed = True
            return None
        self.log(f"  {what:<14} {system:<12} {time.perf_counter() - t:5.1f} s")
        return r

    def execute(self) -> None:
        cfg = self.cfg
        nats = NatsServer()
        self.nats = nats
        systems = self.systems
        if "nats" in systems and not nats.available:
            self.notes.append(
                "nats-server not found: nats skipped "
                "(install it with `apt-get install nats-server`)"
            )
            systems = systems - {"nats"}
            self.skipped.add("nats")
        try:
            if "nats" in systems:
                nats.start()
            timeout = cfg["timeout"]
            for rnd in range(cfg["rounds"]):
                self.log(f"round {rnd + 1}/{cfg['rounds']}")
                for label in cfg["sizes"]:
                    size = SIZES[label]
                    fig = f"pubsub_{label}"
                    for system in PUBSUB_SYSTEMS:
                        if system not in systems:
                            continue
                        r = self.attempt(
                            fig,
                            system,
                            run_pubsub,
                            system,
                            size,
                            cfg["n"][label],
                            timeout,
                            nats.url,
                        )
                        self.record(fig, system, r["msgs_per_s"] if r else None, r)
                        self.record(f"loss_{label}", system, r["loss"] if r else None)
                        self.record(f"pub_{label}", system, r["pub_msgs_per_s"] if r else None)
                for system in RR_SYSTEMS:
                    if system not in systems:
                        continue
                    r = self.attempt(
                        "reqrep",
                        system,
                        run_reqrep,
                        system,
                        100,
                        cfg["n_seq"],
                        cfg["n_pipe"],
                        timeout,
                        nats.url,
                    )
                    for k in ("p50_us", "p99_us", "rtps", "rps64"):
                        self.record(f"rr_{k}", system, r[k] if r else None)
            self.log("memory")
            for system in MEM_SYSTEMS:
                if system not in systems:
                    continue
                r = self.attempt("idle rss", system, run_idle, system, cfg["idle_count"], nats.url)
                if r:
                    for k, v in r.items():
                        self.record(k, system, v)
                r = self.attempt(
                    "stalled sub",
                    system,
                    run_pubsub,
                    system,
                    1024,
                    cfg["stall_n"],
                    timeout,
                    nats.url,
                    stall=True,
                )
                if r:
                    self.record("stall_rss_growth_mib", system, r["rss_growth_mib"], r)
                    self.record("stall_send_s", system, r["send_s"])
                    if system == "nats":
                        self.notes.append(
                            f"nats: the server, not the publisher, buffers for a stalled "
                            f"subscriber (nats-server RSS after the test: "
                            f"{nats.rss() / 2**20:.0f} MiB)"
                        )
            if "aoz" in systems:
                if discovery_available():
                    for n in cfg["discovery"]:
                        r = self.attempt(f"discovery {n}", "aoz", run_discovery, n, 30.0 + n)
                        if r:
                            self.record(f"discovery_{n}_s", "aoz", r["seconds"], r["raw"])
                else:
                    self.notes.append(
                        "discovery convergence skipped: benchmarks.discovery is not there"
                    )
        finally:
            nats.stop()


# ---------------------------------------------------------------------------- output
def build_report(run: Run, started: float, argv: list[str]) -> dict[str, Any]:
    figures = {
        fig: {sys_: summarize([v for v in vals if v is not None]) for sys_, vals in per.items()}
        for fig, per in run.rounds.items()
    }
    m = machine()
    m["loadavg_start"] = run.loadavg_start
    m["loadavg_end"] = list(os.getloadavg())
    return {
        "mode": run.mode,
        "command": "python -m benchmarks " + " ".join(argv),
        "started_utc": dt.datetime.fromtimestamp(started, dt.UTC).isoformat(timespec="seconds"),
        "duration_s": time.time() - started,
        "config": run.cfg,
        "versions": versions(run.nats),
        "machine": m,
        "figures": figures,
        "rounds": run.rounds,
        "details": run.details,
        "loss": loss_summary(run.details),
        "ratios": compute_ratios(run.rounds, frozenset(run.skipped)),
        "skipped_systems": sorted(run.skipped),
        "notes": run.notes,
        "errors": run.errors,
        "method": METHOD,
    }


def loss_summary(details: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per pub/sub figure and system, over all rounds: sent, received, lost, loss, and
    whether the system was configured lossless."""
    out: dict[str, Any] = {}
    for fig, per in details.items():
        if not fig.startswith("pubsub_"):
            continue
        for system, ds in per.items():
            sent = sum(int(d["sent"]) for d in ds)
            received = sum(int(d["received"]) for d in ds)
            out.setdefault(fig.removeprefix("pubsub_"), {})[system] = {
                "sent": sent,
                "received": received,
                "lost": sent - received,
                "loss": (sent - received) / sent if sent else 0.0,
                "lossless_config": system not in DROPPING_SYSTEMS,
            }
    return out


METHOD = [
    "Each role is its own OS process (python -m benchmarks.<role>), results as JSON on stdout.",
    "Rounds interleave the systems (A, B, C, A, B, C, ...); figures are median [min-max] "
    "over rounds; ratios are taken per round, then summarized.",
    "Pub/sub: the publisher waits for the subscription to reach it (aoz wait_for_interest, "
    "XPUB subscription message, zenoh matching status; nats: the subscriber flushes its "
    "SUB before the publisher starts), sends N messages as fast as it can; msg/s is "
    "measured at the subscriber from first to last message (0.5 s idle bound).",
    "Loss is (sent - received) / sent, printed beside every rate, per size. Lossless runs "
    "(the headline, and every ratio's baseline): aoz send_policy='block' on the publisher "
    "and overflow='block' on the subscriber; zenoh CongestionControl.BLOCK with the default "
    "FIFO channel (reliable links); raw pyzmq XPUB_NODROP with a blocking send; raw "
    "zmq.asyncio XPUB_NODROP, a NOBLOCK send retried when the fd fires (50 ms backstop, "
    "as aoz); nats.py with its own flow control (its loss is printed too). Raw sockets "
    "use aoz's high-water marks (send 10,000, receive 100,000).",
    "Dropping runs (aoz-drop: aoz's defaults, send_policy='drop' and drop_newest; "
    "zenoh-drop: CongestionControl.DROP and a callback) are shown beside their loss and "
    "never used as a ratio's baseline.",
    "A ratio is printed only when both sides lost at most 0.1% in every round; otherwise "
    "it reads 'n/a (baseline lost X%)' or 'n/a (aoz side lost X%)', X the worst round.",
    "Request/reply: 100 B payload, 200 warm-up round trips, then sequential (p50/p99, "
    "round trips/s) and 64 in flight (requests/s). raw zmq = DEALER/ROUTER; "
    "zmq.asyncio = PUB/SUB both ways with aoz's wire frames (the same topology as aoz).",
    "RSS: one process holding 1..K idle nodes (zmq: an XPUB+SUB pair; nats: a connection; "
    "zenoh: a peer session). Stalled subscriber: the subscriber process blocks (its event "
    "loop or callback thread sleeps) and the publisher sends N x 1 KiB; figure = growth "
    "of the publisher's RSS (peak - before).",
]


def fmt(v: float | None, kind: str) -> str:
    if v is None:
        return "-"
    if kind == "rate":
        return f"{v / 1000:,.0f}k" if v >= 10_000 else f"{v:,.0f}"
    if kind == "us":
        return f"{v:,.0f}"
    if kind == "pct":
        return f"{v * 100:.1f}%"
    if kind == "kib":
        return f"{v:,.0f}"
    if kind == "mib":
        return f"{v:,.1f}"
    if kind == "ratio":
        return f"{v:.2f}x"
    if kind == "s":
        return f"{v:.3f}"
    return f"{v:g}"


def cell(fig: dict[str, Any] | None, kind: str, spread: bool = True) -> str:
    if not fig or fig.get("median") is None:
        return "-"
    s = fmt(fig["median"], kind)
    if spread and len(fig["values"]) > 1:
        s += f" [{fmt(fig['min'], kind)}-{fmt(fig['max'], kind)}]"
    return s


def loss_cell(details: list[dict[str, Any]]) -> str:
    """Loss over every round of one system and size: ``0.00% (0 of 300,000)``."""
    if not details:
        return "-"
    sent = sum(int(d["sent"]) for d in details)
    lost = sent - sum(int(d["received"]) for d in details)
    pct = lost / sent * 100 if sent else 0.0
    return f"{pct:.2f}% ({lost:,} of {sent:,})"


def ratio_row(r: dict[str, Any]) -> list[str]:
    """One ratio as [label, value, target, verdict]; a lossy side prints its loss instead
    of a value."""
    if r.get("skipped"):
        return [r["label"], "-", r["target"], "skipped"]
    if r.get("na"):
        return [r["label"], r["na"], r["target"], ""]
    verdict = {True: "meets", False: "SHORT", None: ""}[r["meets"]]
    return [r["label"], cell(r, "ratio"), r["target"], verdict]


def _discovery_target(n: str, raw: list[dict[str, Any]]) -> str:
    """The issue's target: 32 nodes converge <= 1 s after the last one starts."""
    if n != "32":
        return ""
    vals = [float(x["converge_s"]) for x in raw if isinstance(x.get("converge_s"), int | float)]
    if not vals:
        return "<= 1 s"
    return "<= 1 s: " + ("meets" if statistics.median(vals) <= 1.0 else "SHORT")


def tables(report: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The report as plain tables (title, header, rows): rendered by rich and markdown."""
    f = report["figures"]
    out: list[tuple[str, list[str], list[list[str]]]] = []

    def g(fig: str, system: str) -> dict[str, Any] | None:
        v: dict[str, Any] | None = f.get(fig, {}).get(system)
        return v

    sizes = [lb for lb in report.get("config", {}).get("sizes", list(SIZES)) if lb in SIZES]
    header = ["system"]
    for lb in sizes:
        header += [f"{SIZE_LABELS[lb]} msg/s", f"{SIZE_LABELS[lb]} loss (lost of sent)"]
    for title, systems in (
        (
            "Pub/sub throughput, lossless (msg/s at the subscriber, median [min-max]; "
            "loss over all rounds; aoz-wild = subscriber on '>', aoz-rx = aoz subscriber "
            "fed by the raw zmq.asyncio publisher, aoz-tx = aoz publisher feeding the raw "
            "zmq.asyncio subscriber)",
            LOSSLESS_SYSTEMS,
        ),
        (
            "Pub/sub throughput, dropping policies (aoz and zenoh defaults; never a "
            "ratio's baseline; read the rate with its loss)",
            [s for s in PUBSUB_SYSTEMS if s in DROPPING_SYSTEMS],
        ),
    ):
        rows = []
        for s in systems:
            if not any(g(f"pubsub_{lb}", s) for lb in sizes):
                continue
            row = [s]
            for lb in sizes:
                row += [
                    cell(g(f"pubsub_{lb}", s), "rate"),
                    loss_cell(report["details"].get(f"pubsub_{lb}", {}).get(s, [])),
                ]
            rows.append(row)
        out.append((title, header, rows))
    rows = []
    for s in RR_SYSTEMS:
        if not g("rr_p50_us", s):
            continue
        rows.append(
            [
                s,
                cell(g("rr_p50_us", s), "us"),
                cell(g("rr_p99_us", s), "us"),
                cell(g("rr_rtps", s), "rate"),
                cell(g("rr_rps64", s), "rate"),
            ]
        )
    out.append(
        (
            "Request/reply (100 B)",
            ["system", "p50 us", "p99 us", "round trips/s", "req/s, 64 in flight"],
            rows,
        )
    )
    rows = []
    for s in MEM_SYSTEMS:
        if not (g("rss_one_mib", s) or g("stall_rss_growth_mib", s)):
            continue
        rows.append(
            [
                s,
                cell(g("rss_one_mib", s), "mib", False),
                cell(g("rss_per_extra_kib", s), "kib", False),
                cell(g("stall_rss_growth_mib", s), "mib", False),
                cell(g("stall_send_s", s), "s", False),
            ]
        )
    out.append(
        (
            "Memory (MiB)",
            [
                "system",
                "RSS, process with 1 idle node",
                "+ per extra idle node (KiB)",
                "publisher RSS growth, stalled subscriber",
                "publisher's time to send (s)",
            ],
            rows,
        )
    )
    rows = []
    for fig in sorted(
        (k for k in f if k.startswith("discovery_")), key=lambda k: int(k.split("_")[1])
    ):
        n = fig.split("_")[1]
        raw = report["details"].get(fig, {}).get("aoz", [])

        def med(key: str, raw: list[dict[str, Any]] = raw) -> str:
            vals = [float(x[key]) for x in raw if isinstance(x.get(key), int | float)]
            return f"{statistics.median(vals):.3g}" if vals else "-"

        rows.append(
            [
                n,
                med("converge_s"),
                med("from_first_start_s"),
                med("from_launch_s"),
                _discovery_target(n, raw),
            ]
        )
    if rows:
        out.append(
            (
                "Discovery convergence (aoz naming mode, one process per node; seconds)",
                [
                    "nodes",
                    "full mesh after the last node started",
                    "after the first started",
                    "after launch",
                    "target",
                ],
                rows,
            )
        )
    rows = []
    for r in report["ratios"].values():
        rows.append(ratio_row(r))
    out.append(
        (
            "aoz ratios against same-run lossless baselines (per-round ratio, median "
            "[min-max]; n/a where a side lost more than 0.1% in a round)",
            ["ratio", "value", "target", ""],
            rows,
        )
    )
    return out


def print_tables(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=180, force_terminal=False, soft_wrap=False)
    console.print(
        f"[bold]aoz benchmarks[/bold] mode={report['mode']} "
        f"({report['duration_s']:.0f} s, load {report['machine']['loadavg_start']})"
    )
    for title, header, rows in tables(report):
        t = Table(title=escape(title), title_justify="left", min_width=min(len(title) + 4, 170))
        for i, h in enumerate(header):
            t.add_column(escape(h), justify="left" if i == 0 else "right")
        for row in rows:
            t.add_row(*(escape(c) for c in row))
        console.print(t)
    for note in report["notes"]:
        console.print(f"note: {escape(note)}")
    for err in report["errors"]:
        console.print(f"[red]error:[/red] {escape(err)}")


def chart(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = [r for r in report["ratios"].values() if r["median"] is not None]
    fig, ax = plt.subplots(figsize=(10, 0.45 * max(len(items), 1) + 1.5))
    ys = list(range(len(items)))[::-1]
    meds = [r["median"] for r in items]
    lo = [r["median"] - r["min"] for r in items]
    hi = [r["max"] - r["median"] for r in items]
    colors = [
        "tab:green" if r["meets"] else "tab:red" if r["meets"] is False else "tab:gray"
        for r in items
    ]
    ax.barh(ys, meds, xerr=[lo, hi], color=colors, alpha=0.8, capsize=3)
    for y, r in zip(ys, items, strict=True):
        if r["target"]:
            t = float(r["target"].split()[1])
            ax.plot([t, t], [y - 0.4, y + 0.4], color="black", linewidth=2)
    ax.set_yticks(ys, [r["label"] for r in items], fontsize=8)
    ax.axvline(1.0, color="gray", linestyle=":", linewidth=1)
    ax.set_xlabel("ratio (per-round median, min-max whiskers; black tick = target)")
    ax.set_title(f"aoz vs baselines, {report['mode']} mode ({report['started_utc']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# Everything after this line in RESULTS.md is hand-written and kept when a run rewrites it.
KEEP_MARKER = "<!-- hand-written notes below: kept when `--full` rewrites this file -->"


def write_results_md(report: dict[str, Any], path: Path) -> None:
    lines = [
        "# aoz benchmark results",
        "",
        f"Latest {report['mode']} run: {report['started_utc']}, {report['duration_s']:.0f} s. "
        "Command:",
        "",
        "```",
        f"{'make bench-full' if report['mode'] == 'full' else 'make bench'}   "
        f"# = .venv/bin/{report['command']}",
        "```",
        "",
        f"Machine: {report['machine']['cpus']} CPUs ({report['machine']['cpu']}), "
        f"{report['machine']['platform']}; load average at start "
        f"{', '.join(f'{x:.2f}' for x in report['machine']['loadavg_start'])}, at end "
        f"{', '.join(f'{x:.2f}' for x in report['machine']['loadavg_end'])}. The machine is "
        "shared and noisy (other processes compete for the cores), which is why every "
        "system runs in interleaved rounds and ratios are taken within a round.",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()) + ".",
        "",
    ]
    for title, header, rows in tables(report):
        lines += [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines.append("")
    lines += [
        "![ratios](out/ratios-full.png) (the chart is written by the run; "
        "`benchmarks/out/` is not committed)",
        "",
        "## Method",
        "",
    ]
    lines += [f"- {m}" for m in report["method"]]
    if report["notes"] or report["errors"]:
        lines += ["", "## Notes", ""]
        lines += [f"- {n}" for n in report["notes"]]
        lines += [f"- error: {e}" for e in report["errors"]]
    kept = ""
    if path.exists():
        previous = path.read_text()
        if KEEP_MARKER in previous:
            kept = previous[previous.index(KEEP_MARKER) :]
    path.write_text("\n".join(lines) + "\n\n" + (kept or KEEP_MARKER + "\n"))


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument(
        "--smoke",
        dest="mode",
        action="store_const",
        const="smoke",
        help="tiny run for the test suite (< 60 s)",
    )
    g.add_argument(
        "--quick",
        dest="mode",
        action="store_const",
        const="quick",
        help="regression run, about 6 minutes on 2 loaded cores (default)",
    )
    g.add_argument(
        "--full",
        dest="mode",
        action="store_const",
        const="full",
        help="the full run (several minutes); rewrites benchmarks/RESULTS.md",
    )
    ap.add_argument("--rounds", type=int, help="override the number of rounds")
    ap.add_argument("--systems", help="comma-separated subset of: " + ",".join(PUBSUB_SYSTEMS))
    ap.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks" / "out",
        help="directory for results-<mode>.json and ratios-<mode>.png",
    )
    ap.add_argument(
        "--results-md",
        type=Path,
        default=None,
        help="write the markdown summary here (default for --full: benchmarks/RESULTS.md)",
    )
    ap.add_argument("--no-chart", action="store_true")
    ap.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="print the tables (and --results-md) of an earlier run's JSON; runs nothing",
    )
    args = ap.parse_args(args_in)
    mode = args.mode or "quick"
    cfg = dict(MODES[mode])
    if args.rounds:
        cfg["rounds"] = max(1, min(args.rounds, 50))
    systems = set(PUBSUB_SYSTEMS)
    if args.systems:
        systems = {s.strip() for s in args.systems.split(",") if s.strip()}
        unknown = systems - set(PUBSUB_SYSTEMS)
        if unknown:
            ap.error(f"unknown systems: {', '.join(sorted(unknown))}")

    if args.render is not None:
        report = json.loads(args.render.read_text())
        print_tables(report)
        if args.results_md is not None:
            write_results_md(report, args.results_md)
        return 0

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    started = time.time()
    run = Run(mode, cfg, systems, log)
    run.execute()
    report = build_report(run, started, args_in)
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"results-{mode}.json"
    json_path.write_text(json.dumps(report, indent=2))
    print_tables(report)
    if not args.no_chart:
        png = args.out / f"ratios-{mode}.png"
        chart(report, png)
        print(f"chart: {png}")
    print(f"json: {json_path}")
    md = args.results_md or (ROOT / "benchmarks" / "RESULTS.md" if mode == "full" else None)
    if md is not None:
        write_results_md(report, md)
        print(f"markdown: {md}")
    return 1 if run.aoz_failed else 0


if __name__ == "__main__":
    sys.exit(main())
