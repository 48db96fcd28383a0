"""Payload codecs: the first payload byte names how the rest is encoded. Pure.

=====  =============  ===============================================
id     codec          chosen by :func:`encode_payload` for
=====  =============  ===============================================
0x00   ``RAW``        ``bytes``, ``bytearray``, ``memoryview``
0x01   ``MSGPACK``    anything else (the default), via msgspec
0x02   ``JSON``       ``codec=Codec.JSON`` (or ``default=Codec.JSON``)
0x03   ``TEXT``       ``str`` (UTF-8)
``O``  ``OMNM``       an :class:`aoz.omnm.Message` (or ``codec=Codec.OMNM``)
=====  =============  ===============================================

Every first byte aoz emits on its own is a C0 control byte (0x00-0x07; see
:mod:`aoz._protocol.sequence` for why: OZ programs crash on 0x7F and above). OMNM
payloads are OpenMAMA's own format, as OZ programs send it: the ``'O'`` that starts
every omnm message is its payload id, so aoz adds no byte of its own and OZ programs
read the payload as they read each other's. :class:`Verbatim` bytes are sent exactly as
given (any other OpenMAMA payload bridge's bytes).

An empty payload is raw and empty. A payload whose first byte is none of these (an OZ
peer's own payload, say) is :attr:`Codec.UNKNOWN` and is delivered whole, as raw bytes:
it is never dropped. msgspec errors are translated here into :mod:`aoz.errors`.

Hostile input
-------------
Decoding is bounded so that no payload from the network can raise anything but
:class:`aoz.errors.DecodeError`: a body larger than :data:`MAX_BODY` is refused before
it is parsed, and containers nested deeper than :data:`MAX_DEPTH` are refused (msgspec
itself would raise ``RecursionError`` around 1,000 levels, and a value a few hundred
levels deep still breaks ``repr``, rich and re-encoding in consumers). The depth check
costs nothing for bodies shorter than :data:`MAX_DEPTH` bytes (each level takes at
least one byte) and one pass over the containers of larger untyped values.
"""

from __future__ import annotations

import datetime
import enum
from typing import Any, Final, TypeVar

import msgspec

from .. import omnm
from ..errors import DecodeError, EncodeError

__all__ = [
    "AOZ_CODEC_IDS",
    "MAX_BODY",
    "MAX_DEPTH",
    "Codec",
    "Verbatim",
    "check_depth",
    "decode_payload",
    "encode_payload",
    "split_payload",
]

#: deepest nesting of lists/maps a decoded msgpack or JSON payload may have
MAX_DEPTH: Final = 64
#: largest msgpack/JSON/text body decoded, in bytes (the raw bytes stay readable)
MAX_BODY: Final = 256 * 1024 * 1024

T = TypeVar("T")


class Codec(enum.IntEnum):
    """Payload codec ids (the first payload byte); ``UNKNOWN`` is never sent."""

    UNKNOWN = -1
    RAW = 0
    MSGPACK = 1
    JSON = 2
    TEXT = 3
    OMNM = 0x4F  # 'O': OpenMAMA's omnm payload, which carries its own id byte


#: payload first bytes below this are aoz's codec byte (stripped by ``msg.data``)
AOZ_CODEC_IDS: Final = 4


class Verbatim(bytes):
    """Payload bytes sent exactly as given, with no aoz codec byte.

    For payloads in another OpenMAMA payload bridge's format (or anything a foreign
    program expects byte for byte). Receivers that are aoz nodes see them by their
    first byte: ``'O'`` decodes as omnm, 0x00-0x03 as aoz codecs, others as raw bytes.

    .. warning:: Verbatim is the one way aoz sends a first payload byte that the caller
       chose, and OZ/OpenMAMA programs trust that byte: they index a 127-entry table of
       payload bridges with it, unchecked. A first byte of 0x7F or more crashes them
       (undefined behaviour in every OpenMAMA program), and a printable one hands the
       bytes to that payload bridge's parser. Start Verbatim payloads that OZ programs
       may receive with the payload id of the bridge that should read them (see
       docs/PROTOCOL.md, "The OZ-safe first-byte rule").

    >>> encode_payload(Verbatim(b"Jqpid..."))
    b'Jqpid...'
    """

    __slots__ = ()


