"""The benchmark harness runs end to end (``--smoke``) and reports every figure.

Speed is never asserted: the machine is shared and noisy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness import DROPPING_SYSTEMS

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

# A bound for a hang, not a speed: about 65 s alone on the loaded 2-core machine (14 pub/sub
# systems, 100 B and 16 KiB), more beside the rest of the suite (make test) and other jobs.
SMOKE_BOUND = 300

# figure -> systems that must report a value > 0 (a dropping one: or its loss says why not)
PUBSUB = ["zmq", "zmq.asyncio", "aoz", "aoz-wild", "aoz-batch", "aoz-py", "aoz-batch-py",
          "aoz-rx", "aoz-batch-rx", "aoz-tx", "zenoh", "aoz-drop", "zenoh-drop"]
RR = ["zmq", "zmq.asyncio", "aoz", "aoz-py", "zenoh"]
MEM = ["zmq", "aoz", "zenoh"]


def _with_nats(systems: list[str], report: dict) -> list[str]:
    skipped = "nats" in report["skipped_systems"]
    return systems if skipped else [*systems, "nats"]


def _path_without_nats_server() -> str:
    """PATH with every directory that holds a ``nats-server`` removed: a fresh machine."""
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(
        d for d in dirs if d and not os.path.exists(os.path.join(d, "nats-server"))
    )


def _run_smoke(tmp_path: Path, env: dict[str, str], *extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--out", str(tmp_path), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SMOKE_BOUND,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for title in ("Pub/sub throughput, lossless", "Pub/sub throughput, dropping",
                  "loss (lost of sent)", "Request/reply", "Memory", "aoz ratios"):
        assert title in out, out[-3000:]
    assert (tmp_path / "ratios-smoke.png").stat().st_size > 0

    report = json.loads((tmp_path / "results-smoke.json").read_text())
    assert report["mode"] == "smoke"
    assert report["errors"] == [], report["errors"]
    return report


@pytest.mark.timeout(SMOKE_BOUND + 20)
def test_smoke_run_reports_every_figure_without_nats_server(tmp_path: Path) -> None:
    """The README's ``make test`` on a fresh machine: no nats-server on PATH."""
    env = dict(os.environ, PATH=_path_without_nats_server())
    report = _run_smoke(tmp_path, env)
    assert report["skipped_systems"] == ["nats"]
    assert any("nats-server not found" in n for n in report["notes"])
    nats_ratios = [k for k in report["ratios"] if "nats" in k]
    assert nats_ratios and all(report["ratios"][k]["skipped"] for k in nats_ratios)
    _check_report(report)


@pytest.mark.timeout(SMOKE_BOUND + 20)
@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server not installed")
def test_smoke_run_with_nats_server(tmp_path: Path) -> None:
    report = _run_smoke(tmp_path, dict(os.environ), "--systems", "aoz,nats,zmq.asyncio")
    assert report["skipped_systems"] == []
    assert report["ratios"]["iter_vs_nats_100B"]["median"] > 0


def _check_report(report: dict) -> None:
    figures = report["figures"]

    def value(fig: str, system: str) -> float:
        v = figures[fig][system]["median"]
        assert v is not None, (fig, system)
        return float(v)

    for system in _with_nats(PUBSUB, report):
        for size in report["config"]["sizes"]:
            rounds = report["details"][f"pubsub_{size}"][system]
            if system in DROPPING_SYSTEMS:
                # A dropping system may keep too few messages to time (fewer than two
                # marks, about 1/64 of what was sent): its rate is 0, and its loss says why.
                assert value(f"pubsub_{size}", system) >= 0
                for d in rounds:
                    assert d["msgs_per_s"] > 0 or d["received"] <= d["sent"] // 32, d
            else:
                assert value(f"pubsub_{size}", system) > 0
            assert value(f"pub_{size}", system) > 0
            assert 0.0 <= value(f"loss_{size}", system) <= 1.0
            for d in rounds:
                assert d["sent"] > 0 and 0 <= d["received"] <= d["sent"]
                assert d["lost"] == d["sent"] - d["received"]
            loss = report["loss"][size][system]
            assert loss["sent"] == loss["received"] + loss["lost"]
    for system in _with_nats(RR, report):
        for fig in ("rr_p50_us", "rr_p99_us", "rr_rtps", "rr_rps64"):
            assert value(fig, system) > 0
        assert value("rr_p99_us", system) >= value("rr_p50_us", system)
    for system in _with_nats(MEM, report):
        assert value("rss_one_mib", system) > 0
        assert value("rss_per_extra_kib", system) >= -50_000  # RSS may shrink a little
        assert "stall_rss_growth_mib" in figures and system in figures["stall_rss_growth_mib"]
    if not any("discovery convergence skipped" in n for n in report["notes"]):
        assert value("discovery_8_s", "aoz") > 0
    for key, ratio in report["ratios"].items():
        if not ratio["skipped"]:
            # a value, or "n/a (... lost X%)" when a side lost more than 0.1%
            assert (ratio["median"] or 0) > 0 or ratio["na"].startswith("n/a"), key
    for k in ("python", "pyzmq", "libzmq", "eclipse-zenoh", "nats-py"):
        assert report["versions"][k]
