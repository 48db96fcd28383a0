"""The README's OZ interop example (examples/oz_interop.py) runs as written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(60)
def test_oz_interop_example_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "oz_interop.py")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=50, check=True,
    ).stdout
    assert out.splitlines() == [
        "from OZ on MD.NYSE.IBM (OMNM):",
        "MdMsgType            |     1 | I32           | 1",
        "MdMsgStatus          |     2 | I32           | 0",
        "MdSeqNum             |    10 | I32           | 1",
        "MdFeedHost           |    12 | STRING        | MD.NYSE.IBM",
        "MdSeqNum = 1 | fid 12 = MD.NYSE.IBM",
        "to OZ: b'O\\x01\\x00' 72 bytes, exactly omnm.encode(quote): True",
    ]