_ID_RAW: Final = b"\x00"
_ID_MSGPACK: Final = b"\x01"
_ID_JSON: Final = b"\x02"
_ID_TEXT: Final = b"\x03"
_BY_ID: Final = (Codec.RAW, Codec.MSGPACK, Codec.JSON, Codec.TEXT)
_BYTES_LIKE: Final = (bytes, bytearray, memoryview)

# One encoder/decoder per codec, reused for every message (msgspec's perf advice).
_MSGPACK_ENC: Final = msgspec.msgpack.Encoder()
_JSON_ENC: Final = msgspec.json.Encoder()
_MSGPACK_DEC: Final = msgspec.msgpack.Decoder()
_JSON_DEC: Final = msgspec.json.Decoder()

_TYPED_CACHE_MAX: Final = 128
_typed: dict[tuple[Codec, Any], msgspec.msgpack.Decoder[Any] | msgspec.json.Decoder[Any]] = {}


def _as_codec(codec: object, what: str) -> Codec:
    if isinstance(codec, Codec):
        return codec
    if isinstance(codec, str) and codec.upper() in Codec.__members__:
        return Codec[codec.upper()]  # "omnm", "json"... as in Settings.default_codec
    try:
        return Codec(codec)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        names = ", ".join(c.name for c in (*_BY_ID, Codec.OMNM))
        raise EncodeError(f"{what} {codec!r} is not a payload codec; use one of {names}") from None


def encode_payload(
    data: object, codec: Codec | None = None, *, default: Codec = Codec.MSGPACK
) -> bytes:
    """Encode ``data`` as a payload: the codec id byte, then the body.

    With ``codec=None`` the codec follows the type: bytes-like -> RAW, ``str`` -> TEXT,
    anything else -> ``default``. MSGPACK and JSON take any value msgspec can encode
    (dicts, lists, numbers, ``msgspec.Struct``, dataclasses...). Raises
    :class:`aoz.errors.EncodeError` when ``data`` does not fit the codec.

    >>> encode_payload(b"hi"), encode_payload("hi"), encode_payload({"a": 1})
    (b'\\x00hi', b'\\x03hi', b'\\x01\\x81\\xa1a\\x01')
    """
    if codec is None:
        if type(data) is Verbatim:
            return bytes(data)
        if isinstance(data, omnm.Message):
            return omnm.encode(data)
        if isinstance(data, bytes):
            return _ID_RAW + data
        if isinstance(data, str):
            return _ID_TEXT + _encode_text(data)
        if isinstance(data, bytearray | memoryview):
            return _ID_RAW + bytes(data)
        codec = _as_codec(default, "default codec")
    else:
        codec = _as_codec(codec, "codec")
    if codec is Codec.MSGPACK:
        return _ID_MSGPACK + _encode_msgspec(_MSGPACK_ENC, data, "msgpack")
    if codec is Codec.OMNM:
        return _encode_omnm(data)
    if codec is Codec.JSON:
        return _ID_JSON + _encode_msgspec(_JSON_ENC, data, "JSON")
    if codec is Codec.RAW:
        if not isinstance(data, _BYTES_LIKE):
            raise EncodeError(
                f"the RAW codec needs bytes, bytearray or memoryview, not {type(data).__name__}; "
                "encode it first or use codec=Codec.MSGPACK / Codec.JSON / Codec.TEXT"
            )
        return _ID_RAW + bytes(data)
    if codec is Codec.TEXT:
        if not isinstance(data, str):
            raise EncodeError(
                f"the TEXT codec needs a str, not {type(data).__name__}; "
                "use codec=Codec.RAW for bytes or Codec.MSGPACK / Codec.JSON for objects"
            )
        return _ID_TEXT + _encode_text(data)
    raise EncodeError(
        f"cannot encode with codec {codec.name}; use RAW, MSGPACK, JSON, TEXT or OMNM "
        "(UNKNOWN only describes payloads received from others; send those as Verbatim)"
    )


_OMNM_PASSTHROUGH: Final = (bytes, bytearray, memoryview, datetime.datetime, omnm.Time,
                            omnm.Price, omnm.Message, omnm.Typed)


