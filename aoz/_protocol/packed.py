"""Packed payloads: several rows of one subject in one publish frame. Pure.

A publisher that sends many small messages on few subjects (the Spark sink's sidecar:
:mod:`aoz.spark.sidecar`) may pack them, so that one ZeroMQ frame carries up to
:data:`MAX_ROWS` rows::

    0x10|codec (1) | rows n (u32, little-endian) | offsets (n + 1 u32, little-endian)
    | bodies

Row ``i`` is ``bodies[offsets[i] - offsets[0] : offsets[i + 1] - offsets[0]]`` (the
offsets need not start at 0, so a sender can copy a slice of a bigger row table's
offsets as they are); ``offsets[n] - offsets[0]`` is the length of the bodies.

The first byte is a C0 control byte aoz owns (0x10..0x13: bit 0x10 says "packed", bits
0-1 the rows' codec), so an OZ program refuses the payload before it reads anything
(the OZ-safe first-byte rule, :mod:`aoz._protocol.sequence`). A packed payload carries no
sequence header and no header block.

Packing is a transport detail: the receiving aoz node unpacks a packed frame into one
:class:`aoz.Message` per row (each with the frame's subject and the row's codec byte
and body, in order; :meth:`aoz._mesh.subscription.Subscription.push_many`), so ``async for``
sees the same messages as if each row had been published on its own, and the
subscription counts (``received``, ``dropped``) count rows. A packed payload that does
not follow this layout is delivered whole, as a foreign payload (``Codec.UNKNOWN``),
never dropped. aoz nodes older than this format deliver packed frames whole too.

>>> p = pack_rows(1, [b"\\x01", b"\\x02\\x03"])
>>> p[:1], list(unpack_rows(p, 0))
(b'\\x11', [(1, 17, 18), (1, 18, 20)])
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from itertools import accumulate, pairwise
from typing import Final

from ..errors import DecodeError, EncodeError

__all__ = ["MAX_ROWS", "PACKED", "is_packed", "pack_rows", "pack_span", "row_bounds",
           "unpack_rows"]

#: the first byte's "packed" bit (with the codec in bits 0-1: 0x10..0x13)
PACKED: Final = 0x10
#: the most rows one packed payload may carry
MAX_ROWS: Final = 65_535
_CODECS: Final = 4  # aoz's codec ids 0..3 (aoz._protocol.codecs.AOZ_CODEC_IDS)
_U32: Final = struct.Struct("<I")


def is_packed(first: int) -> bool:
    """Whether a payload's first byte says the payload is packed rows (0x10..0x13).

    >>> [b for b in range(256) if is_packed(b)]
    [16, 17, 18, 19]
    """
    return first ^ PACKED < _CODECS


def pack_span(codec: int, offsets: bytes, blob: bytes, first: int, last: int) -> bytes:
    """The packed payload of rows ``first..last-1`` of a row table: ``offsets`` holds its
    ``n + 1`` row boundaries in ``blob`` (little-endian u32). Nothing is done per row:
    the offsets are copied as they are (the receiver subtracts the first)."""
    n = last - first
    if not 0 <= codec < _CODECS or not 0 < n <= MAX_ROWS:
        raise EncodeError(f"a packed payload has 1..{MAX_ROWS} rows of an aoz codec (0..3)")
    offs = offsets[4 * first : 4 * (last + 1)]
    a, b = _U32.unpack_from(offs, 0)[0], _U32.unpack_from(offs, 4 * n)[0]
    return b"".join((bytes((PACKED | codec,)), _U32.pack(n), offs, blob[a:b]))


def pack_rows(codec: int, bodies: Sequence[bytes]) -> bytes:
    """The packed payload of ``bodies`` (each a row's body, without a codec byte)."""
    offsets = array("I", [0])
    offsets.extend(accumulate(map(len, bodies)))
    return pack_span(codec, offsets.tobytes(), b"".join(bodies), 0, len(bodies))


def unpack_rows(frame: bytes, start: int) -> list[tuple[int, int, int]]:
    """``(codec, body start, body end)`` of every row of the packed payload at
    ``frame[start:]``, positions in ``frame``; raises :class:`aoz.DecodeError` when the
    payload does not follow the layout (nothing is returned for a part of it)."""
    codec, bounds = row_bounds(frame, start)
    return [(codec, a, b) for a, b in pairwise(bounds)]


def row_bounds(frame: bytes, start: int) -> tuple[int, list[int]]:
    """The rows' codec and their ``n + 1`` boundaries in ``frame`` (row ``i`` is
    ``frame[bounds[i]:bounds[i + 1]]``): :func:`unpack_rows` without a tuple per row."""
    size = len(frame)
    if size < start + 5 or not is_packed(frame[start]):
        raise DecodeError("not a packed payload")
    codec = frame[start] ^ PACKED
    n = _U32.unpack_from(frame, start + 1)[0]
    body = start + 5 + 4 * (n + 1)
    if not 0 < n <= MAX_ROWS or body > size:
        raise DecodeError(f"a packed payload of {n} rows does not fit in {size - start} bytes")
    offs = array("I")
    offs.frombytes(frame[start + 5 : body])
    base = body - offs[0]
    if base + offs[n] != size:
        raise DecodeError("a packed payload's offsets do not match its bodies")
    if offs != array("I", sorted(offs)):
        raise DecodeError("a packed payload's offsets go backwards")
    return codec, list(map(base.__add__, offs))
