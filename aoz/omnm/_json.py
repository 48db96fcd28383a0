"""omnm messages as JSON and as text, for the CLI, the FastAPI relay and the recorder. Pure.

JSON form (:func:`to_json`): a list of ``{"name", "fid", "type", "value"}`` objects, the
same FIELD layout as the golden fixtures, so nothing is lost: F32/F64 NaN and infinities
are the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; OPAQUE is hex; CHAR a
1-character string; TIME ``{"seconds", "microseconds", "precision", "hints"}``; PRICE
``{"value", "hints", "precision"}``; MSG a list of fields; VECTOR_MSG a list of those.
"""

from __future__ import annotations

import datetime as _dt
import math
import struct
from collections.abc import Mapping
from typing import Any

import msgspec

from ..errors import EncodeError
from ._model import Field, FieldType, Message, Price, Time, Typed, field_from_value, printable

__all__ = ["format_fields", "from_json", "to_json", "value_to_json"]

_FT = FieldType
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _f32_short(v: float) -> float:
    # the shortest decimal that reads back as the same float32 (what C printf("%g") shows)
    if not math.isfinite(v):
        return v
    packed = struct.pack("<f", v)
    for digits in range(1, 10):
        cand = float(f"{v:.{digits}g}")
        try:
            if struct.pack("<f", cand) == packed:
                return cand
        except OverflowError:  # rounded past FLT_MAX
            continue
    return v


def _float_json(v: float, f32: bool) -> float | str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return _f32_short(v) if f32 else v


def value_to_json(t: FieldType, v: Any) -> Any:
    """One field value in the JSON form described in the module docs."""
    if t is _FT.F32 or t is _FT.F64:
        return _float_json(v, t is _FT.F32)
    if t is _FT.VECTOR_F32 or t is _FT.VECTOR_F64:
        return [_float_json(x, t is _FT.VECTOR_F32) for x in v]
    if t is _FT.STRING:
        return printable(v)
    if t is _FT.VECTOR_STRING:
        return [printable(x) for x in v]
    if t is _FT.OPAQUE:
        return bytes(v).hex()
    if t is _FT.TIME:
        return msgspec.structs.asdict(v)
    if t is _FT.VECTOR_TIME:
        return [msgspec.structs.asdict(x) for x in v]
    if t is _FT.PRICE:
        return _price_json(v)
    if t is _FT.VECTOR_PRICE:
        return [_price_json(x) for x in v]
    if t is _FT.MSG:
        return to_json(v)
    if t is _FT.VECTOR_MSG:
        return [to_json(m) for m in v]
    return v


def _price_json(p: Price) -> dict[str, Any]:
    return {"value": _float_json(p.value, False), "hints": p.hints, "precision": p.precision}


def to_json(message: Message) -> list[dict[str, Any]]:
    """A JSON-ready, lossless view: one ``{"name", "fid", "type", "value"}`` per field.

    (Lossless for text that is UTF-8; other bytes in a STRING show as ``\\xNN``.)

    >>> to_json(Message({"bid": 1.5}))
    [{'name': 'bid', 'fid': 0, 'type': 'F64', 'value': 1.5}]
    """
    return [
        {
            "name": None if f.name is None else printable(f.name),
            "fid": f.fid,
            "type": f.type.name,
            "value": value_to_json(f.type, f.value),
        }
        for f in message.fields
    ]


# ----------------------------------------------------------------------------- from JSON
def _type_of(spec: Any) -> FieldType:
    if isinstance(spec, FieldType):
        return spec
    if isinstance(spec, int) and not isinstance(spec, bool):
        try:
            return FieldType(spec)
        except ValueError:
            pass
    if isinstance(spec, str):
        try:
            return FieldType[spec.upper().removeprefix("MAMA_FIELD_TYPE_")]
        except KeyError:
            pass
    names = ", ".join(t.name for t in FieldType)
    raise EncodeError(f"{spec!r} is not an omnm field type; use one of {names}")


