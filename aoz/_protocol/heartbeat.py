"""Publisher heartbeats: the last sequence number of each subject a node published on
recently, so that a subscriber notices a lost tail. Pure.

A sequence gap (:mod:`aoz._protocol.sequence`) is seen only when a later message on the
same subject arrives; a publisher that sends a burst and goes quiet can lose its last
messages (at a high-water mark, on a cut link) and no subscriber would ever know. So a
node that has published on a subject and then stays quiet tells every aoz node, once a
``publisher_heartbeat`` interval, the subject's last number; a subscriber tracking that
stream whose last received number is behind it has found a lost tail.

Wire form: a publish frame (SPEC §1) on the reserved subject :data:`SUBJECT`, which
every aoz node's data SUB subscribes to (``_AOZ.HB`` NUL, so no other subject matches the
filter); its payload is::

    0x1F (1) | version 1 (1) | publisher id (8, LE u64) | count (2, LE u16)
    count x [ subject length (2, LE u16) | subject (UTF-8, 1..256 bytes, no NUL)
              | last sequence (4, LE u32) ]

``0x1F`` is a C0 control byte (the OZ-safe first-byte rule, :mod:`aoz._protocol.sequence`):
an OZ program that subscribes to everything receives the frame and OpenMAMA refuses its
payload at once. It is meaningful on :data:`SUBJECT` only. A frame is at most
:data:`MAX_FRAME` bytes; a node with more subjects to announce sends several.

Parsing is strict (:func:`decode`): anything but exactly this layout raises
:class:`aoz.errors.DecodeError`, and the receiver counts it as malformed.

The schedule (:class:`HeartbeatSchedule`) is a pure state machine: the node's heartbeat
task hands it the frame builder's entries (subject -> entry with ``seq``) and the time,
and gets the ``(subject, last number)`` pairs that are due. The publish hot path is not
touched: a subject counts as published since the last tick when its entry's number moved.

>>> frames = encode(7, [(b"MD.IBM", 41), (b"MD.MSFT", 2)])
>>> len(frames), decode(frames[0][len(SUBJECT_HEADER):])
(1, (7, [(b'MD.IBM', 41), (b'MD.MSFT', 2)]))
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Final, Protocol

from ..errors import DecodeError
from .frames import publish_header
from .subjects import MAX_SUBJECT

__all__ = ["FILTER", "FIRST_BYTE", "MAX_FRAME", "SUBJECT", "SUBJECT_HEADER",
           "HeartbeatSchedule", "decode", "encode", "publisher_of"]

#: the reserved subject heartbeats travel on
SUBJECT: Final = b"_AOZ.HB"
#: the data SUB's filter for it (the NUL ends the subject: nothing else matches)
FILTER: Final = SUBJECT + b"\0"
#: the publish frame's header on SUBJECT (subject NUL 0x01 NUL)
SUBJECT_HEADER: Final = publish_header(SUBJECT)
#: the payload's first byte: an OZ-safe C0 control byte, meaningful on SUBJECT only
FIRST_BYTE: Final = 0x1F
VERSION: Final = 1
#: the largest heartbeat frame, bytes (a node with more to say sends several)
MAX_FRAME: Final = 8192

_HEAD = struct.Struct("<BBQH")  # first byte, version, publisher id, count
_LEN = struct.Struct("<H")
_SEQ = struct.Struct("<I")
_ENTRY_FIXED: Final = _LEN.size + _SEQ.size
_WRAP: Final = 2**32


def encode(publisher: int, items: Iterable[tuple[bytes, int]],
           max_frame: int = MAX_FRAME) -> list[bytes]:
    """The heartbeat frames (whole publish frames on :data:`SUBJECT`) announcing
    ``(subject, last number)`` for ``publisher``, each at most ``max_frame`` bytes."""
    frames: list[bytes] = []
    parts: list[bytes] = []
    base = len(SUBJECT_HEADER) + _HEAD.size
    size = base
    for subject, seq in items:
        entry = b"".join((_LEN.pack(len(subject)), subject, _SEQ.pack(seq % _WRAP)))
        if parts and (size + len(entry) > max_frame or len(parts) == 0xFFFF):
            frames.append(_frame(publisher, parts))
            parts, size = [], base
        parts.append(entry)
        size += len(entry)
    if parts:
        frames.append(_frame(publisher, parts))
    return frames


def _frame(publisher: int, parts: list[bytes]) -> bytes:
    head = _HEAD.pack(FIRST_BYTE, VERSION, publisher, len(parts))
    return b"".join((SUBJECT_HEADER, head, *parts))


def publisher_of(payload: bytes) -> int | None:
    """The publisher id a heartbeat payload claims, or None when its head is not a
    heartbeat's (what :func:`decode` would then refuse anyway)."""
    if len(payload) < _HEAD.size:
        return None
    first, version, publisher, _count = _HEAD.unpack_from(payload)
    return publisher if first == FIRST_BYTE and version == VERSION else None


