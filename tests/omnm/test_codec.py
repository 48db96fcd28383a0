"""omnm codec properties: round trips, inference, strict bounded decoding."""

from __future__ import annotations

import datetime as dt
import math
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aoz import DecodeError, EncodeError, omnm
from aoz.omnm import Field, FieldType, Message, Price, Time, Typed

from .golden import with_bytes

FT = FieldType
GOLDEN = with_bytes()
IDS = [f["name"] for f in GOLDEN]

# ------------------------------------------------------------------ strategies
_INT_BOUNDS = {
    FT.I8: (-(2**7), 2**7 - 1), FT.U8: (0, 2**8 - 1), FT.I16: (-(2**15), 2**15 - 1),
    FT.U16: (0, 2**16 - 1), FT.I32: (-(2**31), 2**31 - 1), FT.U32: (0, 2**32 - 1),
    FT.I64: (-(2**63), 2**63 - 1), FT.U64: (0, 2**64 - 1),
}
text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=20)
f32 = st.floats(width=32)
f64 = st.floats()


@st.composite
def times(draw: st.DrawFn) -> Time:
    seconds = draw(st.integers(0, 2**32 - 1))
    hints = draw(st.integers(0, 255))
    if seconds > 86400:
        hints |= Time.HAS_DATE  # what every reader (OpenMAMA's and aoz's) reports
    return Time(seconds, draw(st.integers(0, 999_999)), draw(st.integers(0, 255)), hints)


prices = st.builds(Price, f64, st.integers(0, 255))
bools = st.one_of(st.booleans(), st.integers(-128, 127).filter(lambda b: b not in (0, 1)))
chars = st.integers(0, 255).map(chr)


def scalar(t: FieldType) -> st.SearchStrategy[Any]:
    if t in _INT_BOUNDS:
        return st.integers(*_INT_BOUNDS[t])
    return {
        FT.BOOL: bools, FT.CHAR: chars, FT.F32: f32, FT.F64: f64, FT.STRING: text,
        FT.OPAQUE: st.binary(max_size=40), FT.TIME: times(), FT.PRICE: prices,
    }[t]


_ELEMENT = {
    FT.VECTOR_BOOL: FT.BOOL, FT.VECTOR_CHAR: FT.CHAR, FT.VECTOR_I8: FT.I8,
    FT.VECTOR_U8: FT.U8, FT.VECTOR_I16: FT.I16, FT.VECTOR_U16: FT.U16, FT.VECTOR_I32: FT.I32,
    FT.VECTOR_U32: FT.U32, FT.VECTOR_I64: FT.I64, FT.VECTOR_U64: FT.U64, FT.VECTOR_F32: FT.F32,
    FT.VECTOR_F64: FT.F64, FT.VECTOR_STRING: FT.STRING, FT.VECTOR_TIME: FT.TIME,
    FT.VECTOR_PRICE: FT.PRICE,
}
names = st.one_of(st.none(), text.filter(bool))


@st.composite
def fields(draw: st.DrawFn, msgs: st.SearchStrategy[Message]) -> Field:
    t = draw(st.sampled_from(list(FieldType)))
    name = draw(names)
    fid = draw(st.integers(1 if name is None else 0, 65535))
    if t is FT.MSG:
        value: Any = draw(msgs)
    elif t is FT.VECTOR_MSG:
        # equal-size elements: the only VECTOR_MSG OpenMAMA reads (see test_unequal...)
        one = draw(msgs)
        value = [one] * draw(st.integers(0, 3))
    elif t in _ELEMENT:
        value = draw(st.lists(scalar(_ELEMENT[t]), max_size=5))
    else:
        value = draw(scalar(t))
    return Field(name, fid, t, value)


messages = st.recursive(
    st.just(Message()),
    lambda inner: st.lists(fields(inner), max_size=6).map(Message),
    max_leaves=12,
)


# ------------------------------------------------------------------ round trips
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(messages)
def test_round_trip(msg: Message) -> None:
    data = omnm.encode(msg)
    back = omnm.decode(data)
    assert omnm.to_json(back) == omnm.to_json(msg)  # NaN-safe, F32 compared as float32
    assert omnm.encode(back) == data
    assert [f.type for f in back] == [f.type for f in msg]


@given(st.integers(-(2**63), 2**64 - 1))
def test_ints_take_the_narrowest_type(n: int) -> None:
    f = omnm.decode(omnm.encode({"n": n})).fields[0]
    assert f.value == n
    lo, hi = _INT_BOUNDS[f.type]
    assert lo <= n <= hi
    narrower = [t for t, (a, b) in _INT_BOUNDS.items() if b - a < hi - lo]
    assert not any(_INT_BOUNDS[t][0] <= n <= _INT_BOUNDS[t][1] for t in narrower)
    assert (f.type.name[0] == "U") == (n >= 0)


