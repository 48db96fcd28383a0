"""Naming frames (SPEC §3): the fixed 882-byte ``_NAMING`` messages of OZ's discovery.

Pure code: bytes in, values out. No sockets, no clock.

Layout (all text fields NUL-padded; the last byte of each text field is always NUL)::

    offset  size  field
         0   257  subject, the text ``_NAMING``
       257     1  type: ``C`` connect, ``c`` beacon, ``D`` disconnect, ``W`` welcome
       258   257  program name
       515    65  host name
       580     8  pid, signed 64-bit little-endian
       588    37  node uuid (36 chars + NUL); empty in ``W``
       625   257  endpoint: the node's data PUB address; in ``W`` the nsd's XSUB address

Encoding policy for text that does not fit: ``program`` and ``host`` are only
informational, so they are truncated (at a UTF-8 character boundary, leaving the
terminating NUL), as OZ's ``strncpy`` does. ``uuid`` and ``endpoint`` are addresses;
a truncated address would announce the wrong peer, so too-long values raise
:class:`aoz.errors.EncodeError`. Text containing a NUL byte is refused too.

The same fields travel in UDP beacons (SPEC §6, nsd-free discovery): see
:func:`encode_beacon` / :func:`decode_beacon`.

>>> frame = NamingFrame(NamingType.CONNECT, "app", "host1", 42,
...                     "3669840e-d043-11ea-adc2-fcaa146e6b01", "tcp://127.0.0.1:44928")
>>> data = encode_naming(frame)
>>> len(data), data[:8], data[257:258]
(882, b'_NAMING\\x00', b'C')
>>> decode_naming(data) == frame
True
"""

from __future__ import annotations

import struct
from enum import Enum
from typing import NamedTuple

from .._mesh.endpoints import is_oz_endpoint
from ..errors import DecodeError, EncodeError
from .frames import is_uuid as is_protocol_uuid

__all__ = [
    "BEACON_SIZE",
    "BEACON_VERSION",
    "FRAME_SIZE",
    "SUBJECT",
    "NamingFrame",
    "NamingType",
    "decode_beacon",
    "decode_naming",
    "encode_beacon",
    "encode_naming",
    "is_tcp_endpoint",
    "is_uuid",
]

SUBJECT = b"_NAMING"
FRAME_SIZE = 882

# (offset, size) of each field, SPEC §3
_SUBJECT = (0, 257)
_TYPE = 257
_PROGRAM = (258, 257)
_HOST = (515, 65)
_PID = (580, 8)
_UUID = (588, 37)
_ENDPOINT = (625, 257)

_PID_STRUCT = struct.Struct("<q")
_SUBJECT_FIELD = SUBJECT.ljust(_SUBJECT[1], b"\0")


class NamingType(bytes, Enum):
    """The type byte at offset 257."""

    CONNECT = b"C"
    BEACON = b"c"
    DISCONNECT = b"D"
    WELCOME = b"W"


_TYPES = {t.value: t for t in NamingType}


class NamingFrame(NamedTuple):
    """One decoded naming frame. ``uuid`` is empty in a welcome (``W``)."""

    type: NamingType
    program: str
    host: str
    pid: int
    uuid: str
    endpoint: str


def _text_field(name: str, value: str, size: int, *, truncate: bool) -> bytes:
    raw = value.encode("utf-8")
    if b"\0" in raw:
        raise EncodeError(f"naming frame field {name} must not contain a NUL character")
    if len(raw) >= size:
        if not truncate:
            raise EncodeError(
                f"naming frame field {name} is {len(raw)} bytes; at most {size - 1} fit "
                f"({value[:40]!r}...)"
            )
        # cut at a character boundary so the field stays valid UTF-8
        raw = raw[: size - 1].decode("utf-8", errors="ignore").encode("utf-8")
    return raw.ljust(size, b"\0")


def encode_naming(frame: NamingFrame) -> bytes:
    """Encode a naming frame into exactly 882 bytes.

    ``program`` and ``host`` are truncated when too long; a too-long ``uuid`` or
    ``endpoint``, a NUL inside any text or a pid outside signed 64 bits raise
    :class:`aoz.errors.EncodeError`.
    """
    ftype = NamingType(frame.type)
    try:
        pid = _PID_STRUCT.pack(frame.pid)
    except struct.error as exc:
        raise EncodeError(f"naming frame pid {frame.pid!r} is not a signed 64-bit integer") from exc
    out = b"".join(
        (
            _SUBJECT_FIELD,
            ftype.value,
            _text_field("program", frame.program, _PROGRAM[1], truncate=True),
            _text_field("host", frame.host, _HOST[1], truncate=True),
            pid,
            _text_field("uuid", frame.uuid, _UUID[1], truncate=False),
            _text_field("endpoint", frame.endpoint, _ENDPOINT[1], truncate=False),
        )
    )
    assert len(out) == FRAME_SIZE
    return out


