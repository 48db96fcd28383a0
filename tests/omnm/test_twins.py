"""The compiled omnm codec (aoz/omnm/_fast.pyx) and its pure twin (aoz/omnm/_codec.py)
behave the same: the same input gives the same bytes, the same messages, the same
warnings and the same errors (type and text).

These tests call both directly, whichever of them ``aoz.omnm`` uses in this run;
`make test` also runs the suite once on each (``AOZ_PURE_PYTHON=1`` for the second)."""

from __future__ import annotations

import datetime as dt
import math
import os
import shutil
import struct
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aoz import EncodeError, omnm
from aoz.omnm import Field, FieldType, Message, Price, Time, Typed, _backend, _codec, _model

from .golden import opaque_1mib, with_bytes
from .test_codec import messages, scalar

try:
    from aoz.omnm import _fast
except ImportError:  # pragma: no cover - the build could not compile it
    _fast = None  # type: ignore[assignment]

compiled = pytest.mark.skipif(_fast is None, reason="aoz.omnm._fast is not built")
FT = FieldType
GOLDEN = with_bytes()
IDS = [f["name"] for f in GOLDEN]


def test_the_compiled_codec_is_built_where_it_can_be() -> None:
    """Where a C compiler and Cython are present (CI, the README's set-up), the build
    must have produced the extension: a silent fallback would hide a broken build."""
    if os.environ.get("AOZ_NO_EXTENSIONS", "") not in ("", "0"):
        pytest.skip("AOZ_NO_EXTENSIONS is set: the build was told not to compile")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on this machine: the pure-Python codec is expected")
    pytest.importorskip("Cython", reason="Cython is not installed")
    assert _fast is not None, "aoz.omnm._fast was not built; run `pip install -e .`"
    assert _fast.ABI == _backend.OMNM_ABI
    assert _backend.constants() == _fast.CONSTANTS
    pure = os.environ.get("AOZ_PURE_PYTHON", "") not in ("", "0")
    assert omnm.implementation() == ("python" if pure else "compiled")
    assert (omnm.encode is _codec.encode) == pure
    assert (omnm.decode is _codec.decode) == pure


# ---------------------------------------------------------------------- comparing
def canon(x: Any) -> Any:
    """A value with its types spelled out and floats as bits (NaN == NaN, -0.0 != 0.0)."""
    if isinstance(x, Message):
        assert x._index is None
        return ("Message", [canon(f) for f in x.fields])
    if isinstance(x, Field):
        return ("Field", x.name, type(x.name).__name__, x.fid, type(x.fid).__name__,
                x.type, type(x.type).__name__, canon(x.value))
    if isinstance(x, float):
        return ("float", struct.pack("<d", x))
    if isinstance(x, list):
        return ("list", [canon(i) for i in x])
    if isinstance(x, Time | Price):
        return (type(x).__name__, [canon(getattr(x, k)) for k in x.__struct_fields__])
    return (type(x).__name__, x)


