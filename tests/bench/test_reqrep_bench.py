"""The request/reply benchmark (issue #24) runs end to end on small counts and reports
every figure. Speed is never asserted: the machine is shared and noisy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_reqrep_benchmark_smoke() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.reqrep", "--rounds", "1", "--n-seq", "20",
         "--n-pipe", "300", "--systems", "zmq.asyncio,aoz"],
        cwd=ROOT, capture_output=True, text=True, timeout=100,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "/ zmq.asyncio" in proc.stdout and "CPU us/req" in proc.stdout
    res = json.loads((ROOT / "benchmarks" / "out" / "reqrep.json").read_text())["results"]
    for system in ("zmq.asyncio", "aoz"):
        (r,) = res[system]
        assert r["rps64"] > 0 and r["p50_us"] > 0 and r["req_cpu_us"] > 0