def _decode_text(data: bytes, name: str, offset: int, size: int) -> str:
    field = data[offset : offset + size]
    end = field.find(b"\0")
    if end < 0:
        raise DecodeError(
            f"naming frame field {name} (bytes {offset}..{offset + size}) has no NUL terminator",
            what="naming frame",
        )
    try:
        return field[:end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(
            f"naming frame field {name} is not valid UTF-8 text", what="naming frame"
        ) from exc


def decode_naming(data: bytes) -> NamingFrame:
    """Decode an 882-byte naming frame.

    Raises :class:`aoz.errors.DecodeError` (``what="naming frame"``) for a wrong
    size, a subject other than ``_NAMING``, an unknown type byte, a text field
    without its NUL terminator or one that is not UTF-8. Bytes after a field's
    terminator are ignored (OZ does not promise to zero them).
    """
    if len(data) != FRAME_SIZE:
        raise DecodeError(
            f"naming frame must be {FRAME_SIZE} bytes, got {len(data)}", what="naming frame"
        )
    data = bytes(data)
    subject_end = data.find(b"\0", 0, _SUBJECT[1])
    if subject_end < 0 or data[:subject_end] != SUBJECT:
        raise DecodeError(
            f"naming frame subject is not {SUBJECT.decode()}: {data[:16]!r}", what="naming frame"
        )
    ftype = _TYPES.get(data[_TYPE : _TYPE + 1])
    if ftype is None:
        raise DecodeError(
            f"naming frame has unknown type byte {data[_TYPE : _TYPE + 1]!r} "
            "(expected C, c, D or W)",
            what="naming frame",
        )
    (pid,) = _PID_STRUCT.unpack_from(data, _PID[0])
    return NamingFrame(
        type=ftype,
        program=_decode_text(data, "program", *_PROGRAM),
        host=_decode_text(data, "host", *_HOST),
        pid=pid,
        uuid=_decode_text(data, "uuid", *_UUID),
        endpoint=_decode_text(data, "endpoint", *_ENDPOINT),
    )


# ---------------------------------------------------------------- UDP beacons (SPEC §6)

#: datagram version understood by this module
BEACON_VERSION = 1
_BEACON_HEAD = struct.Struct("<H16sc")
#: the beacon carries the naming frame's fields from ``program`` to the end
BEACON_SIZE = _BEACON_HEAD.size + FRAME_SIZE - _PROGRAM[0]


def encode_beacon(frame: NamingFrame, node_id: bytes) -> bytes:
    """Encode a UDP discovery datagram: version (u16 LE), 16-byte node id, type, fields.

    The fields after the type byte are laid out exactly as in a naming frame from
    offset 258 (program, host, pid, uuid, endpoint): 643 bytes in all.

    >>> f = NamingFrame(NamingType.BEACON, "p", "h", 1,
    ...                 "3669840e-d043-11ea-adc2-fcaa146e6b01", "tcp://127.0.0.1:1")
    >>> decode_beacon(encode_beacon(f, bytes(16)))[0] == f
    True
    """
    if len(node_id) != 16:
        raise EncodeError(f"beacon node id must be 16 bytes, got {len(node_id)}")
    body = encode_naming(frame)
    return _BEACON_HEAD.pack(BEACON_VERSION, node_id, body[_TYPE : _TYPE + 1]) + body[_PROGRAM[0] :]


def decode_beacon(data: bytes) -> tuple[NamingFrame, bytes]:
    """Decode a UDP discovery datagram into ``(frame, node_id)``.

    Raises :class:`aoz.errors.DecodeError` (``what="beacon"``) for a wrong size or
    version, and for any field error :func:`decode_naming` would report.
    """
    if len(data) != BEACON_SIZE:
        raise DecodeError(f"beacon must be {BEACON_SIZE} bytes, got {len(data)}", what="beacon")
    version, node_id, ftype = _BEACON_HEAD.unpack_from(data)
    if version != BEACON_VERSION:
        raise DecodeError(
            f"beacon version {version} is not supported (expected {BEACON_VERSION})", what="beacon"
        )
    frame = decode_naming(_SUBJECT_FIELD + ftype + bytes(data[_BEACON_HEAD.size :]))
    return frame, node_id


# ---------------------------------------------------------------- validation

def is_uuid(text: str) -> bool:
    """Whether ``text`` is a hyphenated 36-character uuid (either case: other OZ
    implementations may write uppercase hex; the rule is :func:`frames.is_uuid`'s).

    >>> is_uuid("3669840e-d043-11ea-adc2-fcaa146e6b01"), is_uuid("x")
    (True, False)
    """
    return is_protocol_uuid(text.lower())


def is_tcp_endpoint(text: str) -> bool:
    """Whether ``text`` is an endpoint an OZ program may connect to: ``tcp://host:port``.

    The host is a name, an IPv4 address or a bracketed IPv6 address (no wildcard),
    the port a number within 1..65535. The rule is :func:`aoz._mesh.endpoints.is_oz_endpoint`'s;
    where naming frames may also carry ``ipc://`` endpoints is said there.

    >>> is_tcp_endpoint("tcp://127.0.0.1:5756"), is_tcp_endpoint("ipc:///tmp/x")
    (True, False)
    >>> is_tcp_endpoint("tcp://*:5756"), is_tcp_endpoint("tcp://h:0")
    (False, False)
    """
    return is_oz_endpoint(text)
