"""Message headers in aoz's payload header, and where a payload's data starts. Pure.

aoz's first payload byte (OZ programs never parse it: see :mod:`aoz._protocol.sequence`
for the OZ-safe rule) is a C0 control byte whose bits say what follows it::

    bits 0-1  codec (raw, msgpack, JSON, text)
    bit 2     0x04: a sequence header follows (publisher id u64, number u32; 12 bytes)
    bit 3     0x08: a header block follows (after the sequence header, if any):
              length (u16, little-endian) | msgpack map of str -> str
    0x10..    not aoz's: a foreign payload, delivered whole

So a payload is ``first | [sequence] | [headers] | body``, and every first byte aoz
builds stays in 0x00..0x0F. Headers travel between aoz nodes only (NATS-style
key/value metadata: tracing context, content types, correlation ids); an OZ program
refuses the payload's first byte before it could read them.

>>> block = encode_block({"traceparent": "00-ab-cd-01"})
>>> p = bytes((0x01 | HEADERS,)) + block + b"\\x90"
>>> data_start(p, 0), parse_headers(p, 0)
(28, {'traceparent': '00-ab-cd-01'})
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final

import msgspec

from ..errors import DecodeError, EncodeError, UsageTypeError
from .sequence import FLAG, HEADER_LEN

__all__ = ["HEADERS", "MAX_HEADERS", "add_headers", "data_start", "encode_block",
           "is_aoz_flagged", "parse_headers", "sequenced"]

#: set in the first payload byte when a header block follows
HEADERS: Final = 0x08
#: the largest header block (its length is a u16)
MAX_HEADERS: Final = 0xFFFF
_CODECS: Final = 4
_LEN = struct.Struct("<H")
_ENC = msgspec.msgpack.Encoder()
_DEC = msgspec.msgpack.Decoder(dict[str, str])


def is_aoz_flagged(first: int) -> bool:
    """Whether ``first`` is aoz's codec byte with flags (0x04..0x0F)."""
    return _CODECS <= first < 0x10


def sequenced(payload: bytes, start: int = 0) -> bool:
    """Whether the payload at ``start`` carries a (complete) sequence header."""
    return (len(payload) >= start + HEADER_LEN and
            is_aoz_flagged(payload[start]) and bool(payload[start] & FLAG))


def data_start(frame: bytes, start: int) -> int:
    """Where the data of the payload at ``frame[start:]`` begins: after aoz's first byte,
    its sequence header and its header block, when it has them; at ``start`` for
    payloads that are not aoz's (omnm, foreign bytes) or whose aoz header is cut short.

    >>> data_start(b"S\\0\\x01\\0\\x01ab", 4), data_start(b"S\\0\\x01\\0Oab", 4)
    (5, 4)
    """
    n = len(frame)
    if n <= start:
        return start
    first = frame[start]
    if first < _CODECS:
        return start + 1
    if first >= 0x10:
        return start
    pos = start + 1 + (HEADER_LEN - 1 if first & FLAG else 0)
    if first & HEADERS:
        if n < pos + 2:
            return start
        pos += 2 + _LEN.unpack_from(frame, pos)[0]
    return pos if pos <= n else start


def encode_block(headers: Mapping[str, str]) -> bytes:
    """The header block (length, then the msgpack map) of ``headers``."""
    for k, v in headers.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise UsageTypeError(
                f"headers map str to str; got {type(k).__name__} -> {type(v).__name__} "
                f"for {k!r}"
            )
    try:
        body = _ENC.encode(dict(headers))
    except UnicodeEncodeError as exc:
        raise EncodeError(f"a header cannot be encoded as UTF-8: {exc}") from None
    if len(body) > MAX_HEADERS:
        raise EncodeError(f"headers take {len(body)} bytes; at most {MAX_HEADERS} fit")
    return _LEN.pack(len(body)) + body


def add_headers(payload: bytes, headers: Mapping[str, str], seq_len: int = 0) -> bytes:
    """``payload`` (an aoz codec byte, ``seq_len`` bytes of sequence header, the body)
    with a header block: the first byte gets :data:`HEADERS`, the block goes before the
    body. Raises EncodeError for a payload that is not aoz's (omnm, Verbatim)."""
    if not payload or payload[0] >= 0x10 or payload[0] & HEADERS:
        raise EncodeError(
            "headers ride in aoz's payload header: they need one of aoz's codecs, not an "
            "omnm or Verbatim payload (which goes out as it is)"
        )
    cut = 1 + seq_len
    return b"".join((bytes((payload[0] | HEADERS,)), payload[1:cut], encode_block(headers),
                     payload[cut:]))


def parse_headers(frame: bytes, start: int) -> dict[str, str]:
    """The headers of the payload at ``frame[start:]`` (``{}`` when it has none);
    raises DecodeError for a header block that is not a str -> str map."""
    if len(frame) <= start or not is_aoz_flagged(frame[start]) or not frame[start] & HEADERS:
        return {}
    pos = start + 1 + (HEADER_LEN - 1 if frame[start] & FLAG else 0)
    if len(frame) < pos + 2:
        return {}
    (n,) = _LEN.unpack_from(frame, pos)
    if len(frame) < pos + 2 + n:
        return {}
    try:
        return _DEC.decode(frame[pos + 2 : pos + 2 + n])
    except msgspec.DecodeError as exc:
        raise DecodeError(f"malformed message headers: {exc}", what="headers") from None
