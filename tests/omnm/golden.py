"""The golden omnm messages OpenMAMA 6.3.1 + OpenMAMA-omnm produced (data/README.md)."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "fixtures.jsonl"


@cache
def fixtures() -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(line) for line in DATA.read_text().splitlines() if line.strip())


def by_name(name: str) -> dict[str, Any]:
    return next(f for f in fixtures() if f["name"] == name)


def with_bytes() -> list[dict[str, Any]]:
    """The fixtures that hold a message (``hex`` given), without the 1 MiB one."""
    return [f for f in fixtures() if f.get("hex")]


@cache
def opaque_1mib() -> bytes:
    f = by_name("opaque_1mib")
    tpl = f["hex_template"]
    n = tpl["generated"]["length"]
    data = (
        bytes.fromhex(tpl["prefix"])
        + bytes((i * 7 + 3) & 0xFF for i in range(n))
        + bytes.fromhex(tpl["suffix"])
    )
    assert hashlib.sha256(data).hexdigest() == f["sha256"]
    return data


def strip_type_ids(x: Any) -> Any:
    """A fixture FIELD tree without ``type_id`` (aoz's JSON names the type only)."""
    if isinstance(x, list):
        return [strip_type_ids(i) for i in x]
    if isinstance(x, dict):
        return {k: strip_type_ids(v) for k, v in x.items() if k != "type_id"}
    return x
