"""omnm bytes <-> :class:`Message`. Pure: no I/O, no clock.

Wire format (version 1, little-endian, as the OpenMAMA-omnm payload bridge writes it)::

    message := 'O' 0x01 <extra header size: u8, 0> field*        (no field count)
    field   := <type: u8> <fid: u16> <name bytes> NUL <value>
    value   := fixed-size bytes (BOOL, CHAR, ints, floats; TIME 32 B; PRICE 16 B)
             | <u32 byte length> <bytes>   (STRING incl. its NUL, OPAQUE, MSG, vectors)

Decoding trusts nothing: every length is checked against the end of its enclosing
buffer, nesting is bounded, and any inconsistency raises :class:`aoz.DecodeError`
(OpenMAMA's own reader checks nothing and can read out of bounds).
"""

from __future__ import annotations

import struct
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from ..errors import DecodeError, EncodeError
from ._model import (
    Field,
    FieldsLike,
    FieldType,
    Message,
    OpenMamaCompatWarning,
    Price,
    Time,
    as_message,
    as_price,
    as_time,
    field_from_value,
    narrowest_int_type,
    new_field,
)

__all__ = [
    "MAX_DEPTH", "READER_BY_ID", "WRITER_BY_ID", "decode", "encode", "field_from_value",
    "narrowest_int_type",
]


#: nested MSG / VECTOR_MSG levels accepted by :func:`decode` (and written by :func:`encode`)
MAX_DEPTH: Final = 32

HEADER: Final = b"O\x01\x00"
_FT = FieldType
_HDR = struct.Struct("<BH")
_U32 = struct.Struct("<I")
_TIME = struct.Struct("<qIBB18x")
_PRICE = struct.Struct("<dB7x")
_U32_MAX: Final = 0xFFFF_FFFF

# struct format letter of each fixed-width scalar type; vectors reuse their element's.
_SCALAR_FMT: Final[dict[FieldType, str]] = {
    _FT.I8: "b", _FT.U8: "B", _FT.I16: "h", _FT.U16: "H", _FT.I32: "i", _FT.U32: "I",
    _FT.I64: "q", _FT.U64: "Q", _FT.F32: "f", _FT.F64: "d",
}
_VECTOR_FMT: Final[dict[FieldType, str]] = {
    _FT.VECTOR_I8: "b", _FT.VECTOR_U8: "B", _FT.VECTOR_I16: "h", _FT.VECTOR_U16: "H",
    _FT.VECTOR_I32: "i", _FT.VECTOR_U32: "I", _FT.VECTOR_I64: "q", _FT.VECTOR_U64: "Q",
    _FT.VECTOR_F32: "f", _FT.VECTOR_F64: "d",
}
_SCALAR_STRUCT: Final = {t: struct.Struct("<" + f) for t, f in _SCALAR_FMT.items()}
# Per type byte, indexed by the byte: FieldType members hash in Python, list lookups don't.
_BY_ID: Final[list[FieldType | None]] = [None] * 256
_SCALAR_BY_ID: Final[list[struct.Struct | None]] = [None] * 256
for _t in FieldType:
    _BY_ID[_t.value] = _t
    _SCALAR_BY_ID[_t.value] = _SCALAR_STRUCT.get(_t)

# Field headers (type, fid, name) repeat message after message: keep the encoded bytes
# of the last header seen per name, and the decoded text of names seen on the wire.
_CACHE_MAX: Final = 4096
_header_cache: dict[str | None, tuple[int, FieldType, bytes]] = {}
_name_cache: dict[bytes, str] = {}

# ----------------------------------------------------------------------------- encoding
def encode(message: FieldsLike) -> bytes:
    """Encode an omnm message: a :class:`Message`, a ``dict`` (name -> value, types
    inferred) or an iterable of :class:`Field`. Raises :class:`aoz.EncodeError`.

    >>> encode({"x": 5}).hex()
    '4f01000f0000780005'
    """
    buf = bytearray(HEADER)
    _encode_into(buf, message, 0)
    return bytes(buf)


