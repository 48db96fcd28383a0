"""The recorder benchmark runs end to end on a small count and reports its figures.

Speed is never asserted: the machine is shared and noisy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(110)
def test_recorder_benchmark_smoke() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.pipeline_recorder", "--n", "3000", "--rounds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for writer in ("thread", "process"):
        assert f"recorder ({writer} writer) ratio : publisher =" in proc.stdout, proc.stdout
    assert "recorder-process CPU per million rows written" in proc.stdout
    results = json.loads((ROOT / "benchmarks" / "out" / "pipeline-recorder.json").read_text())
    assert sorted(r["writer"] for r in results) == ["process", "thread"]
    for result in results:
        assert result["lost"] == 0 and result["recorder"] > 0 and result["publisher"] > 0