def _encode_omnm(data: object) -> bytes:
    """An omnm payload (no aoz byte: its ``'O'`` is the id) for a Message, dict or Fields.

    Already-encoded omnm bytes are checked and sent as they are; a ``msgspec.Struct`` or
    dataclass is sent as the dict of its fields.
    """
    if isinstance(data, omnm.Message | dict):
        return omnm.encode(data)
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            omnm.decode(data)
        except DecodeError as exc:
            raise EncodeError(
                f"these bytes are not an omnm message ({exc}); send foreign bytes as "
                "aoz.Verbatim(data)"
            ) from None
        return bytes(data)
    if isinstance(data, list | tuple) and all(isinstance(f, omnm.Field) for f in data):
        return omnm.encode(data)
    try:
        plain = msgspec.to_builtins(data, builtin_types=_OMNM_PASSTHROUGH)
    except (TypeError, ValueError) as exc:
        raise EncodeError(f"cannot encode a {type(data).__name__} as omnm: {exc}") from None
    if not isinstance(plain, dict):
        raise EncodeError(
            f"an omnm payload is a message of named fields; got a {type(data).__name__}: "
            "send an omnm.Message, a dict, a msgspec.Struct or a dataclass"
        )
    return omnm.encode(plain)


def _encode_text(data: str) -> bytes:
    try:
        return data.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodeError(
            f"text cannot be encoded as UTF-8 ({exc.reason} at index {exc.start}); "
            "remove lone surrogates or send bytes with Codec.RAW"
        ) from None


def _encode_msgspec(
    encoder: msgspec.msgpack.Encoder | msgspec.json.Encoder, data: object, name: str
) -> bytes:
    try:
        return encoder.encode(data)
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
        raise EncodeError(
            f"cannot encode a {type(data).__name__} as {name}: {exc}; send dicts, lists, "
            "numbers, str, msgspec.Struct or dataclasses, or bytes with codec=Codec.RAW"
        ) from None


def split_payload(payload: bytes) -> tuple[Codec, bytes]:
    """Split a payload into its codec and body.

    An empty payload is ``(RAW, b"")``; an unknown first byte gives ``(UNKNOWN, payload)``
    with the payload whole.

    >>> split_payload(b"\\x03hi"), split_payload(b"\\x7fOZ")
    ((<Codec.TEXT: 3>, b'hi'), (<Codec.UNKNOWN: -1>, b'\\x7fOZ'))
    """
    if not payload:
        return Codec.RAW, b""
    first = payload[0]
    if first < 4:
        return _BY_ID[first], payload[1:]
    if first == 0x4F:
        return Codec.OMNM, payload  # omnm's own header starts with the 'O'
    return Codec.UNKNOWN, payload


def _typed_decoder(
    codec: Codec, type_: Any
) -> msgspec.msgpack.Decoder[Any] | msgspec.json.Decoder[Any]:
    try:
        key = (codec, type_)
        hit = _typed.get(key)
    except TypeError:  # unhashable type expression: build it, don't cache it
        key, hit = None, None
    if hit is not None:
        return hit
    try:
        dec: msgspec.msgpack.Decoder[Any] | msgspec.json.Decoder[Any] = (
            msgspec.msgpack.Decoder(type_)
            if codec is Codec.MSGPACK
            else msgspec.json.Decoder(type_)
        )
    except (TypeError, ValueError) as exc:
        raise DecodeError(
            f"cannot decode into {type_!r}: {exc}; use a type msgspec supports "
            "(msgspec.Struct, dataclass, dict[str, int], list[float], ...)",
            what="payload",
        ) from None
    if key is not None:
        if len(_typed) >= _TYPED_CACHE_MAX:
            del _typed[next(iter(_typed))]  # oldest first; the set of types is usually tiny
        _typed[key] = dec
    return dec


