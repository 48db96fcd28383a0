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
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True,
    )
    result = json.loads(proc.stdout)
    runs = [result] + ([result["pure"]] if result["pure"] is not None else [])
    assert [r["implementation"] for r in runs] in (["compiled", "python"], ["python"])
    for r in runs:
        figures = r["us_per_message"]
        assert {"omnm encode (Message, typed fields)", "omnm encode (new Message per call)",
                "omnm encode (dict, types inferred)", "omnm decode (-> Message)",
                "msgpack encode (dict)", "msgpack decode (-> dict)"} <= set(figures)
        assert all(f["us_median"] > 0 for f in figures.values())
        assert set(r["ratios"]) == {
            "omnm/msgpack decode", "omnm/msgpack encode", "omnm/msgpack encode, new Message",
            "omnm/msgpack encode, new Fields+Message", "omnm/msgpack encode, dict",
        }
        assert set(r["us_per_lookup_by_name"]) == {"10", "200", "2000"}
        assert r["bytes"]["omnm"] == 229  # the same quote every run
