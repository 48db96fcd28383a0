"""The sink's vectorised row encoding decodes to exactly what the row-by-row msgspec path
gives, for every covered type (nulls, unicode, long strings, timestamps, unsigned), and
falls back for the types it does not cover."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec
import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from aoz._protocol.packed import is_packed, unpack_rows  # noqa: E402
from aoz.spark.sidecar import decode_chunk  # noqa: E402
from aoz.spark.sink import _Options, _RowEncoder  # noqa: E402


class _Field:
    def __init__(self, name: str) -> None:
        self.name = name


def encoders(batch: Any, **options: str) -> tuple[_RowEncoder, _RowEncoder]:
    schema = type("Schema", (), {"fields": [_Field(n) for n in batch.schema.names]})()
    opts = _Options({"subject_column": "symbol", "subject_prefix": "B.", **options}, schema)
    env = ("q" * 36, 3, 1, 2**62 + 5)
    return _RowEncoder(opts, env), _RowEncoder(opts, env)


def decoded(chunk: list[bytes]) -> list[tuple[bytes, Any]]:
    """(subject, row) of every row, packed frames unpacked, in row-index order (packing
    groups a chunk's rows by subject; each subject's rows keep their order)."""
    out = []
    for f in decode_chunk(chunk, {}):
        start = f.index(b"\0") + 3
        subject = f[: start - 3]
        if is_packed(f[start]):
            bodies = [f[a:b] for _, a, b in unpack_rows(f, start)]
        else:
            bodies = [f[start + 1 :]]
        out += [(subject, msgspec.msgpack.decode(b)) for b in bodies]
    for subject in {s for s, _ in out}:
        index = [row["_aoz"][4] for s, row in out if s == subject]
        assert index == sorted(index)  # a subject's rows in order
    return sorted(out, key=lambda x: x[1]["_aoz"][4])


def test_vectorised_rows_decode_like_msgspec_rows() -> None:
    n = 300
    t0 = dt.datetime(1969, 12, 31, 23, 59, 58, tzinfo=dt.UTC)  # negative seconds too
    batch = pa.record_batch({
        "symbol": [f"S{i % 7}" for i in range(n)],
        "n": [None if i % 11 == 0 else i - 150 for i in range(n)],
        "u8": pa.array([i % 256 for i in range(n)], pa.uint8()),
        "big": [2**62 - i for i in range(n)],
        "price": [None if i % 13 == 0 else i / 7 for i in range(n)],
        "f32": pa.array([i / 4 for i in range(n)], pa.float32()),
        "ok": [None if i % 5 == 0 else i % 2 == 0 for i in range(n)],
        "ts": pa.array([t0 + dt.timedelta(microseconds=i * 1_234_567) for i in range(n)],
                       pa.timestamp("us", tz="UTC")),
        "name": ["é" * (i % 40) if i % 3 else None for i in range(n)],
        "long": ["x" * (300 + i) for i in range(n)],
    })  # fmt: skip
    fast, slow = encoders(batch)
    assert encoders(batch)[0]._vectorised(batch) is not None  # the Arrow path is taken
    vec, rows = fast.chunk(batch)
    assert rows == n
    assert decoded(vec) == decoded(slow._rowwise(batch)[0])
    # a second chunk continues the row index
    more = decoded(fast.chunk(batch.slice(0, 2))[0])
    assert [m[1]["_aoz"][4] for m in more] == [n, n + 1]


def test_types_it_does_not_cover_fall_back_to_msgspec() -> None:
    batch = pa.record_batch({
        "symbol": ["A", "B"],
        "nested": pa.array([{"x": 1}, {"x": 2}]),
    })  # fmt: skip
    fast, slow = encoders(batch)
    assert fast._vectorised(batch) is None
    assert decoded(fast.chunk(batch)[0]) == decoded(slow._rowwise(batch)[0])
