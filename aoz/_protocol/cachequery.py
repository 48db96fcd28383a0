"""Publisher-cache queries and their replies (history and recovery). Pure.

A node with ``publish_cache=N`` keeps the last N frames it published per subject
(:mod:`aoz._mesh.cache`). Subscribers ask for them with a request on the internal subject
:data:`SUBJECT` (``_AOZ.CACHE``, hidden from wildcards and reserved), to which every aoz
node subscribes; the reply goes to the requester's inbox as usual (SPEC §2). Both
payloads start with a C0 control byte aoz owns (the OZ-safe rule of
:mod:`aoz._protocol.sequence`): an OZ program that receives one refuses it at once.

Query (one frame, at most :data:`MAX_QUERY` bytes)::

    0x1C | version (1) | kind (1) | flags (1) | publisher (u64) | n (u32) | first (u32)
         | count (u32) | pattern length (u16) | pattern (UTF-8)

    kind 1 HISTORY: the last ``n`` frames of every subject matching ``pattern`` (flag
           0x01: the pattern is an OZ regex; otherwise exact or NATS tokens), from
           every publisher (``publisher`` 0) or one;
    kind 2 RANGE:   the frames of subject ``pattern`` (exact) numbered ``first`` ..
           ``first + count - 1`` (modulo 2**32) from ``publisher`` only; other
           publishers stay silent.

Reply (one or more frames per publisher, each at most :data:`MAX_CHUNK` bytes of
entries)::

    0x1D | version (1) | flags (1) | publisher (u64) | chunk (u16) | entries (u32)
         | entries x (frame length (u32) | frame)

    flags 0x01 LAST: the publisher's last chunk for this query;
          0x02 NO_CACHE: the publisher keeps no cache (its answer is empty).

Each entry is a publish frame exactly as the publisher sent it (SPEC §1 layout with
aoz's sequence header), so a replayed message is byte for byte the live one.

>>> q = CacheQuery(kind=HISTORY, pattern="MD.>", n=1)
>>> decode_query(encode_query(q)) == q
True
>>> [decode_reply(c).entries for c in encode_reply(7, [b"A\\0\\x01\\0x"], LAST)]
[[b'A\\x00\\x01\\x00x']]
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

import msgspec

from ..errors import DecodeError

__all__ = [
    "HISTORY", "LAST", "MAX_CHUNK", "MAX_PATTERN", "MAX_QUERY", "NO_CACHE", "QUERY_BYTE",
    "RANGE", "REGEX", "REPLY_BYTE", "SUBJECT", "CacheQuery", "CacheReply", "decode_query",
    "decode_reply", "encode_query", "encode_reply", "in_range",
]

#: the internal subject every aoz node answers cache queries on
SUBJECT: Final = "_AOZ.CACHE"
#: first byte of a query / a reply (C0 control bytes aoz owns: OZ-safe)
QUERY_BYTE: Final = 0x1C
REPLY_BYTE: Final = 0x1D
VERSION: Final = 1
HISTORY: Final = 1
RANGE: Final = 2
REGEX: Final = 0x01  #: query flag: the pattern is an OZ regex
LAST: Final = 0x01  #: reply flag: the publisher's last chunk
NO_CACHE: Final = 0x02  #: reply flag: the publisher keeps no cache
MAX_PATTERN: Final = 1024
_QHEAD = struct.Struct("<BBBBQIIIH")
MAX_QUERY: Final = _QHEAD.size + MAX_PATTERN
_RHEAD = struct.Struct("<BBBQHI")
_LEN = struct.Struct("<I")
#: bytes of entries per reply frame (a bigger answer is cut into chunks)
MAX_CHUNK: Final = 1 << 20
_MAX_ENTRIES: Final = MAX_CHUNK // 4
_WRAP: Final = 1 << 32


class CacheQuery(msgspec.Struct, frozen=True, kw_only=True):
    """What a subscriber asks a publisher's cache."""

    kind: int  #: HISTORY or RANGE
    pattern: str  #: a subscription pattern (HISTORY) or an exact subject (RANGE)
    regex: bool = False
    publisher: int = 0  #: 0: any publisher (HISTORY only)
    n: int = 0  #: HISTORY: the last ``n`` frames per subject
    first: int = 0  #: RANGE: the first missing number
    count: int = 0  #: RANGE: how many numbers from ``first``


class CacheReply(msgspec.Struct, frozen=True):
    """One chunk of a publisher's answer."""

    publisher: int
    flags: int
    chunk: int
    entries: list[bytes]

    @property
    def last(self) -> bool:
        return bool(self.flags & LAST)


