"""The recorder's bulk table building (one aoz feed: sequenced msgpack, no Python per
row) gives exactly the table of the row-by-row path, and leaves every other batch to
it (mixed codecs, headers, a bad body: found and counted there)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

pytest.importorskip("pyarrow")

from aoz._protocol.builder import FrameBuilder
from aoz._protocol.codecs import Codec
from aoz._protocol.headers import add_headers
from aoz.record import schema


class Tick(msgspec.Struct):
    symbol: str
    price: float


def payload_of(frame: bytes) -> bytes:
    return frame[frame.index(b"\0") + 3 :]


def rows_from(builders: list[FrameBuilder], n: int) -> list[tuple[str, float, bytes]]:
    out = []
    for i in range(n):
        b = builders[i % len(builders)]
        data = {"sender": "s", "seq": i, "ts": 1.7e9 + i, "symbol": f"S{i % 3}",
                "price": i / 4, "pad": "x" * (i % 5)}
        out.append((f"T.S{i % 3}", 1.7e9 + i / 1000, payload_of(b.publish(f"T.S{i % 3}", data))))
    return out


def tables(rows: list[tuple[str, float, bytes]], bulk: bool,
           monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], int]:
    cols = schema.columns_for([Tick])
    with monkeypatch.context() as m:
        if not bulk:
            m.setattr(schema, "_bulk_sequenced_msgpack", lambda *a: None)
        return schema.build_tables(rows, cols)


def test_bulk_and_row_by_row_tables_are_equal(monkeypatch: pytest.MonkeyPatch) -> None:
    builders = [FrameBuilder(Codec.MSGPACK, publisher=p) for p in (7, 2**64 - 1)]
    rows = rows_from(builders, 500)
    cols = schema.columns_for([Tick])
    assert schema._bulk_sequenced_msgpack([r[2] for r in rows], schema.decoder(cols))
    fast, slow = tables(rows, True, monkeypatch), tables(rows, False, monkeypatch)
    assert fast[1] == slow[1] == 0 and fast[0].keys() == slow[0].keys()
    for day in fast[0]:
        assert fast[0][day].equals(slow[0][day])
    t = next(iter(fast[0].values()))
    assert set(t.column("publisher").to_pylist()) == {"0000000000000007", "f" * 16}
    assert t.column("publisher_seq").to_pylist()[:7] == [1] * 6 + [2]  # per publisher, subject
    assert t.column("payload").to_pylist()[0][:1] == b"\x01"  # codec byte, no sequence header


def test_anything_else_takes_the_row_by_row_path(monkeypatch: pytest.MonkeyPatch) -> None:
    b = FrameBuilder(Codec.MSGPACK, publisher=9)
    rows = rows_from([b], 20)
    dec = schema.decoder(schema.columns_for([Tick]))
    bad_body = [*rows[:5], ("T.S0", 1.7e9, rows[5][2][:13] + b"\xc1"), *rows[6:]]
    unsequenced = [*rows[:5], ("T.S0", 1.7e9, b"\x01" + msgspec.msgpack.encode({"seq": 1}))]
    with_headers = [*rows[:5], ("T.S0", 1.7e9, add_headers(rows[5][2], {"k": "v"}, 12))]
    for batch in (bad_body, unsequenced, with_headers, [("T", 1.7e9, b"")]):
        assert schema._bulk_sequenced_msgpack([r[2] for r in batch], dec) is None
    fast, slow = tables(bad_body, True, monkeypatch), tables(bad_body, False, monkeypatch)
    assert fast[1] == slow[1] == 1  # the bad body counted, its row kept
    assert all(fast[0][d].equals(slow[0][d]) for d in fast[0])