def decode_payload(codec: Codec, body: bytes, type: type[T] | None = None) -> Any:
    """Decode a payload body (as returned by :func:`split_payload`).

    RAW and UNKNOWN give ``bytes``; TEXT gives ``str``; MSGPACK and JSON give Python
    objects, or an instance of ``type`` (a ``msgspec.Struct``, dataclass, ``int``,
    ``dict[str, float]``...) when it is given. Raises :class:`aoz.errors.DecodeError`
    when the body is invalid or does not fit ``type``.

    >>> decode_payload(*split_payload(encode_payload({"a": 1})))
    {'a': 1}
    """
    if codec is Codec.MSGPACK or codec is Codec.JSON:
        name = "msgpack" if codec is Codec.MSGPACK else "JSON"
        target = "" if type is None else f" into {_type_name(type)}"
        if len(body) > MAX_BODY:
            raise DecodeError(
                f"{name} payload of {len(body)} bytes is larger than {MAX_BODY}; read msg.data",
                what="payload",
            )
        if type is None:
            dec: msgspec.msgpack.Decoder[Any] | msgspec.json.Decoder[Any] = (
                _MSGPACK_DEC if codec is Codec.MSGPACK else _JSON_DEC
            )
        else:
            dec = _typed_decoder(codec, type)
        try:
            value = dec.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
            raise DecodeError(f"invalid {name} payload{target}: {exc}", what="payload") from None
        except RecursionError:
            raise DecodeError(
                f"{name} payload{target} is nested too deeply (more than {MAX_DEPTH} levels)",
                what="payload",
            ) from None
        if len(body) > MAX_DEPTH and not check_depth(value):
            raise DecodeError(
                f"{name} payload{target} is nested more than {MAX_DEPTH} levels deep",
                what="payload",
            )
        return value
    if codec is Codec.TEXT:
        if type is None or type is str:
            try:
                return body.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DecodeError(
                    f"text payload is not valid UTF-8: {exc.reason} at byte {exc.start}",
                    what="payload",
                ) from None
        if type is bytes:
            return bytes(body)
        raise DecodeError(
            f"the payload is text (codec TEXT); it decodes to str, not {_type_name(type)}",
            what="payload",
        )
    if codec is Codec.OMNM:
        return _decode_omnm(body, type)
    if codec is Codec.RAW or codec is Codec.UNKNOWN:
        if type is None or type is bytes:
            return bytes(body)
        raise DecodeError(
            f"the payload is raw bytes (codec {codec.name}), not {_type_name(type)}; "
            "read msg.data, or decode with type=None or bytes",
            what="payload",
        )
    raise DecodeError(f"{codec!r} is not a payload codec", what="payload")


def _decode_omnm(body: bytes, type: Any) -> Any:
    """omnm bytes as an :class:`aoz.omnm.Message`, ``bytes``, ``dict`` or a msgspec type."""
    if type is bytes:
        return bytes(body)
    message = omnm.decode(body)
    if type is None or type is omnm.Message:
        return message
    if type is dict:
        return message.to_dict()
    try:
        # TIME -> datetime and PRICE -> float, as a Struct's annotations expect them
        return msgspec.convert(message.to_dict(plain=True), type, strict=False)
    except (msgspec.ValidationError, TypeError) as exc:
        raise DecodeError(
            f"omnm payload does not fit {_type_name(type)}: {exc}", what="payload"
        ) from None


def _type_name(t: object) -> str:
    return str(getattr(t, "__name__", t))


_SCALARS: Final = frozenset((str, int, float, bool, bytes, type(None)))


def check_depth(value: object, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests lists, tuples, dicts and Structs at most ``limit`` deep.

    Iterative (a deep value cannot exhaust the stack) and cheap for flat data: a
    container holding only scalars is checked in one pass in C.

    >>> check_depth([[1]], 2), check_depth([[[1]]], 2)
    (True, False)
    """
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        obj, depth = stack.pop()
        if isinstance(obj, dict):
            items: Any = obj.values()
        elif isinstance(obj, list | tuple | set | frozenset):
            items = obj
        elif isinstance(obj, msgspec.Struct):
            items = [getattr(obj, f, None) for f in obj.__struct_fields__]
        else:
            continue
        depth += 1
        if depth > limit:
            return False
        if _SCALARS.issuperset(map(type, items)):  # flat: one pass in C
            continue
        stack.extend((item, depth) for item in items if type(item) not in _SCALARS)
    return True