def encode_query(q: CacheQuery) -> bytes:
    pattern = q.pattern.encode()
    if not pattern or len(pattern) > MAX_PATTERN:
        raise DecodeError(f"a cache query's pattern is 1..{MAX_PATTERN} bytes, not "
                          f"{len(pattern)}")
    return _QHEAD.pack(QUERY_BYTE, VERSION, q.kind, REGEX if q.regex else 0,
                       q.publisher, q.n, q.first % _WRAP, q.count, len(pattern)) + pattern


def decode_query(payload: bytes) -> CacheQuery:
    """Strict: raises :class:`aoz.DecodeError` for anything that is not a query."""
    if len(payload) < _QHEAD.size or len(payload) > MAX_QUERY:
        raise DecodeError(f"cache query of {len(payload)} bytes")
    first_byte, version, kind, flags, pub, n, first, count, plen = _QHEAD.unpack_from(payload)
    if first_byte != QUERY_BYTE or version != VERSION:
        raise DecodeError(f"not a cache query (first byte {first_byte:#x}, version {version})")
    if kind not in (HISTORY, RANGE) or flags & ~REGEX:
        raise DecodeError(f"cache query of unknown kind {kind} or flags {flags:#x}")
    if plen == 0 or _QHEAD.size + plen != len(payload):
        raise DecodeError("cache query pattern length does not match the payload")
    if kind == RANGE and (pub == 0 or count == 0 or flags):
        raise DecodeError("a range query names a publisher, an exact subject and a count")
    try:
        pattern = payload[_QHEAD.size:].decode()
    except UnicodeDecodeError as exc:
        raise DecodeError(f"cache query pattern is not UTF-8: {exc}") from None
    return CacheQuery(kind=kind, pattern=pattern, regex=bool(flags & REGEX), publisher=pub,
                      n=n, first=first, count=count)


def encode_reply(publisher: int, frames: Sequence[bytes], flags: int = 0) -> list[bytes]:
    """The reply chunks carrying ``frames`` (at least one chunk; the last gets ``LAST``
    and ``flags``); a frame bigger than :data:`MAX_CHUNK` travels alone in its chunk."""
    chunks: list[bytes] = []
    parts: list[bytes] = []
    size = 0
    count = 0

    def close(last: bool) -> None:
        nonlocal parts, size, count
        f = (flags | LAST) if last else 0
        chunks.append(_RHEAD.pack(REPLY_BYTE, VERSION, f, publisher, len(chunks) & 0xFFFF,
                                  count) + b"".join(parts))
        parts, size, count = [], 0, 0

    for frame in frames:
        if count and (size + len(frame) + 4 > MAX_CHUNK or count >= _MAX_ENTRIES):
            close(False)
        parts.append(_LEN.pack(len(frame)))
        parts.append(frame)
        size += len(frame) + 4
        count += 1
    close(True)
    return chunks


def decode_reply(payload: bytes, max_size: int = 1 << 31) -> CacheReply:
    """Strict: every length is checked against the payload; raises DecodeError."""
    n = len(payload)
    if n < _RHEAD.size or n > max_size:
        raise DecodeError(f"cache reply of {n} bytes")
    first_byte, version, flags, pub, chunk, count = _RHEAD.unpack_from(payload)
    if first_byte != REPLY_BYTE or version != VERSION or flags & ~(LAST | NO_CACHE):
        raise DecodeError(f"not a cache reply (first byte {first_byte:#x}, version "
                          f"{version}, flags {flags:#x})")
    if count > (n - _RHEAD.size) // 4:
        raise DecodeError(f"cache reply claims {count} entries in {n} bytes")
    entries: list[bytes] = []
    pos = _RHEAD.size
    for _ in range(count):
        if pos + 4 > n:
            raise DecodeError("cache reply truncated in an entry length")
        (size,) = _LEN.unpack_from(payload, pos)
        pos += 4
        if pos + size > n:
            raise DecodeError("cache reply truncated in an entry")
        entries.append(payload[pos:pos + size])
        pos += size
    if pos != n:
        raise DecodeError(f"{n - pos} bytes after the last entry of a cache reply")
    return CacheReply(pub, flags, chunk, entries)


def in_range(seq: int, first: int, count: int) -> bool:
    """Whether ``seq`` is one of ``first .. first + count - 1`` (numbers wrap at 2**32).

    >>> in_range(3, 2, 2), in_range(4, 2, 2), in_range(0, 2**32 - 1, 2)
    (True, False, True)
    """
    return (seq - first) % _WRAP < count