def decode(payload: bytes) -> tuple[int, list[tuple[bytes, int]]]:
    """``(publisher, [(subject, last number), ...])`` of a heartbeat payload; raises
    :class:`DecodeError` unless it is exactly the documented layout."""
    n = len(payload)
    if n < _HEAD.size:
        raise DecodeError(f"heartbeat of {n} bytes is shorter than its {_HEAD.size}-byte head")
    first, version, publisher, count = _HEAD.unpack_from(payload)
    if first != FIRST_BYTE or version != VERSION:
        raise DecodeError(f"not a version-{VERSION} heartbeat (first bytes "
                          f"{first:#04x} {version:#04x})")
    if count == 0:
        raise DecodeError("heartbeat announces no subject")
    pos = _HEAD.size
    out: list[tuple[bytes, int]] = []
    for _ in range(count):
        if pos + _ENTRY_FIXED > n:
            raise DecodeError("heartbeat cut short inside an entry")
        (length,) = _LEN.unpack_from(payload, pos)
        pos += _LEN.size
        end = pos + length
        if not 0 < length <= MAX_SUBJECT or end + _SEQ.size > n:
            raise DecodeError(f"heartbeat entry with a subject of {length} bytes")
        subject = payload[pos:end]
        if b"\0" in subject:
            raise DecodeError("heartbeat subject contains NUL")
        try:
            subject.decode()
        except UnicodeDecodeError:
            raise DecodeError("heartbeat subject is not UTF-8") from None
        (seq,) = _SEQ.unpack_from(payload, end)
        pos = end + _SEQ.size
        out.append((subject, seq))
    if pos != n:
        raise DecodeError(f"{n - pos} bytes after the heartbeat's last entry")
    return publisher, out


class SeqEntry(Protocol):
    """What the schedule reads of a frame builder's entry: its last sequence number."""

    @property
    def seq(self) -> int: ...


class HeartbeatSchedule:
    """Which subjects a heartbeat announces, tick by tick. Pure (``now`` passed in).

    - A subject whose number moved since the previous tick was published on: it is not
      quiet, its own messages carry the number; it is not announced this tick.
    - A quiet subject is announced every tick for ``window`` seconds after its number
      last moved (what "published recently" means), then no more: a node that is idle
      for longer than ``window`` sends nothing, and its cost is one scan of the builder's
      entries per tick (one dict lookup per entry; ~1 ms for 10,000 subjects).
    - A subscriber frozen for longer than ``window`` after a tail was lost is not told
      (its loss is still counted if a later message comes).

    Memory: one number per subject the node published on (as the frame builder keeps).

    >>> class E:
    ...     def __init__(self, seq): self.seq = seq
    >>> s = HeartbeatSchedule(window=2.0)
    >>> entries = {"A": E(3)}
    >>> s.tick(entries, 0.0), s.tick(entries, 1.0), s.tick(entries, 2.0), s.tick(entries, 3.0)
    ([], [('A', 3)], [('A', 3)], [])
    """

    __slots__ = ("_recent", "_released", "_seen", "window")

    def __init__(self, window: float) -> None:
        self.window = window
        self._seen: dict[str, int] = {}  # subject -> its number at the last tick
        self._recent: dict[str, float] = {}  # subject -> when its number last moved
        # numbers of entries the builder let go since the last tick (FrameBuilder's
        # on_release): past 8,192 subjects it clears its entries, maybe between ticks
        self._released: dict[str, int] = {}

    def release(self, entries: Mapping[str, SeqEntry]) -> None:
        """The frame builder is about to let ``entries`` go (its header cache is full):
        keep the numbers that moved since the last tick, for the next one."""
        seen = self._seen
        released = self._released
        for name, e in entries.items():
            seq = e.seq
            if seq and seen.get(name) != seq:
                released[name] = seq

    def tick(self, entries: Mapping[str, SeqEntry], now: float) -> list[tuple[str, int]]:
        """The ``(subject, last number)`` pairs to announce at ``now``."""
        seen = self._seen
        recent = self._recent
        if self._released:
            for name, seq in self._released.items():
                seen[name] = seq
                recent[name] = now
            self._released.clear()
        for name, e in entries.items():
            seq = e.seq
            if seq and seen.get(name) != seq:
                seen[name] = seq
                recent[name] = now
        cutoff = now - self.window
        due: list[tuple[str, int]] = []
        stale: list[str] = []
        for name, when in recent.items():
            if when >= now:
                continue  # published since the last tick: not quiet
            if when < cutoff:
                stale.append(name)
            else:
                due.append((name, seen[name]))
        for name in stale:
            del recent[name]
        return due

    @property
    def recent(self) -> int:
        """How many subjects are still announced (published within ``window``)."""
        return len(self._recent)