def _encode_into(buf: bytearray, message: FieldsLike, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise EncodeError(f"omnm messages nest at most {MAX_DEPTH} levels deep")
    if isinstance(message, Message):
        fields: Iterable[Field] = message.fields
    elif isinstance(message, Mapping):
        fields = (field_from_value(k, 0, v) for k, v in message.items())
    else:
        fields = message
    for f in fields:
        if type(f) is not Field and not isinstance(f, Field):
            raise EncodeError(f"an omnm message holds omnm.Field values, not {f!r}")
        name, fid, t, value = f
        hit = _header_cache.get(name)
        if hit is not None and hit[0] == fid and hit[1] is t and type(fid) is int:
            buf += hit[2]
        else:
            t = _header(buf, name, fid, t)
        try:
            s = _SCALAR_BY_ID[t]
            if s is not None:
                if isinstance(value, int | float):
                    buf += s.pack(value)
                    continue
                raise TypeError(f"needs a number, not {type(value).__name__}")
            WRITER_BY_ID[t](buf, value, depth)
        except (struct.error, TypeError, ValueError, OverflowError) as exc:
            tn = t.name if isinstance(t, FieldType) else repr(t)
            raise EncodeError(
                f"field {name!r} ({tn}): cannot encode {value!r:.80}: {exc}"
            ) from None


def _header(buf: bytearray, name: Any, fid: Any, t: Any) -> FieldType:
    """Append a checked field header; returns the type as a FieldType."""
    try:
        ft = t if type(t) is FieldType else FieldType(t)
    except ValueError:
        raise EncodeError(f"field {name!r}: {t!r} is not an omnm field type") from None
    if not name:
        if not fid:
            raise EncodeError(
                "an omnm field needs a name or a non-zero fid (OpenMAMA refuses both empty)"
            )
        name_b = b"\0"
    elif isinstance(name, str):
        try:
            name_b = name.encode("utf-8", "surrogateescape") + b"\0"
        except UnicodeEncodeError as exc:  # a lone surrogate that no wire byte gave
            raise EncodeError(f"field name {name!r} is not valid text: {exc.reason}") from None
        if b"\0" in name_b[:-1]:
            raise EncodeError(f"field name {name!r} contains NUL, which ends names on the wire")
    else:
        raise EncodeError(f"a field name is a str or None, not {type(name).__name__}")
    if not (isinstance(fid, int) and 0 <= fid <= 0xFFFF):
        raise EncodeError(f"field {name!r}: fid must be an int in 0..65535, not {fid!r}")
    head = _HDR.pack(ft, fid) + name_b
    if len(_header_cache) >= _CACHE_MAX:
        _header_cache.clear()
    _header_cache[name] = (fid, ft, head)
    buf += head
    return ft


def _w_bool(buf: bytearray, v: Any, depth: int) -> None:
    buf += b"\x01" if v is True else b"\x00" if v is False else struct.pack("<b", v)


def _char_byte(v: Any) -> int:
    if isinstance(v, str) and len(v) == 1 and ord(v) < 256:
        return ord(v)
    raise ValueError("CHAR needs a 1-character str whose code point is below 256")


def _w_char(buf: bytearray, v: Any, depth: int) -> None:
    buf.append(_char_byte(v))


def _text(v: Any) -> bytes:
    if not isinstance(v, str):
        raise TypeError(f"needs a str, not {type(v).__name__}")
    b = v.encode("utf-8", "surrogateescape")
    if b"\0" in b:
        raise ValueError("omnm strings end at NUL, so they cannot contain one")
    return b


def _w_string(buf: bytearray, v: Any, depth: int) -> None:
    b = _text(v)
    buf += _U32.pack(len(b) + 1)
    buf += b
    buf.append(0)


def _w_opaque(buf: bytearray, v: Any, depth: int) -> None:
    if not isinstance(v, bytes | bytearray | memoryview):
        raise TypeError(f"needs bytes, not {type(v).__name__}")
    buf += _U32.pack(len(v))
    buf += v


def _time_bytes(v: Any) -> bytes:
    t = as_time(v)
    if not 0 <= t.seconds <= _U32_MAX:
        raise ValueError(
            "OpenMAMA can only express TIME seconds in 0..4294967295 (1970..2106); "
            "it writes garbage for others"
        )
    if not 0 <= t.microseconds < 1_000_000:
        raise ValueError("TIME microseconds must be in 0..999999")
    return _TIME.pack(t.seconds, t.microseconds * 1000, t.precision, t.hints)


def _w_time(buf: bytearray, v: Any, depth: int) -> None:
    buf += _time_bytes(v)


def _w_price(buf: bytearray, v: Any, depth: int) -> None:
    p = as_price(v)
    buf += _PRICE.pack(p.value, p.hints)


def _w_msg(buf: bytearray, v: Any, depth: int) -> None:
    inner = bytearray(HEADER)
    _encode_into(inner, as_message(v), depth + 1)
    buf += _U32.pack(len(inner))
    buf += inner


def _vector_writer(fmt: str) -> Callable[[bytearray, Any, int], None]:
    def write(buf: bytearray, v: Any, depth: int) -> None:
        if not isinstance(v, list | tuple):
            raise TypeError(f"a vector needs a list, not {type(v).__name__}")
        body = struct.pack(f"<{len(v)}{fmt}", *v)
        buf += _U32.pack(len(body))
        buf += body

    return write


def _w_vbool(buf: bytearray, v: Any, depth: int) -> None:
    inner = bytearray()
    for x in v:
        _w_bool(inner, x, depth)
    buf += _U32.pack(len(inner))
    buf += inner


def _w_vchar(buf: bytearray, v: Any, depth: int) -> None:
    body = bytes(_char_byte(c) for c in v)
    buf += _U32.pack(len(body))
    buf += body


def _w_vstring(buf: bytearray, v: Any, depth: int) -> None:
    if isinstance(v, str):
        raise TypeError("VECTOR_STRING needs a list of str, not one str")
    body = b"".join(_text(s) + b"\0" for s in v)
    buf += _U32.pack(len(body))
    buf += body


def _w_vmsg(buf: bytearray, v: Any, depth: int) -> None:
    inner = bytearray()
    sizes = set()
    for m in v:
        one = bytearray(HEADER)
        _encode_into(one, as_message(m), depth + 1)
        sizes.add(len(one))
        inner += _U32.pack(len(one))
        inner += one
    if len(sizes) > 1:
        warnings.warn(
            "VECTOR_MSG elements of unequal encoded sizes: OpenMAMA's omnm reader reads every "
            "element with the first one's length and misreads this vector (aoz reads it "
            "correctly); pad the elements to one size or send them as separate MSG fields",
            OpenMamaCompatWarning,
            stacklevel=4,
        )
    buf += _U32.pack(len(inner))
    buf += inner


def _w_vtime(buf: bytearray, v: Any, depth: int) -> None:
    body = b"".join(_time_bytes(t) for t in v)
    buf += _U32.pack(len(body))
    buf += body


def _w_vprice(buf: bytearray, v: Any, depth: int) -> None:
    body = b"".join(_PRICE.pack(p.value, p.hints) for p in map(as_price, v))
    buf += _U32.pack(len(body))
    buf += body


_WRITERS: Final[dict[FieldType, Callable[[bytearray, Any, int], None]]] = {
    _FT.BOOL: _w_bool, _FT.CHAR: _w_char, _FT.STRING: _w_string, _FT.OPAQUE: _w_opaque,
    _FT.TIME: _w_time, _FT.PRICE: _w_price, _FT.MSG: _w_msg,
    _FT.VECTOR_BOOL: _w_vbool, _FT.VECTOR_CHAR: _w_vchar, _FT.VECTOR_STRING: _w_vstring,
    _FT.VECTOR_MSG: _w_vmsg, _FT.VECTOR_TIME: _w_vtime, _FT.VECTOR_PRICE: _w_vprice,
    **{t: _vector_writer(f) for t, f in _VECTOR_FMT.items()},
}


# ----------------------------------------------------------------------------- decoding
def decode(data: bytes | bytearray | memoryview) -> Message:
    """Decode omnm bytes into a :class:`Message`; raises :class:`aoz.DecodeError` if malformed.

    Values are what OpenMAMA programs read (see the module docs for TIME hints).

    >>> decode(bytes.fromhex("4f01000f0000780005"))["x"]
    5
    """
    buf = bytes(data)
    return _decode(buf, 0, len(buf), 0)


def _fail(msg: str) -> DecodeError:
    return DecodeError(f"invalid omnm payload: {msg}", what="omnm payload")


def _decode(buf: bytes, pos: int, end: int, depth: int) -> Message:
    if depth > MAX_DEPTH:
        raise _fail(f"messages nested more than {MAX_DEPTH} deep")
    if end - pos < 3 or buf[pos] != 0x4F:
        raise _fail("an omnm message starts with 'O' 0x01 <header size>")
    if buf[pos + 1] != 1:
        raise _fail(f"wire version {buf[pos + 1]} (aoz reads version 1)")
    pos += 3 + buf[pos + 2]
    if pos > end:
        raise _fail("header longer than the message")
    fields: list[Field] = []
    append = fields.append
    while pos < end:
        if end - pos < 4:
            raise _fail(f"truncated field header at byte {pos}")
        tb = buf[pos]
        t = _BY_ID[tb]
        if t is None:
            raise _fail(f"unknown field type {tb} at byte {pos}")
        fid = buf[pos + 1] | buf[pos + 2] << 8
        nul = buf.find(b"\0", pos + 3, end)
        if nul < 0:
            raise _fail(f"field name at byte {pos + 3} has no NUL")
        if nul > pos + 3:
            raw = buf[pos + 3 : nul]
            name = _name_cache.get(raw)
            if name is None:
                name = _decode_name(raw)
        else:
            name = None
        pos = nul + 1
        s = _SCALAR_BY_ID[tb]
        if s is not None:
            nxt = pos + s.size
            if nxt > end:
                raise _fail(f"{t.name} field {name!r} truncated")
            append(new_field(Field, (name, fid, t, s.unpack_from(buf, pos)[0])))
            pos = nxt
            continue
        if tb == 8 and end - pos >= 4:  # STRING, the commonest sized field: inline
            start = pos + 4
            nxt = start + _U32.unpack_from(buf, pos)[0]
            if start < nxt <= end and buf[nxt - 1] == 0:
                stop = buf.find(b"\0", start, nxt)
                text = buf[start:stop].decode("utf-8", "surrogateescape")
                append(new_field(Field, (name, fid, t, text)))
                pos = nxt
                continue
            # malformed: the general reader below says what is wrong
        value, pos = READER_BY_ID[tb](buf, pos, end, depth, t)
        append(new_field(Field, (name, fid, t, value)))
    return Message._of(fields)


def _decode_name(raw: bytes) -> str:
    name = raw.decode("utf-8", "surrogateescape")
    if len(_name_cache) >= _CACHE_MAX:
        _name_cache.clear()
    _name_cache[raw] = name
    return name


def _sized(buf: bytes, pos: int, end: int, t: FieldType) -> tuple[int, int]:
    if end - pos < 4:
        raise _fail(f"{t.name} length truncated at byte {pos}")
    n = _U32.unpack_from(buf, pos)[0]
    pos += 4
    if n > end - pos:
        raise _fail(f"{t.name} of {n} bytes overruns its message at byte {pos}")
    return pos, pos + n


def _fixed(buf: bytes, pos: int, end: int, size: int, t: FieldType) -> int:
    if end - pos < size:
        raise _fail(f"{t.name} truncated at byte {pos}")
    return pos + size


def _bool_of(b: int) -> bool | int:
    return True if b == 1 else False if b == 0 else b - 256 if b > 127 else b


def _r_bool(buf: bytes, pos: int, end: int, depth: int, t: FieldType) -> tuple[Any, int]:
    nxt = _fixed(buf, pos, end, 1, t)
    return _bool_of(buf[pos]), nxt


def _r_char(buf: bytes, pos: int, end: int, depth: int, t: FieldType) -> tuple[Any, int]:
    nxt = _fixed(buf, pos, end, 1, t)
    return chr(buf[pos]), nxt


def _r_string(buf: bytes, pos: int, end: int, depth: int, t: FieldType) -> tuple[Any, int]:
    start, nxt = _sized(buf, pos, end, t)
    if nxt == start or buf[nxt - 1] != 0:
        raise _fail(f"STRING at byte {start} does not end with NUL")
    # OpenMAMA hands out a C string: the text ends at the first NUL.
    stop = buf.find(b"\0", start, nxt)
    return buf[start:stop].decode("utf-8", "surrogateescape"), nxt


def _r_opaque(buf: bytes, pos: int, end: int, depth: int, t: FieldType) -> tuple[Any, int]:
    start, nxt = _sized(buf, pos, end, t)
    return buf[start:nxt], nxt


def _time_at(buf: bytes, pos: int) -> Time:
    seconds, nanos, precision, hints = _TIME.unpack_from(buf, pos)
    if nanos >= 1_000_000_000:
        raise _fail(f"TIME at byte {pos} has {nanos} nanoseconds (over one second)")
    # OpenMAMA's reader (mamaDateTime_setWithHints) adds HAS_DATE past one day.
    if (seconds & _U32_MAX) > 86400:
        hints |= Time.HAS_DATE
    return Time(seconds, nanos // 1000, precision, hints)


def _r_time(buf: bytes, pos: int, end: int, depth: int, t: FieldType) -> tuple[Any, int]:
    nxt = _fixed(buf, pos, end, 32, t)
    return _time_at(buf, pos), nxt


def _r_price(buf: bytes, pos: int, end: int, depth: int, t: FieldType) -> tuple[Any, int]:
    nxt = _fixed(buf, pos, end, 16, t)
    value, hints = _PRICE.unpack_from(buf, pos)
    return Price(value, hints), nxt


def _r_msg(buf: bytes, pos: int, end: int, depth: int, t: FieldType) -> tuple[Any, int]:
    start, nxt = _sized(buf, pos, end, t)
    return _decode(buf, start, nxt, depth + 1), nxt


def _vector_reader(fmt: str) -> Callable[[bytes, int, int, int, FieldType], tuple[Any, int]]:
    size = struct.calcsize(fmt)

    def read(buf: bytes, pos: int, end: int, depth: int, t: FieldType) -> tuple[Any, int]:
        start, nxt = _sized(buf, pos, end, t)
        n, rest = divmod(nxt - start, size)
        if rest:
            raise _fail(f"{t.name} of {nxt - start} bytes is not a whole number of elements")
        return list(struct.unpack_from(f"<{n}{fmt}", buf, start)), nxt

    return read


def _r_vbool(buf: bytes, pos: int, end: int, depth: int, t: FieldType) -> tuple[Any, int]:
    start, nxt = _sized(buf, pos, end, t)
    return [_bool_of(b) for b in buf[start:nxt]], nxt


def _r_vchar(buf: bytes, pos: int, end: int, depth: int, t: FieldType) -> tuple[Any, int]:
    start, nxt = _sized(buf, pos, end, t)
    return [chr(b) for b in buf[start:nxt]], nxt


def _r_vstring(buf: bytes, pos: int, end: int, depth: int, t: FieldType) -> tuple[Any, int]:
    start, nxt = _sized(buf, pos, end, t)
    if nxt == start:
        return [], nxt
    if buf[nxt - 1] != 0:
        raise _fail(f"VECTOR_STRING at byte {start} does not end with NUL")
    parts = buf[start : nxt - 1].split(b"\0")
    return [p.decode("utf-8", "surrogateescape") for p in parts], nxt


def _r_vmsg(buf: bytes, pos: int, end: int, depth: int, t: FieldType) -> tuple[Any, int]:
    start, nxt = _sized(buf, pos, end, t)
    out = []
    p = start
    while p < nxt:
        s, e = _sized(buf, p, nxt, t)
        out.append(_decode(buf, s, e, depth + 1))
        p = e
    return out, nxt


def _r_vtime(buf: bytes, pos: int, end: int, depth: int, t: FieldType) -> tuple[Any, int]:
    start, nxt = _sized(buf, pos, end, t)
    if (nxt - start) % 32:
        raise _fail(f"VECTOR_TIME of {nxt - start} bytes is not a whole number of 32-byte TIMEs")
    return [_time_at(buf, p) for p in range(start, nxt, 32)], nxt


def _r_vprice(buf: bytes, pos: int, end: int, depth: int, t: FieldType) -> tuple[Any, int]:
    start, nxt = _sized(buf, pos, end, t)
    if (nxt - start) % 16:
        raise _fail(f"VECTOR_PRICE of {nxt - start} bytes is not a whole number of PRICEs")
    return [Price(*_PRICE.unpack_from(buf, p)) for p in range(start, nxt, 16)], nxt


_Reader = Callable[[bytes, int, int, int, FieldType], tuple[Any, int]]
_READERS: Final[dict[FieldType, _Reader]] = {
    _FT.BOOL: _r_bool, _FT.CHAR: _r_char, _FT.STRING: _r_string, _FT.OPAQUE: _r_opaque,
    _FT.TIME: _r_time, _FT.PRICE: _r_price, _FT.MSG: _r_msg,
    _FT.VECTOR_BOOL: _r_vbool, _FT.VECTOR_CHAR: _r_vchar, _FT.VECTOR_STRING: _r_vstring,
    _FT.VECTOR_MSG: _r_vmsg, _FT.VECTOR_TIME: _r_vtime, _FT.VECTOR_PRICE: _r_vprice,
    **{t: _vector_reader(f) for t, f in _VECTOR_FMT.items()},
}

# Indexed by type byte; None for the fixed-width scalars (struct-packed inline) and unknowns.
# The compiled twin (_fast.pyx) uses these for the vector types, so that both apply
# one set of rules to them.
WRITER_BY_ID: Final[list[Any]] = [None] * 256
READER_BY_ID: Final[list[Any]] = [None] * 256
for _t, _w in _WRITERS.items():
    WRITER_BY_ID[_t] = _w
for _t, _r in _READERS.items():
    READER_BY_ID[_t] = _r
