"""The demo (examples/marketdata, `make demo`) end to end, shortened: exit 0, bars came back
over the mesh, the chart exists, no JVM start-up noise, status lines not wrapped."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.timeout(400)
def test_short_demo_runs_end_to_end(tmp_path):
    pytest.importorskip("pyspark")
    pytest.importorskip("matplotlib")
    out = tmp_path / "demo-output"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "COLUMNS": "60"}  # narrow: plain lines must still not wrap
    proc = subprocess.run(
        # --last-bar-wait: a bound, not a speed; the demo stops waiting when the bars came
        # (the first micro-batch took over 35 s beside the rest of the suite at load 10)
        [sys.executable, "-m", "examples.marketdata", "--duration", "15", "--symbols", "6",
         "--rate", "500", "--last-bar-wait", "120", "--out", str(out)],
        capture_output=True, text=True, timeout=360, env=env, cwd=root,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for noise in ("log4j", "Setting default log level", "NativeCodeLoader", "incubator"):
        assert noise not in proc.stdout + proc.stderr
    assert any(len(line) > 60 and "bars" in line for line in proc.stdout.splitlines())
    assert "end-to-end latency" in proc.stdout
    png = out / "bars_AAPL.png"
    assert png.is_file() and png.read_bytes().startswith(b"\x89PNG")
    with open(out / "bars.csv") as f:
        bars = list(csv.DictReader(f))
    assert len(bars) >= 6  # at least one bar per symbol
    assert {b["symbol"] for b in bars} <= {"AAPL", "MSFT", "GOOG", "AMZN", "META", "NVDA"}
    assert all(float(b["low"]) <= float(b["vwap"]) <= float(b["high"]) for b in bars)
    # The recording the Spark job read is a plain Parquet dataset with everything published.
    assert any((out / "recording").glob("date=*/part-*.parquet"))
