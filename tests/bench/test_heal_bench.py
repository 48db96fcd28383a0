"""``benchmarks.heal`` runs end to end (one short cut) and reports its figures.

Speed is never asserted: the machine is shared and noisy. Needs root, ``ip`` and
``nft`` (the benchmark's network namespaces); skipped otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def test_heal_benchmark_smoke() -> None:
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nft"):
        pytest.skip("needs root, iproute2 (ip) and nftables (nft)")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.heal", "--rounds", "1", "--seconds", "6",
         "--settle", "0.5", "--cut", "host"],
        cwd=ROOT, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "round 1: fresh data" in proc.stdout
    assert "heal after 6 s cuts (host), 1 rounds" in proc.stdout