def outcome(fn: Callable[[Any], Any], arg: Any) -> Any:
    """What a call gives: its result (canonical) and warnings, or its error."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: Any = ("ok", canon(fn(arg)))
        except Exception as exc:
            result = ("raised", type(exc).__name__, str(exc))
    return result, [(w.category.__name__, str(w.message)) for w in caught]


def same_encoding(value: Any) -> Any:
    assert _fast is not None
    pure = outcome(_codec.encode, value)
    assert outcome(_fast.encode, value) == pure
    return pure[0]


def same_decoding(data: bytes) -> Any:
    assert _fast is not None
    pure = outcome(_codec.decode, data)
    assert outcome(_fast.decode, data) == pure
    for kind in (bytearray, memoryview):
        assert outcome(_fast.decode, kind(data)) == pure
    return pure[0]


# ---------------------------------------------------------------------- golden bytes
@compiled
@pytest.mark.filterwarnings("ignore::aoz.omnm.OpenMamaCompatWarning")
@pytest.mark.parametrize("fx", GOLDEN, ids=IDS)
def test_golden_messages_decode_and_encode_alike(fx: dict[str, Any]) -> None:
    assert _fast is not None
    data = bytes.fromhex(fx["hex"])
    assert same_decoding(data)[0] == "ok"
    msg = _codec.decode(data)
    written = omnm.from_json(fx["fields"])
    assert same_encoding(written)[0] == "ok"
    assert _fast.encode(written) == _codec.encode(written)
    if fx["name"] != "vector_string_stale_bytes":  # OpenMAMA wrote stale scratch bytes
        assert _fast.encode(written) == data  # byte-exact, as OpenMAMA wrote it
    # (what decoding gives may differ from what was written: TIME's HAS_DATE hint)
    assert same_encoding(msg) == same_encoding(_fast.decode(data))


@compiled
def test_the_1mib_golden_message_too() -> None:
    assert _fast is not None
    data = opaque_1mib()
    assert canon(_fast.decode(data)) == canon(_codec.decode(data))
    assert _fast.encode(_fast.decode(data)) == data


# ---------------------------------------------------------------------- encoding
class Sub(str):
    pass


junk_values = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5),
    st.binary(max_size=5), st.just(bytearray(b"ab")), st.just(memoryview(b"cd")),
    st.lists(st.integers(-300, 300), max_size=3), st.tuples(st.integers(0, 3)),
    st.just([Message()] * 2), st.just([Message(), Message({"a": 1})]),
    st.just(dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC)),
    st.just(dt.datetime(2024, 1, 2, 3, 4, 5, 6)),
    st.just(dt.datetime(1960, 1, 1, tzinfo=dt.UTC)),
    st.just(dt.datetime(2024, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=2)))),
    st.builds(Time, st.integers(-5, 2**33), st.integers(-1, 10**6), st.integers(-1, 256),
              st.integers(-1, 256)),
    st.builds(Time, st.floats(0, 10)),
    st.builds(Price, st.one_of(st.floats(), st.integers(-(2**70), 2**70)),
              st.integers(-1, 256)),
    st.just({"x": 1}), st.just({1: 2}), st.just({"": 1}), st.just(Message({"y": "z"})),
    st.just([Field("n", 1, FT.U8, 1)]), st.just(Typed(FT.U16, 7)), st.just(Typed(99, 7)),
    st.just(object()),
)
junk_names = st.one_of(
    st.none(), st.just(""), st.text(max_size=4), st.just("a\0b"), st.just("\ud800"),
    st.just("\udcff"), st.just("é"), st.just(5), st.just(b"n"),
)
junk_fids = st.one_of(st.integers(-2, 70000), st.just(5.0), st.just(True), st.just("1"))
junk_types = st.one_of(st.sampled_from(list(FieldType)), st.sampled_from([1, 8, 25, 99, "U8"]))


@st.composite
def any_field(draw: st.DrawFn) -> Any:
    """A field that may be fine or wrong in any part: name, fid, type or value."""
    t = draw(junk_types)
    if isinstance(t, FieldType) and t not in (FT.MSG, FT.VECTOR_MSG) and draw(st.booleans()):
        value = draw(scalar(t)) if not t.is_vector else draw(
            st.lists(scalar(FT.U8 if t in (FT.VECTOR_BOOL,) else _element(t)), max_size=3))
    else:
        value = draw(junk_values)
    if draw(st.booleans()):
        return Field(draw(st.one_of(st.text(max_size=6).filter(bool), junk_names)),
                     draw(st.integers(0, 65535) | junk_fids), t, value)
    return Field(draw(junk_names), draw(junk_fids), t, value)


def _element(t: FieldType) -> FieldType:
    name = t.name.removeprefix("VECTOR_")
    return FieldType[name] if name in FieldType.__members__ else FT.U8


dict_values = st.recursive(
    st.one_of(junk_values, st.integers(-(2**65), 2**65), st.just(Sub("s")),
              st.just(float("nan")), st.just(Typed(FT.F32, 1e40))),
    lambda inner: st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@compiled
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(messages)
def test_messages_encode_alike(msg: Message) -> None:
    assert same_encoding(msg)[0] == "ok"
    assert same_encoding(msg.fields)[0] == "ok"
    assert same_encoding(tuple(msg.fields))[0] == "ok"


@compiled
@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(any_field(), max_size=4), st.integers(0, 2))
def test_any_fields_encode_alike_or_fail_alike(fields: list[Field], nest: int) -> None:
    msg: Any = Message(fields)
    for _ in range(nest):  # inside MSG fields too
        msg = Message([Field("m", 0, FT.MSG, msg)])
    same_encoding(msg)


@compiled
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.one_of(st.text(max_size=4), junk_names), dict_values, max_size=5))
def test_dicts_encode_alike_or_fail_alike(d: dict[Any, Any]) -> None:
    same_encoding(d)
    same_encoding(Message([Field("inner", 3, FT.MSG, d)]))


@compiled
@pytest.mark.parametrize("value", [
    {"\ud800": 1}, {"ok": "\ud800"}, {"a\0": 1}, {"ok": "a\0b"}, {"": 1}, {"x": None},
    {"x": 2**64}, {"x": -(2**63) - 1}, [Field("\ud800", 1, FT.U8, 1)], [("t", 1, FT.U8, 1)],
    [Field(None, 0, FT.U8, 1)], [Field("x", 1, FT.F32, 1e39)], [Field("x", 1, FT.U8, 256)],
    [Field("x", 1, FT.U64, -1)], [Field("x", 1, FT.U64, 2**64)],
    [Field("x", 1, FT.BOOL, 300)], [Field("x", 1, FT.CHAR, "ā")], 5, "text", None,
    {"x": dt.datetime(2200, 1, 1, tzinfo=dt.UTC)}, {"x": dt.datetime(1, 1, 1, tzinfo=dt.UTC)},
])
def test_errors_are_the_pure_twins(value: Any) -> None:
    assert same_encoding(value)[0] == "raised"


@compiled
@pytest.mark.parametrize("value", [
    [Field("x", 1, FT.I8, True)], [Field("x", True, FT.U8, 1)], [Field("x", 1, FT.F64, True)],
    [Field("x", 1, FT.F32, 3)], [Field("x", 1, FT.PRICE, 2)], [Field("x", 1, FT.PRICE, 2.5)],
    [Field("x", 1, FT.TIME, dt.datetime(2024, 5, 6, tzinfo=dt.UTC))],
    [Field("x", 1, 8, "int type")], [Field(Sub("sub"), 1, FT.STRING, Sub("str"))],
    {"x": Sub("s"), "b": bytearray(b"1"), "t": Typed(FT.I64, 5), "v": [1, 2]},
    [Field("x", 1, FT.OPAQUE, bytearray(b"ab"))], [Field("x", 1, FT.MSG, {"a": [1.5]})],
    [Field("x", 1, FT.MSG, [Field("y", 2, FT.U8, 3)])],
])
def test_what_only_the_pure_twin_takes_comes_out_the_same(value: Any) -> None:
    assert same_encoding(value)[0] == "ok"


@compiled
def test_deep_nesting_fails_alike() -> None:
    assert _fast is not None
    for depth in (omnm.MAX_DEPTH, omnm.MAX_DEPTH + 1, omnm.MAX_DEPTH + 2):
        d: dict[str, Any] = {"x": 1}
        m = Message({"x": 1})
        for _ in range(depth):
            d = {"m": d}
            m = Message([Field("m", 0, FT.MSG, m)])
        assert same_encoding(d) == same_encoding(m)
        assert same_encoding(d)[0] == ("ok" if depth <= omnm.MAX_DEPTH else "raised")


@compiled
def test_the_vector_msg_warning_is_given_once_on_both() -> None:
    bad = Message([Field("v", 0, FT.VECTOR_MSG, [Message(), Message({"a": 1})])])
    (result, caught) = outcome(omnm.encode, bad)
    assert result[0] == "ok"
    assert [c for c, _ in caught] == ["OpenMamaCompatWarning"]
    same_encoding(bad)


@pytest.mark.parametrize("encode", [_codec.encode, getattr(_fast, "encode", _codec.encode)],
                         ids=["python", "compiled"])
def test_a_lone_surrogate_in_a_name_is_an_encode_error(encode: Any) -> None:
    for value in ({"\ud800": 1}, [Field("\udfff", 0, FT.U8, 1)], {"m": {"\ud800": 1}}):
        with pytest.raises(EncodeError, match="not valid text"):
            encode(value)
    # the surrogates that stand for undecodable wire bytes still go back as those bytes
    assert encode({"\udcff": 1}) == b"O\x01\x00\x0f\x00\x00\xff\x00\x01"


# ---------------------------------------------------------------------- decoding
@compiled
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(messages, st.data())
def test_messages_truncated_and_mutated_decode_alike(msg: Message, data: st.DataObject) -> None:
    raw = _codec.encode(msg)
    assert same_decoding(raw)[0] == "ok"
    for cut in sorted(set(data.draw(st.lists(st.integers(0, len(raw)), max_size=4)))):
        same_decoding(raw[:cut])
    for _ in range(data.draw(st.integers(0, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        same_decoding(raw[:i] + bytes([data.draw(st.integers(0, 255))]) + raw[i + 1 :])
    same_decoding(raw + data.draw(st.binary(max_size=6)))


@compiled
@pytest.mark.parametrize("fx", GOLDEN, ids=IDS)
def test_every_truncation_and_a_mutation_per_byte_decode_alike(fx: dict[str, Any]) -> None:
    data = bytes.fromhex(fx["hex"])
    step = max(1, len(data) // 300)  # fields_200: a bounded sample of its cuts
    for cut in range(0, len(data), step):
        same_decoding(data[:cut])
    for i in range(0, len(data), step):
        for b in (0x00, 0xFF, data[i] ^ 0x01, data[i] ^ 0x80):
            same_decoding(data[:i] + bytes([b]) + data[i + 1 :])


@compiled
@settings(max_examples=500)
@given(st.binary(max_size=60))
def test_junk_decodes_alike(body: bytes) -> None:
    same_decoding(body)
    same_decoding(b"O\x01\x00" + body)


@compiled
def test_non_bytes_input_decodes_alike() -> None:
    for value in ("O\x01\x00", 5, None, [79, 1, 0]):
        assert outcome(_fast.decode, value) == outcome(_codec.decode, value)


@compiled
def test_values_at_the_edges_decode_alike() -> None:
    edge = Message([
        Field("f32", 1, FT.F32, math.inf), Field("f", 2, FT.F64, -0.0),
        Field("nan", 3, FT.F64, math.nan), Field("i64", 4, FT.I64, -(2**63)),
        Field("u64", 5, FT.U64, 2**64 - 1), Field("i32", 6, FT.I32, -(2**31)),
        Field("u32", 7, FT.U32, 2**32 - 1), Field("i16", 8, FT.I16, -(2**15)),
        Field("b", 9, FT.BOOL, -128), Field("c", 10, FT.CHAR, "\xff"),
        Field("t", 11, FT.TIME, Time(2**32 - 1, 999_999, 255, 0)),
        Field("t0", 12, FT.TIME, Time(86400, 0, 0, 0)), Field("", 13, FT.STRING, ""),
        Field("s", 14, FT.STRING, "\udcff\udc80é"), Field("\udcfe", 0, FT.OPAQUE, b""),
    ])
    raw = _codec.encode(edge)
    assert same_encoding(edge)[0] == "ok"
    assert same_decoding(raw)[0] == "ok"
    # names and fids read from the header cache of the compiled decoder: many names,
    # and one name with many fids, read twice
    many = Message([Field(f"n{i % 1500}", i % 7, FT.U8, i & 0xFF) for i in range(3000)])
    raw = _codec.encode(many)
    assert same_decoding(raw) == same_decoding(raw)


@compiled
@pytest.mark.filterwarnings("ignore::aoz.omnm.OpenMamaCompatWarning")
def test_the_fast_path_takes_well_formed_input_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparisons above would pass if the compiled codec handed everything to the
    pure one: here it may not (except a VECTOR_MSG to encode, which the pure one warns
    about)."""
    assert _fast is not None

    def refuse(*args: Any) -> Any:
        raise AssertionError("the compiled codec handed this to the pure one")

    monkeypatch.setattr(_fast, "_pure_encode", refuse)
    monkeypatch.setattr(_fast, "_pure_decode", refuse)
    for fx in GOLDEN:
        data = bytes.fromhex(fx["hex"])
        msg = _fast.decode(data)
        if not any(f.type is FT.VECTOR_MSG for f in _walk(msg)):
            _fast.encode(msg)
    _fast.encode({"s": "x", "i": -5, "u": 2**40, "f": 1.5, "b": True, "o": b"x",
                  "t": dt.datetime(2024, 1, 2, tzinfo=dt.UTC), "p": Price(1.0), "m": {"a": 1},
                  "q": Typed(FT.I64, 5), "v": [1, -2], "vs": ["a", "b"], "vf": (1.5, 2),
                  "vt": [Time(5)], "tt": Typed(FT.TIME, Time(7)), "c": Typed(FT.CHAR, "x"),
                  "ba": bytearray(b"y")})
    _fast.encode(Message({"q": Typed(FT.I64, 5), "v": [1, -2]}))


