"""The README's quick start (examples/quickstart.py) runs as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(60)
def test_quickstart_example_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True, text=True, timeout=50, check=True,
    ).stdout
    assert "MD.NYSE.IBM Quote(symbol='IBM', bid=100.0, ask=100.1)" in out
    assert "snapshot: Quote(symbol='IBM', bid=99.5, ask=99.7)" in out
    assert "peers: ['app', 'feed']" in out


@pytest.mark.timeout(60)
def test_memory_example_runs() -> None:
    """docs/USAGE.md's "History and recovery" example (examples/memory.py)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "memory.py")],
        capture_output=True, text=True, timeout=50, check=True,
    ).stdout
    assert out.splitlines() == [
        "history: MD.NYSE.IBM {'bid': 99.7} replayed: True",
        "history: MD.LSE.VOD {'bid': 1.25} replayed: True",
        "live: MD.NYSE.IBM {'bid': 99.8} replayed: False",
        "received 3, replayed 2, recovered 0, lost 0",
    ]