def test_inference_table() -> None:
    when = dt.datetime(2023, 11, 14, 22, 13, 20, 5, tzinfo=dt.UTC)
    msg = Message({
        "b": True, "u8": 255, "i8": -1, "u16": 256, "i64": -(2**40), "f": 1.5, "s": "x",
        "o": b"\x00", "t": when, "p": Price(1.25, 2), "m": {"x": 1}, "vi": [1, -300],
        "vf": [1, 2.5], "vs": ["a"], "vm": [{"a": 1}], "vt": [Time(5)], "vb": [True],
        "e": [],
    })
    assert [f.type.name for f in msg] == [
        "BOOL", "U8", "I8", "U16", "I64", "F64", "STRING", "OPAQUE", "TIME", "PRICE", "MSG",
        "VECTOR_I16", "VECTOR_F64", "VECTOR_STRING", "VECTOR_MSG", "VECTOR_TIME",
        "VECTOR_BOOL", "VECTOR_I8",
    ]
    assert msg["t"] == Time(1700000000, 5, 6, 3) and msg["t"].to_datetime() == when
    assert omnm.decode(omnm.encode(msg)) == msg


def test_widths_can_be_fixed() -> None:
    a = omnm.encode({"q": Typed(FT.I64, 1)})
    b = omnm.encode(Message().add("q", 1, type=FT.I64))
    c = omnm.encode([Field("q", 0, FT.I64, 1)])
    assert a == b == c == b"O\x01\x00\x14\x00\x00q\x00" + struct.pack("<q", 1)
    with pytest.raises(EncodeError, match=r"'q' \(U8\)"):
        omnm.encode({"q": Typed(FT.U8, 256)})
    with pytest.raises(EncodeError, match="not an omnm field type"):
        omnm.encode({"q": Typed(99, 1)})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (None, "no null"), (object(), "cannot infer"), (2**64, "64 bits"),
        ([1, "a"], "mixes"), ("a\0b", "NUL"), (dt.datetime(2020, 1, 1), "time zone"),
        (Time(0, 1_000_000), "microseconds"), ([b"x"], "mixes OPAQUE|one type"),
    ],
)
def test_unencodable_values(value: Any, match: str) -> None:
    with pytest.raises(EncodeError, match=match):
        omnm.encode({"v": value})


def test_cached_headers_are_still_checked() -> None:
    first = omnm.encode([Field("a", 1, FT.I32, 1), Field("a", 2, FT.U8, 1)])
    assert omnm.decode(first).fields == [Field("a", 1, FT.I32, 1), Field("a", 2, FT.U8, 1)]
    with pytest.raises(EncodeError, match="fid"):
        omnm.encode([Field("a", 70000, FT.I32, 1)])
    with pytest.raises(EncodeError, match="not an omnm field type"):
        omnm.encode([Field("a", 1, 99, 1)])  # type: ignore[arg-type]
    assert omnm.encode([Field("a", 1, 18, 1)]) == omnm.encode([Field("a", 1, FT.I32, 1)])  # type: ignore[arg-type]


def test_bad_names_and_fids() -> None:
    with pytest.raises(EncodeError, match="contains NUL"):
        omnm.encode([Field("a\0", 1, FT.I8, 1)])
    with pytest.raises(EncodeError, match=r"0\.\.65535"):
        omnm.encode([Field("a", 65536, FT.I8, 1)])
    with pytest.raises(EncodeError, match="CHAR"):
        omnm.encode([Field("c", 1, FT.CHAR, "ab")])


def test_unequal_vector_msg_warns_but_reads_back() -> None:
    value = [{"s": "long element"}, {"s": "x"}]
    with pytest.warns(omnm.OpenMamaCompatWarning, match="first one's length"):
        data = omnm.encode({"v": value})
    assert omnm.decode(data).to_dict() == {"v": value}


def test_nesting_is_bounded() -> None:
    inner = omnm.encode({"leaf": 1})
    for _ in range(omnm.MAX_DEPTH):
        inner = b"O\x01\x00\x01\x01\x00m\x00" + struct.pack("<I", len(inner)) + inner
    assert omnm.decode(inner)  # MAX_DEPTH levels are fine
    deeper = b"O\x01\x00\x01\x01\x00m\x00" + struct.pack("<I", len(inner)) + inner
    with pytest.raises(DecodeError, match="nested more than"):
        omnm.decode(deeper)


