"""``benchmarks.links`` runs end to end and reports both figures of every run.

Speed is never asserted: the machine is shared and noisy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_links_benchmark_smoke() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.links", "--runs", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "link_down after" in proc.stdout and "expired after" in proc.stdout
    runs = json.loads((ROOT / "benchmarks" / "out" / "links.json").read_text())["runs"]
    assert len(runs) == 2
    assert all(r["link_down"] > 0 and r["expired"] >= r["link_down"] for r in runs)
