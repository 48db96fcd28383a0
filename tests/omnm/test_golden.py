"""Every golden OpenMAMA message: aoz decodes what OpenMAMA reads and encodes its bytes."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from aoz import DecodeError, EncodeError, omnm
from aoz.omnm import Field, FieldType, Message, Price, Time, Typed

from .golden import by_name, fixtures, opaque_1mib, strip_type_ids, with_bytes

GOLDEN = with_bytes()
IDS = [f["name"] for f in GOLDEN]


def test_the_fixture_file_is_complete() -> None:
    assert len(fixtures()) == 59
    assert len(GOLDEN) == 52  # + opaque_1mib (a template) + 6 call results


def _walk_fields(fields: list[dict[str, Any]]) -> Any:
    for f in fields:
        yield f
        if f["type"] == "MSG":
            yield from _walk_fields(f["value"])
        elif f["type"] == "VECTOR_MSG" and isinstance(f["value"], list):
            for m in f["value"]:
                yield from _walk_fields(m)


def test_type_ids_are_openmama_numbers() -> None:
    seen = set()
    for fx in fixtures():
        for f in _walk_fields(fx.get("fields") or []):
            assert FieldType[f["type"]].value == f["type_id"]
            seen.add(f["type"])
    assert seen == {t.name for t in FieldType}  # the fixtures cover every omnm type


@pytest.mark.parametrize("fx", GOLDEN, ids=IDS)
def test_decode_gives_what_openmama_reads(fx: dict[str, Any]) -> None:
    msg = omnm.decode(bytes.fromhex(fx["hex"]))
    expected = fx.get("read_back") or fx["fields"]
    if fx["name"] == "vector_msg_unequal_sizes":
        # OpenMAMA cannot read this vector; aoz reads what was written.
        assert expected[0]["value"]["element_lengths"] == [44, 18]
        expected = fx["fields"]
    assert omnm.to_json(msg) == strip_type_ids(expected)
    assert len(msg) == len(fx["fields"])


@pytest.mark.parametrize("fx", GOLDEN, ids=IDS)
def test_encode_gives_openmama_bytes(fx: dict[str, Any]) -> None:
    fields = fx["fields"]
    if fx["name"] == "vector_string_stale_bytes":
        # OpenMAMA wrote stale scratch bytes; the bytes are what read_back describes
        assert omnm.encode(omnm.from_json(fields)) != bytes.fromhex(fx["hex"])
        fields = fx["read_back"]
    uneven = fx["name"] == "vector_msg_unequal_sizes"
    with pytest.warns(omnm.OpenMamaCompatWarning) if uneven else _no_warning():
        data = omnm.encode(omnm.from_json(fields))
        assert data.hex() == fx["hex"]
        assert len(data) == fx["size"]
        if fx["name"] != "time_no_hints_nanoseconds":  # read with HAS_DATE added
            # re-encoding what aoz decoded is byte-identical
            assert omnm.encode(omnm.decode(data)) == data


class _no_warning:
    def __enter__(self) -> None:
        import warnings

        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc: object) -> None:
        self._cm.__exit__(*exc)


def test_one_mib_opaque() -> None:
    fx = by_name("opaque_1mib")
    data = opaque_1mib()
    assert len(data) == fx["size"]
    msg = omnm.decode(data)
    assert [f.name for f in msg] == ["before", "blob", "after"]
    blob = msg["blob"]
    assert len(blob) == 1048576
    assert hashlib.sha256(blob).hexdigest() == fx["fields"][1]["value"]["sha256"]
    assert (msg["before"], msg["after"]) == ("1 MiB follows", 1)
    rebuilt = Message([
        Field("before", 1, FieldType.STRING, "1 MiB follows"),
        Field("blob", 2, FieldType.OPAQUE, bytes((i * 7 + 3) & 0xFF for i in range(1048576))),
        Field("after", 3, FieldType.I32, 1),
    ])
    assert omnm.encode(rebuilt) == data


# ------------------------------------------------------------- what OpenMAMA refuses


def test_a_field_needs_a_name_or_a_fid() -> None:
    for name in ("", None):
        with pytest.raises(EncodeError, match="name or a non-zero fid"):
            omnm.encode([Field("before", 1, FieldType.I32, 1), Field(name, 0, FieldType.I32, 5)])
    # what OpenMAMA wrote before the refused call reads back as one field
    after = by_name("refused_empty_name_fid_0")["call_result"]["hex_after"]
    assert omnm.decode(bytes.fromhex(after)).fields == [Field("before", 1, FieldType.I32, 1)]
    assert omnm.encode(Message().add("before", 1, fid=1, type=FieldType.I32)).hex() == after


def test_there_is_no_null_string() -> None:
    with pytest.raises(EncodeError, match="no null"):
        Message().add("s", None, fid=1)
    with pytest.raises(EncodeError, match="needs a str"):
        omnm.encode([Field("s", 1, FieldType.STRING, None)])


def test_openmamas_invalid_update_bytes_are_refused() -> None:
    bad = by_name("update_i32_with_i64")["call_result"]["invalid_hex"]
    with pytest.raises(DecodeError, match="unknown field type"):
        omnm.decode(bytes.fromhex(bad))


@pytest.mark.parametrize("seconds", [-1, 2**32])
def test_time_outside_u32_seconds_is_refused(seconds: int) -> None:
    by_name("time_outside_u32_seconds")  # OpenMAMA writes garbage for these
    with pytest.raises(EncodeError, match=r"0\.\.4294967295"):
        omnm.encode({"t": Time(seconds, 0, 6, 3)})


def test_time_hints_read_as_openmama_reads_them() -> None:
    fx = by_name("time_no_hints_nanoseconds")
    data = bytes.fromhex(fx["hex"])
    assert data[-19] == 0  # hints byte on the wire: none
    assert omnm.decode(data)["nanos"] == Time(1700000000, 123456, 15, Time.HAS_DATE)
    # a time of day keeps its hints
    tod = omnm.decode(bytes.fromhex(by_name("time_of_day_only")["hex"]))["time_of_day"]
    assert tod == Time(34200, 500000, 3, Time.HAS_TIME)


def test_golden_values_as_python_objects() -> None:
    m = omnm.decode(bytes.fromhex(by_name("market_data_mixed")["hex"]))
    assert m["MdMsgType"] == 1
    assert m.field("MdSeqNum") == Field("MdSeqNum", 10, FieldType.U32, 123456)
    assert m[305] == "IBM"
    b = omnm.decode(bytes.fromhex(by_name("bool")["hex"]))
    assert [f.value for f in b] == [True, False, 2, -1]
    p = omnm.decode(bytes.fromhex(by_name("price_hints")["hex"]))
    assert p["fraction_valid"] == Price(100.125, 0x33) and p["fraction_valid"].precision == 19
    d = omnm.decode(bytes.fromhex(by_name("duplicate_names")["hex"]))
    assert d["MdMsgType"] == 1 and d["dup"] == "first" and len(d) == 5
    assert [f.value for f in d if f.name == "dup"] == ["first", "second", 3]
    nested = omnm.decode(bytes.fromhex(by_name("msg_nested_2_levels")["hex"]))
    assert nested["inner"]["deep"]["depth"] == 2
    assert nested.to_dict()["inner"]["bid"] == 10.25
    ts = omnm.decode(bytes.fromhex(by_name("time_with_precision_and_hints")["hex"]))["ts"]
    assert ts.to_datetime().isoformat() == "2023-11-14T22:13:20.123456+00:00"


def test_typed_values_give_the_golden_bytes() -> None:
    """The mamapublisherc message, written the Python way."""
    fx = by_name("mamapublisherc_like")
    msg = omnm.Message()
    msg.add("MdMsgType", 1, fid=1, type=FieldType.I32)
    msg.add("MdMsgStatus", 0, fid=2, type=FieldType.I32)
    msg.add("MdSeqNum", 1, fid=10, type=FieldType.I32)
    msg.add("MdFeedHost", "MD.NYSE.IBM", fid=12)
    assert omnm.encode(msg).hex() == fx["hex"]
    typed = omnm.encode({"x": Typed(FieldType.I32, 5)})
    assert omnm.encode([Field("x", 0, FieldType.I32, 5)]) == typed