def _walk(msg: Message) -> Any:
    for f in msg.fields:
        yield f
        if f.type is FT.MSG:
            yield from _walk(f.value)
        elif f.type is FT.VECTOR_MSG:
            for m in f.value:
                yield from _walk(m)


# ---------------------------------------------------------------------- Message(...)
def _built(init: Callable[..., None]) -> Callable[[Any], Message]:
    def build(arg: Any) -> Message:
        m = Message.__new__(Message)
        init(m, arg)
        return m

    return build


@compiled
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(
    messages.map(lambda m: m.fields), messages.map(lambda m: tuple(m.fields)), messages,
    st.lists(st.one_of(any_field(), st.tuples(st.just("t"), st.just(1), st.just(FT.U8),
                                              st.integers(0, 9)),
                       st.just(("short",)), st.just(5)), max_size=3),
    st.dictionaries(st.text(max_size=3), dict_values, max_size=3), st.none(), st.just(7),
))
def test_messages_are_built_alike(arg: Any) -> None:
    assert _fast is not None
    pure = outcome(_built(_model.PURE_MESSAGE_INIT), arg)
    assert outcome(_built(_fast.message_init), arg) == pure
    m = Message([Field("old", 1, FT.U8, 1)])
    m.get("old")  # an index to drop
    _fast.message_init(m, [Field("new", 2, FT.U8, 2)])  # again on a built message
    assert m._index is None and m.fields == [Field("new", 2, FT.U8, 2)]


