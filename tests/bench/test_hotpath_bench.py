"""`python -m benchmarks.hotpath` runs and reports both hot paths side by side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_hotpath_benchmark_compares_both_paths() -> None:
    pytest.importorskip("aoz._mesh._speedups", reason="the compiled hot path is not built")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.hotpath", "--rounds", "1", "--n", "2000"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for row in ("drain compiled", "drain python", "Sender.publish compiled",
                "Sender.publish python", "await node.publish", "raw sock.send"):
        assert row in proc.stdout, proc.stdout
    ratio = float(proc.stdout.split("receive drain, compiled / python CPU:")[1].split()[0])
    assert ratio > 0