def _number(v: Any) -> Any:
    if isinstance(v, str) and v in _SPECIAL:
        return _SPECIAL[v]
    return v


def _time_from_json(v: Any) -> Time:
    if isinstance(v, Time):
        return v
    if isinstance(v, Mapping):
        return Time(
            int(v["seconds"]), int(v.get("microseconds", 0)),
            int(v.get("precision", 6)), int(v.get("hints", 3)),
        )
    if isinstance(v, str):
        try:
            d = _dt.datetime.fromisoformat(v)
        except ValueError:
            raise EncodeError(f"TIME {v!r} is not an ISO 8601 date-time") from None
        if d.tzinfo is None:
            d = d.replace(tzinfo=_dt.UTC)  # JSON time stamps without zone: UTC
        return Time.from_datetime(d)
    if isinstance(v, int | float) and not isinstance(v, bool):
        secs = math.floor(v)
        return Time(secs, round((v - secs) * 1e6) % 1_000_000)
    raise EncodeError(f"a TIME needs seconds, an ISO string or an object, not {v!r}")


def _price_from_json(v: Any) -> Price:
    if isinstance(v, Mapping):
        return Price(float(_number(v["value"])), int(v.get("hints", 0x20)))
    if isinstance(v, int | float | str) and not isinstance(v, bool):
        return Price(float(_number(v)))
    raise EncodeError(f"a PRICE needs a number or {{value, hints}}, not {v!r}")


def _typed_value(t: FieldType, v: Any, hints: Mapping[str, Any], path: str) -> Any:
    if t in (_FT.F32, _FT.F64):
        return _number(v)
    if t in (_FT.VECTOR_F32, _FT.VECTOR_F64):
        return [_number(x) for x in v]
    if t is _FT.OPAQUE:
        if isinstance(v, str):
            try:
                return bytes.fromhex(v)
            except ValueError:
                raise EncodeError(f"OPAQUE {path!r} needs hex text") from None
        return v
    if t is _FT.TIME:
        return _time_from_json(v)
    if t is _FT.VECTOR_TIME:
        return [_time_from_json(x) for x in v]
    if t is _FT.PRICE:
        return _price_from_json(v)
    if t is _FT.VECTOR_PRICE:
        return [_price_from_json(x) for x in v]
    if t is _FT.MSG:
        return from_json(v, hints, _prefix=path + ".")
    if t is _FT.VECTOR_MSG:
        return [from_json(x, hints, _prefix=path + ".") for x in v]
    return v