@compiled
def test_built_messages_own_their_list() -> None:
    fields = [Field("a", 1, FT.U8, 1)]
    m = Message(fields)
    fields.append(Field("b", 2, FT.U8, 2))
    assert len(m) == 1


# ---------------------------------------------------------------------- the choice
def test_the_choice_of_codec(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    import sys
    import types

    monkeypatch.setenv("AOZ_PURE_PYTHON", "1")
    assert _backend.select_backend() is _backend.PURE
    monkeypatch.setenv("AOZ_PURE_PYTHON", "0")
    stale = types.ModuleType("aoz.omnm._fast")
    stale.ABI = _backend.OMNM_ABI + 1  # type: ignore[attr-defined]
    stale.CONSTANTS = _backend.constants()  # type: ignore[attr-defined]
    for name in ("encode", "decode", "message_init"):
        setattr(stale, name, getattr(_codec, name, None))
    monkeypatch.setitem(sys.modules, "aoz.omnm._fast", stale)
    assert _backend.select_backend() is _backend.PURE
    assert "out of date" in caplog.text
    stale.ABI = _backend.OMNM_ABI  # type: ignore[attr-defined]
    stale.CONSTANTS = {**_backend.constants(), "MAX_DEPTH": 99}  # type: ignore[attr-defined]
    assert _backend.select_backend() is _backend.PURE
    stale.CONSTANTS = _backend.constants()  # type: ignore[attr-defined]
    assert _backend.select_backend().name == "compiled"
    monkeypatch.setitem(sys.modules, "aoz.omnm._fast", None)  # not built
    assert _backend.select_backend() is _backend.PURE
