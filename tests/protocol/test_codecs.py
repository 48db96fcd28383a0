"""Payload codecs: the first payload byte names the codec; unknown ids arrive whole."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aoz._protocol import codecs
from aoz._protocol.codecs import Codec, decode_payload, encode_payload, split_payload
from aoz.errors import DecodeError, EncodeError


class Quote(msgspec.Struct):
    symbol: str
    price: float
    size: int = 0


@dataclasses.dataclass
class Trade:
    symbol: str
    qty: int


def round_trip(data: object, codec: Codec | None = None, type_: Any = None) -> Any:
    chosen, body = split_payload(encode_payload(data, codec))
    return decode_payload(chosen, body, type_)


# ---------------------------------------------------------------- ids and inference


def test_codec_ids_are_the_documented_bytes() -> None:
    assert [int(c) for c in (Codec.RAW, Codec.MSGPACK, Codec.JSON, Codec.TEXT)] == [0, 1, 2, 3]
    assert encode_payload(b"ab") == b"\x00ab"
    assert encode_payload({"a": 1}) == b"\x01" + msgspec.msgpack.encode({"a": 1})
    assert encode_payload({"a": 1}, Codec.JSON) == b'\x02{"a":1}'
    assert encode_payload("é") == b"\x03" + "é".encode()


@pytest.mark.parametrize(
    ("data", "codec"),
    [
        (b"x", Codec.RAW),
        (bytearray(b"x"), Codec.RAW),
        (memoryview(b"x"), Codec.RAW),
        ("x", Codec.TEXT),
        (1, Codec.MSGPACK),
        ([1, 2], Codec.MSGPACK),
        (Quote("IBM", 1.5), Codec.MSGPACK),
        (None, Codec.MSGPACK),
    ],
)
def test_codec_inferred_from_type(data: object, codec: Codec) -> None:
    assert split_payload(encode_payload(data))[0] is codec


def test_default_codec_applies_to_objects_only() -> None:
    assert encode_payload({"a": 1}, default=Codec.JSON)[:1] == b"\x02"
    assert encode_payload(b"x", default=Codec.JSON)[:1] == b"\x00"
    assert encode_payload("x", default=Codec.JSON)[:1] == b"\x03"


def test_empty_payload_is_raw_and_empty() -> None:
    assert split_payload(b"") == (Codec.RAW, b"")
    assert decode_payload(*split_payload(b"")) == b""


@pytest.mark.parametrize("first", [4, 0x7F, 0xFF])
def test_unknown_id_is_delivered_whole(first: int) -> None:
    payload = bytes([first]) + b"OZ payload"
    codec, body = split_payload(payload)
    assert codec is Codec.UNKNOWN
    assert body == payload
    assert decode_payload(codec, body) == payload
    assert decode_payload(codec, body, bytes) == payload


# ---------------------------------------------------------------- typed decode


def test_typed_decode_into_struct_both_codecs() -> None:
    q = Quote("IBM", 101.25, 300)
    assert round_trip(q, Codec.MSGPACK, Quote) == q
    assert round_trip(q, Codec.JSON, Quote) == q
    assert round_trip(q, Codec.MSGPACK) == {"symbol": "IBM", "price": 101.25, "size": 300}


def test_typed_decode_into_dataclass_and_generics() -> None:
    assert round_trip(Trade("IBM", 5), Codec.JSON, Trade) == Trade("IBM", 5)
    assert round_trip({"a": 1.5}, None, dict[str, float]) == {"a": 1.5}
    assert round_trip(7, None, int) == 7


def test_typed_decoders_are_cached_and_bounded() -> None:
    round_trip(1, Codec.MSGPACK, int)
    assert (Codec.MSGPACK, int) in codecs._typed
    for n in range(codecs._TYPED_CACHE_MAX + 5):  # bounded: a few more than the cache holds
        round_trip([n], Codec.JSON, tuple[int] if n % 2 else list[int])
        round_trip({"k": n}, Codec.MSGPACK, dict[str, int | float | str | None])
    assert len(codecs._typed) <= codecs._TYPED_CACHE_MAX


def test_validation_error_is_decode_error() -> None:
    codec, body = split_payload(encode_payload({"symbol": "IBM"}))
    with pytest.raises(DecodeError, match="Quote") as info:
        decode_payload(codec, body, Quote)
    assert info.value.what == "payload"


@pytest.mark.parametrize(
    ("codec", "body"),
    [
        (Codec.MSGPACK, b"\xc1"),
        (Codec.MSGPACK, b"\x92\x01"),
        (Codec.JSON, b"{"),
        (Codec.JSON, b"\xff"),
        (Codec.TEXT, b"\xff\xfe"),
    ],
)
def test_malformed_bodies_raise_decode_error(codec: Codec, body: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_payload(codec, body)


@pytest.mark.parametrize("codec", [Codec.RAW, Codec.UNKNOWN])
def test_raw_payload_refuses_other_types(codec: Codec) -> None:
    assert decode_payload(codec, b"\x01\x02") == b"\x01\x02"
    with pytest.raises(DecodeError, match="raw bytes"):
        decode_payload(codec, b"\x01\x02", Quote)


def test_text_payload_decodes_to_str_only() -> None:
    assert decode_payload(Codec.TEXT, "é".encode(), str) == "é"
    with pytest.raises(DecodeError, match="text"):
        decode_payload(Codec.TEXT, b"1", int)


def test_unsupported_target_type_is_decode_error() -> None:
    with pytest.raises(DecodeError, match="cannot decode into"):
        decode_payload(Codec.MSGPACK, b"\x01", object())  # type: ignore[arg-type]


# ---------------------------------------------------------------- encode errors


@pytest.mark.parametrize(
    ("data", "codec", "match"),
    [
        (object(), None, "object"),
        (1 + 2j, Codec.JSON, "complex"),
        ("x", Codec.RAW, "RAW codec needs bytes"),
        (b"x", Codec.TEXT, "TEXT codec needs a str"),
        ("\ud800", None, "UTF-8"),
        (2**70, Codec.MSGPACK, "int"),
        (b"x", Codec.UNKNOWN, "UNKNOWN"),
        (b"x", 9, "not a payload codec"),
    ],
)
def test_encode_errors(data: object, codec: Any, match: str) -> None:
    with pytest.raises(EncodeError, match=match):
        encode_payload(data, codec)


def test_encode_error_suggests_a_codec() -> None:
    with pytest.raises(EncodeError, match=r"codec=Codec\.RAW"):
        encode_payload(object())


# ---------------------------------------------------------------- round trips

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(max_size=16),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=250)
@given(msgpack_values)
def test_msgpack_round_trip(value: object) -> None:
    assert round_trip(value, Codec.MSGPACK) == value


@settings(max_examples=250)
@given(json_values)
def test_json_round_trip(value: object) -> None:
    assert round_trip(value, Codec.JSON) == value


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_raw_round_trip(value: bytes) -> None:
    assert round_trip(value) == value
    assert round_trip(bytearray(value), Codec.RAW) == value


@settings(max_examples=200)
@given(st.text(alphabet=st.characters(codec="utf-8")))
def test_text_round_trip(value: str) -> None:
    assert round_trip(value) == value
    assert round_trip(value, Codec.TEXT) == value


@settings(max_examples=200)
@given(
    st.builds(
        Quote,
        st.text(max_size=8),
        st.floats(allow_nan=False, allow_infinity=False),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
    ),
    st.sampled_from([Codec.MSGPACK, Codec.JSON]),
)
def test_struct_round_trip(quote: Quote, codec: Codec) -> None:
    assert round_trip(quote, codec, Quote) == quote


def test_json_has_no_infinity() -> None:
    # msgspec writes inf as null in JSON; a float field then refuses it with a DecodeError
    assert round_trip(math.inf, Codec.JSON) is None
    with pytest.raises(DecodeError, match="float"):
        round_trip(Quote("IBM", math.inf), Codec.JSON, Quote)


@settings(max_examples=300)
@given(st.binary(max_size=64), st.sampled_from([None, int, str, bytes, Quote, dict[str, int]]))
def test_decoding_garbage_returns_or_raises_decode_error(payload: bytes, type_: Any) -> None:
    codec, body = split_payload(payload)
    try:
        decode_payload(codec, body, type_)
    except DecodeError:
        pass
