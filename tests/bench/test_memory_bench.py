"""The memory benchmarks (issue #21) run end to end on small counts and report every
figure. Speed is never asserted: the machine is shared and noisy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "out"


def _run(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=100)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.timeout(120)
def test_memory_cache_benchmark_smoke() -> None:
    out = _run("benchmarks.memory_cache", "--rounds", "1", "--n", "5000")
    assert "await publish, cache=1 / off" in out
    assert "history, subscribe -> last of 1,000" in out
    summary = json.loads((OUT / "memory_cache.json").read_text())
    (history,) = summary["history"]
    assert history["messages"] == 1000  # every subject's last value came back
    (pair,) = summary["async_for"]
    assert set(pair) == {"off", "on"}
    # each side ran twice (interleaved), with its rate and each process's CPU time
    for runs in pair.values():
        assert len(runs) == 2
        assert all(run["rate"] > 0 and run["pub_cpu_s"] > 0 and run["sub_cpu_s"] > 0
                   for run in runs)
    assert "CPU per message on / off" in out
    # side by side: both pairs at once, each side's rate over the window both received in
    (both,) = summary["side_by_side"]
    assert both["off"]["messages_in"] == both["on"]["messages_in"] == 5000  # not crossed
    assert "async for side by side" in out


@pytest.mark.timeout(120)
def test_heartbeat_benchmark_smoke() -> None:
    out = _run("benchmarks.memory", "--messages", "5000", "--rounds", "1",
               "--subjects", "500", "--seconds", "0.5")
    assert "heartbeats off" in out and "idle, 500 quiet subjects" in out
    summary = json.loads((OUT / "memory.json").read_text())
    assert summary["heartbeat_throughput"]["median_off"] > 0
    assert len(summary["heartbeat_idle_cpu"]) >= 2