def from_json(
    obj: Any,
    hints: Mapping[str, Any] | None = None,
    *,
    key_types: bool = False,
    _prefix: str = "",
) -> Message:
    """Build a message from JSON data: a ``{name: value}`` object or a list of FIELD objects.

    In an object, types are inferred (ints narrowest, floats F64, nested objects MSG,
    arrays vectors) unless ``hints`` names them: ``{"qty": "U32", "quote.ts": "TIME"}``
    (dotted paths reach into nested messages). With ``key_types=True`` a key may carry
    its type itself, ``{"qty:U32": 7}`` (handy on a command line). A FIELD list (what
    :func:`to_json` gives) fixes name, fid and type of every field.

    >>> from_json({"qty": 7, "px": "101.5"}, {"qty": "I64", "px": "F64"}).fields[1].value
    101.5
    """
    hints = hints or {}
    if isinstance(obj, Message):
        return obj
    if isinstance(obj, Mapping):
        msg = Message()
        for key, value in obj.items():
            hint = None
            if key_types and ":" in key:
                key, _, hint = key.rpartition(":")
            path = _prefix + key
            hint = hints.get(path, hint)
            if hint is not None:
                t = _type_of(hint)
                if t in (_FT.F32, _FT.F64) and isinstance(value, str) and value not in _SPECIAL:
                    try:
                        value = float(value)
                    except ValueError:
                        raise EncodeError(f"{path!r}: {value!r} is not a number") from None
                msg.fields.append(
                    field_from_value(key, 0, Typed(t, _typed_value(t, value, hints, path)))
                )
            elif isinstance(value, Mapping):
                inner = from_json(value, hints, key_types=key_types, _prefix=path + ".")
                msg.fields.append(Field(key, 0, _FT.MSG, inner))
            elif isinstance(value, list) and value and all(isinstance(x, Mapping) for x in value):
                sub = path + "."
                items = [from_json(x, hints, key_types=key_types, _prefix=sub) for x in value]
                msg.fields.append(Field(key, 0, _FT.VECTOR_MSG, items))
            else:
                msg.fields.append(field_from_value(key, 0, value))
        return msg
    if isinstance(obj, list):
        msg = Message()
        for i, item in enumerate(obj):
            if not isinstance(item, Mapping) or ("type" not in item and "type_id" not in item):
                raise EncodeError(
                    f"item {i}: a FIELD list holds objects with name, fid, type and value"
                )
            t = _type_of(item.get("type", item.get("type_id")))
            name = item.get("name")
            path = _prefix + (name or str(item.get("fid", 0)))
            value = _typed_value(t, item.get("value"), hints, path)
            msg.fields.append(field_from_value(name, int(item.get("fid", 0)), Typed(t, value)))
        return msg
    raise EncodeError(
        f"omnm JSON is an object of fields or a list of FIELD objects, not {type(obj).__name__}"
    )


# ----------------------------------------------------------------------------- as text
def _text(t: FieldType, v: Any) -> str:
    if t is _FT.TIME:
        return _time_text(v)
    if t is _FT.PRICE:
        return f"{v.value:g}"
    if t is _FT.OPAQUE:
        return f"<{len(v)} bytes> {bytes(v[:32]).hex()}{'...' if len(v) > 32 else ''}"
    if t is _FT.F32:
        return repr(_f32_short(v))
    if t is _FT.VECTOR_TIME:
        return "{" + ",".join(_time_text(x) for x in v) + "}"
    if t is _FT.VECTOR_PRICE:
        return "{" + ",".join(f"{x.value:g}" for x in v) + "}"
    if t is _FT.VECTOR_F32:
        return "{" + ",".join(repr(_f32_short(x)) for x in v) + "}"
    if t.is_vector:
        return "{" + ",".join(printable(str(x)) for x in v) + "}"
    return printable(str(v))


def _time_text(t: Time) -> str:
    try:
        d = t.to_datetime()
    except (OverflowError, ValueError):
        return f"{t.seconds}s+{t.microseconds}us"
    if not t.hints & Time.HAS_DATE and 0 <= t.seconds < 86400:
        return d.strftime("%H:%M:%S.%f")
    return d.strftime("%Y-%m-%d %H:%M:%S.%f")


def format_fields(message: Message, indent: int = 0) -> str:
    """One line per field, ``name | fid | type | value``, as OpenMAMA's mamasubscriberc prints.

    Nested messages follow their field, indented.

    >>> print(format_fields(Message({"bid": 1.5})))
    bid                  |     0 | F64           | 1.5
    """
    lines: list[str] = []
    pad = "    " * indent
    for f in message.fields:
        name = printable(f.name) if f.name is not None else "-"
        head = f"{pad}{name:<20} | {f.fid:5d} | {f.type.name:<13} | "
        if f.type is _FT.MSG:
            lines.append(head + "{")
            lines.append(format_fields(f.value, indent + 1))
            lines.append(pad + "}")
        elif f.type is _FT.VECTOR_MSG:
            lines.append(head + f"[{len(f.value)} messages]")
            for i, m in enumerate(f.value):
                lines.append(f"{pad}  [{i}]")
                lines.append(format_fields(m, indent + 1))
        else:
            lines.append(head + _text(f.type, f.value))
    return "\n".join(x for x in lines if x)
