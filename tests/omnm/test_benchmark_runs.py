"""``python -m benchmarks.omnm_codec`` runs and reports every figure (speed is not asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_omnm_codec_benchmark_reports_every_case() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.omnm_codec", "--quick", "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True,
    )
    result = json.loads(proc.stdout)
    figures = result["us_per_message"]
    assert {"omnm encode (Message, typed fields)", "omnm decode (-> Message)",
            "msgpack encode (dict)", "msgpack decode (-> dict)"} <= set(figures)
    assert all(f["us_median"] > 0 for f in figures.values())
    assert set(result["ratios"]) == {"omnm/msgpack encode", "omnm/msgpack decode"}
    assert result["bytes"]["omnm"] == 229  # the same quote every run