def test_header_checks() -> None:
    for bad, match in [
        (b"", "starts with"), (b"O\x01", "starts with"), (b"X\x01\x00", "starts with"),
        (b"O\x02\x00", "version 2"), (b"O\x01\x05", "header longer"),
    ]:
        with pytest.raises(DecodeError, match=match):
            omnm.decode(bad)
    # a longer v1 header is skipped, as its size byte says
    assert omnm.decode(b"O\x01\x02\xff\xff\x0f\x01\x00\x00\x07").fields == [
        Field(None, 1, FT.U8, 7)
    ]


def test_strings_end_at_their_first_nul_and_keep_foreign_bytes() -> None:
    raw = b"O\x01\x00\x08\x01\x00s\x00" + struct.pack("<I", 5) + b"ab\0c\0"
    assert omnm.decode(raw)["s"] == "ab"  # what OpenMAMA's getString returns
    latin1 = b"O\x01\x00\x08\x01\x00s\x00" + struct.pack("<I", 3) + b"\xe9t\0"
    assert omnm.encode(omnm.decode(latin1)) == latin1  # not UTF-8, kept byte for byte


# ------------------------------------------------------------------ hostile input
def _fields_json(msg: Message) -> list[Any]:
    return omnm.to_json(msg)


@pytest.mark.parametrize("fx", GOLDEN, ids=IDS)
def test_truncations_raise_decode_error_or_read_a_prefix(fx: dict[str, Any]) -> None:
    data = bytes.fromhex(fx["hex"])
    whole = _fields_json(omnm.decode(data))
    for n in range(len(data)):
        try:
            part = omnm.decode(data[:n])
        except DecodeError:
            continue
        # a cut exactly between two top-level fields is a shorter valid message
        got = _fields_json(part)
        assert got == whole[: len(got)], n
        assert len(got) < len(whole)


@pytest.mark.parametrize("fx", GOLDEN, ids=IDS)
def test_mutations_raise_only_decode_error(fx: dict[str, Any]) -> None:
    data = bytes.fromhex(fx["hex"])
    for i in range(len(data)):
        values = (0x00, 0xFF, data[i] ^ 0x01, data[i] ^ 0x80)
        if len(data) > 1000:  # fields_200 repeats itself: one mutation per byte, rotating
            values = (values[i % 4],)
        for x in values:
            mutated = data[:i] + bytes([x]) + data[i + 1 :]
            try:
                msg = omnm.decode(mutated)
            except DecodeError:
                continue
            omnm.to_json(msg)  # whatever decoded is a well-formed message
        # an inserted byte too
        try:
            omnm.decode(data[:i] + b"\x00" + data[i:])
        except DecodeError:
            pass


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_decode_error(body: bytes) -> None:
    try:
        omnm.decode(b"O\x01\x00" + body)
    except DecodeError:
        pass


def test_huge_lengths_are_refused_without_allocating() -> None:
    for t in (FT.STRING, FT.OPAQUE, FT.MSG, FT.VECTOR_MSG, FT.VECTOR_I64, FT.VECTOR_STRING):
        data = b"O\x01\x00" + bytes([t]) + b"\x01\x00x\x00" + b"\xff\xff\xff\xff" + b"ab"
        with pytest.raises(DecodeError, match="overruns"):
            omnm.decode(data)


def test_non_finite_floats_survive() -> None:
    msg = Message([Field("a", 1, FT.F32, math.inf), Field("b", 2, FT.F64, math.nan)])
    back = omnm.decode(omnm.encode(msg))
    assert back["a"] == math.inf and math.isnan(back["b"])
    assert omnm.to_json(back)[1]["value"] == "NaN"


def test_text_that_is_not_utf8_is_shown_not_crashed_on() -> None:
    import msgspec

    raw = b"O\x01\x00\x08\x01\x00n\xe9\x00" + struct.pack("<I", 5) + b"caf\xe9\0"
    msg = omnm.decode(raw)
    assert omnm.encode(msg) == raw  # the bytes survive a round trip
    shown = omnm.to_json(msg)
    assert shown == [{"name": "n\\xe9", "fid": 1, "type": "STRING", "value": "caf\\xe9"}]
    msgspec.json.encode(shown)  # JSON-safe
    assert omnm.format_fields(msg).encode("utf-8").endswith(b"caf\\xe9")
    assert msg.to_dict(plain=True) == {"n\\xe9": "caf\\xe9"}


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(messages)
def test_the_json_form_is_lossless(msg: Message) -> None:
    import json

    shown = omnm.to_json(msg)
    back = omnm.from_json(json.loads(json.dumps(shown, allow_nan=False)))
    assert omnm.to_json(back) == shown  # the same fields, types and values (NaN is "NaN")
    assert [f.type for f in back] == [f.type for f in msg]
    assert len(omnm.encode(back)) == len(omnm.encode(msg))
