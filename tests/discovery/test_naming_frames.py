"""Naming frames (SPEC §3) and UDP beacons: layout, round trips, hostile bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aoz._protocol.naming import (
    BEACON_SIZE,
    FRAME_SIZE,
    NamingFrame,
    NamingType,
    decode_beacon,
    decode_naming,
    encode_beacon,
    encode_naming,
    is_tcp_endpoint,
    is_uuid,
)
from aoz.errors import DecodeError, EncodeError

UUID = "3669840e-d043-11ea-adc2-fcaa146e6b01"
EP = "tcp://127.0.0.1:44928"


def frame(**kw: object) -> NamingFrame:
    base: dict[str, object] = {
        "type": NamingType.CONNECT,
        "program": "prog",
        "host": "host1",
        "pid": 4242,
        "uuid": UUID,
        "endpoint": EP,
    }
    base.update(kw)
    return NamingFrame(**base)  # type: ignore[arg-type]


def test_layout_is_byte_exact() -> None:
    data = encode_naming(frame(pid=-2))
    assert len(data) == FRAME_SIZE == 882
    assert data[0:257] == b"_NAMING".ljust(257, b"\0")
    assert data[257:258] == b"C"
    assert data[258:515] == b"prog".ljust(257, b"\0")
    assert data[515:580] == b"host1".ljust(65, b"\0")
    assert struct.unpack("<q", data[580:588]) == (-2,)
    assert data[588:625] == UUID.encode() + b"\0"
    assert data[625:882] == EP.encode().ljust(257, b"\0")


@pytest.mark.parametrize("ftype", list(NamingType))
def test_every_type_round_trips(ftype: NamingType) -> None:
    f = frame(type=ftype, uuid="" if ftype is NamingType.WELCOME else UUID)
    assert decode_naming(encode_naming(f)) == f


def test_long_program_and_host_are_truncated_at_a_character_boundary() -> None:
    data = encode_naming(frame(program="é" * 300, host="h" * 100))
    back = decode_naming(data)
    assert back.program == "é" * 128  # 256 bytes of 2-byte characters
    assert back.host == "h" * 64
    assert data[514] == 0 and data[579] == 0


@pytest.mark.parametrize(
    "kw",
    [
        {"endpoint": "tcp://" + "a" * 300 + ":1"},
        {"uuid": UUID + "0"},
        {"program": "a\0b"},
        {"pid": 2**63},
    ],
)
def test_unencodable_fields_raise_encode_error(kw: dict[str, object]) -> None:
    with pytest.raises(EncodeError):
        encode_naming(frame(**kw))


def _corrupt(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (encode_naming(frame())[:-1], "882 bytes"),
        (encode_naming(frame()) + b"\0", "882 bytes"),
        (_corrupt(encode_naming(frame()), 0, b"_NAMINX"), "subject"),
        (_corrupt(encode_naming(frame()), 257, b"X"), "type byte"),
        (_corrupt(encode_naming(frame()), 625, b"x" * 257), "endpoint"),
        (_corrupt(encode_naming(frame()), 588, b"\xff\xfe"), "uuid"),
        (_corrupt(encode_naming(frame()), 258, b"p" * 257), "program"),
        (_corrupt(encode_naming(frame()), 515, b"h" * 65), "host"),
    ],
)
def test_decode_errors_say_what_is_wrong(data: bytes, needle: str) -> None:
    with pytest.raises(DecodeError, match=needle) as info:
        decode_naming(data)
    assert info.value.what == "naming frame"


def texts(max_size: int) -> st.SearchStrategy[str]:
    """Text that fits its field even at 4 UTF-8 bytes per character (no truncation)."""
    return st.text(st.characters(blacklist_characters="\0", codec="utf-8"), max_size=max_size)


frames = st.builds(
    NamingFrame,
    type=st.sampled_from(list(NamingType)),
    program=texts(64),
    host=texts(16 - 1),
    pid=st.integers(-(2**63), 2**63 - 1),
    uuid=st.uuids().map(str),
    endpoint=st.builds(lambda p: f"tcp://127.0.0.1:{p}", st.integers(1, 65535)),
)


@given(frames)
def test_round_trip(f: NamingFrame) -> None:
    assert decode_naming(encode_naming(f)) == f


@given(frames, st.integers(0, FRAME_SIZE - 1), st.binary(min_size=1, max_size=64))
def test_mutations_give_a_frame_or_decode_error(f: NamingFrame, at: int, junk: bytes) -> None:
    data = _corrupt(encode_naming(f), at, junk)[:FRAME_SIZE]
    try:
        back = decode_naming(data)
    except DecodeError:
        return
    assert isinstance(back, NamingFrame) and isinstance(back.type, NamingType)


@given(frames, st.integers(0, FRAME_SIZE + 10))
def test_truncations_give_decode_error(f: NamingFrame, size: int) -> None:
    data = (encode_naming(f) + b"\0" * 10)[:size]
    if size == FRAME_SIZE:
        assert decode_naming(data) == f
    else:
        with pytest.raises(DecodeError):
            decode_naming(data)


@given(frames)
def test_beacon_round_trip(f: NamingFrame) -> None:
    data = encode_beacon(f, b"\x01" * 16)
    assert len(data) == BEACON_SIZE
    assert data[:2] == b"\x01\x00" and data[2:18] == b"\x01" * 16 and data[18:19] == f.type.value
    assert decode_beacon(data) == (f, b"\x01" * 16)


@given(st.binary(max_size=BEACON_SIZE + 2))
def test_random_beacons_give_decode_error(data: bytes) -> None:
    try:
        decode_beacon(data)
    except DecodeError:
        pass
    else:  # only possible for a well-formed datagram
        assert len(data) == BEACON_SIZE


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("tcp://127.0.0.1:5756", True),
        ("tcp://host-1.example.com:1", True),
        ("tcp://[::1]:65535", True),
        ("tcp://127.0.0.1:0", False),
        ("tcp://127.0.0.1:65536", False),
        ("tcp://*:5756", False),
        ("tcp://127.0.0.1", False),
        ("tcp://127.0.0.1:57x6", False),
        ("ipc:///tmp/sock", False),
        ("inproc://x", False),
        ("tcp://127.0.0.1:5756\n", False),
        ("tcp://a b:1", False),
        ("", False),
    ],
)
def test_is_tcp_endpoint(text: str, ok: bool) -> None:
    assert is_tcp_endpoint(text) is ok


def test_is_uuid() -> None:
    assert is_uuid(UUID)
    assert not is_uuid(UUID[:-1])
    assert not is_uuid(UUID.replace("-", "_"))
