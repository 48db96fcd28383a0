"""Packed payloads (aoz._protocol.packed): the layout round-trips, and anything that does
not follow it is refused whole (the node then delivers the frame as it came)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aoz._protocol.packed import MAX_ROWS, is_packed, pack_rows, pack_span, unpack_rows
from aoz.errors import DecodeError, EncodeError


@settings(max_examples=200, deadline=None)
@given(bodies=st.lists(st.binary(max_size=20), min_size=1, max_size=30),
       codec=st.integers(0, 3), head=st.binary(max_size=8))
def test_rows_round_trip(bodies: list[bytes], codec: int, head: bytes) -> None:
    frame = head + pack_rows(codec, bodies)
    spans = unpack_rows(frame, len(head))
    assert [frame[a:b] for _, a, b in spans] == bodies
    assert {c for c, _, _ in spans} == {codec}


@settings(max_examples=100, deadline=None)
@given(bodies=st.lists(st.binary(max_size=20), min_size=2, max_size=30), data=st.data())
def test_a_span_of_a_row_table_is_the_packed_payload_of_those_rows(
    bodies: list[bytes], data: st.DataObject
) -> None:
    first = data.draw(st.integers(0, len(bodies) - 1))
    last = data.draw(st.integers(first + 1, len(bodies)))
    whole = pack_rows(1, bodies)
    n = len(bodies)
    offsets, blob = whole[5 : 5 + 4 * (n + 1)], whole[5 + 4 * (n + 1) :]
    span = pack_span(1, offsets, blob, first, last)
    assert [span[a:b] for _, a, b in unpack_rows(span, 0)] == bodies[first:last]


@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=60))
def test_arbitrary_bytes_unpack_or_raise_decode_error(payload: bytes) -> None:
    try:
        spans = unpack_rows(payload, 0)
    except DecodeError:
        return
    assert all(5 <= a <= b <= len(payload) for _, a, b in spans)


def test_malformed_packed_payloads_are_refused() -> None:
    good = pack_rows(1, [b"x", b"yz"])
    for bad in (good[:-1], good + b"!", good[:5], b"\x01" + good[1:],
                good[:1] + (0).to_bytes(4, "little") + good[5:],
                good[:1] + (MAX_ROWS + 1).to_bytes(4, "little") + good[5:],
                good[:9] + (9).to_bytes(4, "little") + good[13:]):  # offsets backwards
        with pytest.raises(DecodeError):
            unpack_rows(bad, 0)
    with pytest.raises(EncodeError):
        pack_rows(4, [b"x"])  # not an aoz codec: the first byte would leave 0x10..0x13
    with pytest.raises(EncodeError):
        pack_rows(1, [])
    assert [b for b in range(256) if is_packed(b)] == [0x10, 0x11, 0x12, 0x13]
