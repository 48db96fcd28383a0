"""Every decoder, fed anything, raises only aoz errors (issue #11's fuzzing in CI).

A few seconds per property: random bytes, mutations of valid encodings, and deep
nesting built on purpose (random data almost never nests 1,000 levels deep).
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aoz._discovery.udp import decode_datagram
from aoz._protocol.codecs import MAX_DEPTH, Codec, decode_payload, split_payload
from aoz._protocol.frames import decode_frame, encode_request, make_handle, parse_handle
from aoz._protocol.inbox import InboxTable
from aoz._protocol.naming import (
    BEACON_SIZE,
    FRAME_SIZE,
    NamingFrame,
    NamingType,
    decode_beacon,
    decode_naming,
    encode_beacon,
    encode_naming,
)
from aoz.errors import AozError

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
UUID = "3669840e-d043-11ea-adc2-fcaa146e6b01"


def only_aoz_errors(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except AozError:
        pass


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    """``seed`` with a few bytes flipped, cut or extended."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(0, 8))):
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        data[i] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(data)))
    tail = draw(st.binary(max_size=64))
    return bytes(data[:cut]) + tail if draw(st.booleans()) else bytes(data)


NAMING = encode_naming(
    NamingFrame(NamingType.CONNECT, "p", "h", 1, UUID, "tcp://127.0.0.1:4000")
)
BEACON = encode_beacon(
    NamingFrame(NamingType.BEACON, "p", "h", 1, UUID, "tcp://127.0.0.1:4000"),
    uuidlib.UUID(UUID).bytes,
)
REQUEST = encode_request(b"A.B", make_handle(UUID, 10), b"\x01\x81\xa1a\x01")


@FUZZ
@given(st.one_of(st.binary(max_size=600), mutated(REQUEST)))
def test_decode_frame(data: bytes) -> None:
    only_aoz_errors(lambda: decode_frame(data))


@FUZZ
@given(st.one_of(st.binary(max_size=80), mutated(make_handle(UUID, 7))))
def test_reply_handles(data: bytes) -> None:
    only_aoz_errors(lambda: parse_handle(data))
    table: InboxTable[object] = InboxTable(UUID)
    only_aoz_errors(lambda: table.serial_of(data))


@FUZZ
@given(st.one_of(st.binary(min_size=FRAME_SIZE, max_size=FRAME_SIZE), mutated(NAMING)))
def test_naming_frames(data: bytes) -> None:
    only_aoz_errors(lambda: decode_naming(data))


@FUZZ
@given(st.one_of(st.binary(min_size=BEACON_SIZE, max_size=BEACON_SIZE), mutated(BEACON)))
def test_udp_beacons(data: bytes) -> None:
    only_aoz_errors(lambda: decode_beacon(data))
    only_aoz_errors(lambda: decode_datagram(data))


class Point(msgspec.Struct):
    x: int
    tags: list[Any] = []


TYPES = [None, Point, dict[str, int], list[Any], int, str, bytes]


@st.composite
def nested(draw: st.DrawFn) -> bytes:
    """A payload nested ``depth`` levels deep, in msgpack or JSON, lists or maps."""
    depth = draw(st.sampled_from([MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 500, 1000, 20_000]))
    codec = draw(st.sampled_from([b"\x01", b"\x02"]))
    if codec == b"\x01":
        opener = draw(st.sampled_from([b"\x91", b"\x81\xa1k", b"\xdc\x00\x01"]))
        body = opener * depth + b"\xc0"
    else:
        opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"k":', b"}")]))
        body = opener * depth + b"null" + closer * depth
    if draw(st.booleans()):  # inside a field of a Struct
        body = (b"\x82\xa1x\x01\xa4tags" if codec == b"\x01" else b'{"x":1,"tags":') + body
        body += b"" if codec == b"\x01" else b"}"
    return codec + body


@FUZZ
@given(
    st.one_of(st.binary(max_size=300), nested(), mutated(b"\x01\x82\xa1x\x01\xa4tags\x90")),
    st.sampled_from(TYPES),
)
def test_payload_codecs(payload: bytes, type_: Any) -> None:
    codec, body = split_payload(payload)
    only_aoz_errors(lambda: decode_payload(codec, body, type_))


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 100_000])
@pytest.mark.parametrize("codec", [Codec.MSGPACK, Codec.JSON])
def test_deep_nesting_is_a_decode_error_at_any_depth(codec: Codec, depth: int) -> None:
    body = b"\x91" * depth + b"\xc0" if codec is Codec.MSGPACK else b"[" * depth + b"]" * depth
    with pytest.raises(AozError, match="nested"):
        decode_payload(codec, body)


@pytest.mark.parametrize("codec", [Codec.MSGPACK, Codec.JSON])
def test_nesting_up_to_the_limit_decodes(codec: Codec) -> None:
    d = MAX_DEPTH
    body = b"\x91" * d + b"\xc0" if codec is Codec.MSGPACK else b"[" * d + b"1" + b"]" * d
    value = decode_payload(codec, body)
    for _ in range(d):
        (value,) = value
    assert value in (None, 1)
