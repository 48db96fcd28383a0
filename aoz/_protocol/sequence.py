"""aoz's sequence header: who published a payload, and its number on that subject. Pure.

The first payload byte is aoz's codec id (SPEC §1 leaves the payload to the payload
bridge). aoz sets its bit :data:`FLAG` (0x04) to say "a sequence header follows"::

    0x04|codec (1) | publisher id (8, little-endian u64) | sequence (4, little-endian u32) | body

The publisher id is random per node; the sequence counts the node's publications on
each subject from 1 and wraps at 2**32. A subscriber keeps the last sequence per
(subject, publisher): a jump of more than one means messages were lost upstream (at a
high-water mark, on a cut link, across a reconnect), and by exactly how many. Loss is
detected when the next message on that subject arrives; a stream that simply stops is
covered by its publisher's heartbeats (:mod:`aoz._protocol.heartbeat`,
:meth:`SequenceTracker.advance`).

Payloads without the flag (OZ programs' omnm payloads, replies, requests, bytes from
other libraries) are unsequenced and delivered as they are.

Why 0x04..0x07 (the OZ-safe first-byte rule): an OZ program hands every payload's first
byte to OpenMAMA, which looks it up in a 127-entry table of payload bridges
(``mamaInternal_findPayload``: ``byChar[(uint8_t)id]``, no bounds check). A first byte of
0x7F or above reads past that table (undefined behaviour: OZ programs crashed on aoz's
former 0x80 flag); a byte that names a payload bridge (``'O'`` omnm, ``'W'``, ``'T'``,
``'1'``, ``'5'``: printable characters, and a dynamically loaded bridge may register
another) hands aoz's bytes to that bridge's parser. So every first byte aoz emits on its
own is a C0 control byte: 0x00 (OpenMAMA's "no payload", refused at once) to 0x07, and
0x08..0x1F are kept for aoz's future payload flags. Only ``Verbatim`` (the caller's own
bytes) and omnm (``'O'``, when omnm is asked for) send another first byte.

>>> h = encode_header(0x01, 7, 1)
>>> len(h), parse_header(h + b"body")
(13, (1, 7, 1, 13))
>>> gap(None, 1), gap(1, 2), gap(2, 5), gap(2**32 - 1, 0)
(0, 0, 2, 0)
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final

__all__ = ["FLAG", "HEADER_LEN", "SequenceTracker", "encode_header", "gap", "is_sequenced",
           "parse_header"]

#: set in the codec byte when a sequence header follows
FLAG: Final = 0x04
#: codec byte + publisher id + sequence
HEADER_LEN: Final = 13
#: publisher id and sequence, after the codec byte
PACK: Final = struct.Struct("<QI")
_WRAP: Final = 2**32
_CODECS: Final = 4  # aoz's codec ids 0..3 (aoz._protocol.codecs.AOZ_CODEC_IDS)
#: a jump backwards or further than this is a restarted stream, not a loss
_MAX_GAP: Final = 2**31


def encode_header(codec_id: int, publisher: int, sequence: int) -> bytes:
    """The 13-byte header of a sequenced payload (``codec_id`` without the flag)."""
    return bytes((codec_id | FLAG,)) + PACK.pack(publisher, sequence % _WRAP)


def parse_header(payload: bytes, start: int = 0) -> tuple[int, int, int, int] | None:
    """``(codec_id, publisher, sequence, body_start)`` of a sequenced payload starting at
    ``start``, or ``None`` when the payload carries no (complete) sequence header."""
    if len(payload) < start + HEADER_LEN or not is_sequenced(payload[start]):
        return None
    publisher, sequence = PACK.unpack_from(payload, start + 1)
    return payload[start] ^ FLAG, publisher, sequence, start + HEADER_LEN


def is_sequenced(first: int) -> bool:
    """Whether a payload's first byte says a sequence header follows (0x04..0x07).

    >>> [b for b in range(256) if is_sequenced(b)]
    [4, 5, 6, 7]
    """
    return first ^ FLAG < _CODECS


def gap(last: int | None, sequence: int) -> int:
    """How many messages are missing between ``last`` and ``sequence`` (0 for the first
    message of a stream, a duplicate, or a restarted stream)."""
    if last is None:
        return 0
    missing = (sequence - last - 1) % _WRAP
    return 0 if missing >= _MAX_GAP else missing


class SequenceTracker:
    """The last number seen per (subject, publisher), and what a new one says is missing.

    Pure and bounded. The receive hot path reads :attr:`last_seen` directly (subject ->
    ``[publisher, last, mark]`` of the subject's latest publisher) and calls
    :meth:`check` only when a frame is not simply that publisher's next number, so one
    publisher per subject, the common case, costs one lookup per frame.

    Memory and eviction (never silent):

    - At most ``max_streams`` (subject, publisher) pairs are kept (default 1,048,576).
      A stream costs about 165 bytes with a 16-byte subject: 100,000 streams take
      ~16 MiB, the bound ~165 MiB (``python -m benchmarks.scale``).
    - Idleness needs no clock on the hot path: every ``idle_after`` seconds (``now``
      comes with :meth:`check`) a sweep copies each subject's last number into its
      ``mark``; a subject whose number had not moved since the previous sweep has been
      idle for at least ``idle_after`` seconds (default 60).
    - A new stream arriving at the bound evicts the idle subjects first, else the
      oldest (one eighth of the table at a time). Every evicted stream is remembered
      as a 64-bit key (at most ``max_streams`` keys, ~70 bytes each); when it is seen
      again it is counted in :attr:`restarted` (its gap cannot be known), never as a
      gap of zero. If that memory is full too, every new stream that does not start at
      number 1 counts as restarted: over-reported, never silent.
    - A stream whose number jumps backwards (its publisher restarted its numbering)
      counts as restarted too.
    - :meth:`forget` drops the streams of subjects no subscription receives any more
      (an unsubscribe): a gap across that absence is not a loss and is not counted.

    >>> t = SequenceTracker()
    >>> t.check(b"S", 1, 1), t.check(b"S", 1, 4), t.check(b"S", 2, 9), t.check(b"S", 1, 5)
    (0, 2, 0, 0)
    """

    __slots__ = ("_evicted", "_evicted_full", "_idle", "_next_sweep", "_streams", "count",
                 "evictions", "idle_after", "last_seen", "max_streams", "restarted")

    def __init__(self, max_streams: int = 1 << 20, idle_after: float = 60.0) -> None:
        #: subject -> [latest publisher, its last number, its number at the last sweep]
        self.last_seen: dict[bytes, list[int]] = {}
        # subject -> publisher -> last number, for every publisher but the latest, whose
        # number last_seen holds (only subjects with more than one publisher)
        self._streams: dict[bytes, dict[int, int]] = {}
        self.count = 0  #: (subject, publisher) pairs known
        self.max_streams = max_streams
        self.idle_after = idle_after
        self.restarted = 0  #: streams seen again after eviction, or renumbered
        self.evictions = 0  #: streams evicted at the bound
        self._evicted: set[int] = set()
        self._evicted_full = False
        self._next_sweep: float | None = None
        self._idle: list[bytes] = []  # subjects found idle by the last sweep

    def check(self, subject: bytes, publisher: int, sequence: int, now: float = 0.0) -> int:
        """Record ``sequence`` from ``publisher`` on ``subject``; returns how many of its
        messages are missing just before it (``now``: seconds, for the idle sweeps)."""
        if self._next_sweep is None:
            self._next_sweep = now + self.idle_after
        elif now >= self._next_sweep:
            self._sweep(now)
        st = self.last_seen.get(subject)
        if st is not None and st[0] == publisher:
            last: int | None = st[1]
        else:
            streams = self._streams.get(subject)
            last = None if streams is None else streams.pop(publisher, None)
            if last is None:
                if self.count >= self.max_streams:
                    self._evict()
                    st = self.last_seen.get(subject)
                    streams = self._streams.get(subject)
                self.count += 1
                self._new_stream(subject, publisher, sequence)
            if st is not None:  # the previous latest publisher goes to the table
                if streams is None:
                    streams = self._streams[subject] = {}
                streams[st[0]] = st[1]
            if streams is not None and not streams:
                del self._streams[subject]
        self.last_seen[subject] = [publisher, sequence, -1]
        if last is None:
            return 0
        missing = (sequence - last - 1) % _WRAP
        if missing >= _MAX_GAP:
            if sequence != last:
                self.restarted += 1  # numbered from scratch: what came between is unknown
            return 0
        return missing

    def advance(self, subject: bytes, publisher: int, sequence: int) -> int:
        """A publisher heartbeat says ``publisher``'s last number on ``subject`` is
        ``sequence``: move a tracked stream that is behind up to it and return how many
        of its messages are missing (its lost tail); 0 for an unknown stream (nothing to
        compare with: a heartbeat never starts one), one that is not behind, or a number
        that went backwards (a heartbeat overtaken by the stream's own messages)."""
        st = self.last_seen.get(subject)
        if st is None:
            return 0
        streams: dict[int, int] | None = None
        if st[0] == publisher:
            last = st[1]
        else:
            streams = self._streams.get(subject)
            if streams is None or publisher not in streams:
                return 0
            last = streams[publisher]
        missing = (sequence - last) % _WRAP
        if missing == 0 or missing >= _MAX_GAP:
            return 0
        if streams is None:
            st[1] = sequence
        else:
            streams[publisher] = sequence
        return missing

    def forget(self, subjects: Iterable[bytes]) -> int:
        """Forget every stream of ``subjects`` (no subscription receives them any more:
        a gap across that absence is not a loss); returns how many streams."""
        n = 0
        for subject in list(subjects):
            if self.last_seen.pop(subject, None) is not None:
                n += 1 + len(self._streams.pop(subject, ()))
        self.count -= n
        return n

    def subjects(self, prefix: bytes = b"") -> list[bytes]:
        """The tracked subjects that start with ``prefix``."""
        return [sb for sb in self.last_seen if sb.startswith(prefix)]

    def clear(self) -> None:
        """Forget every stream (a gap across this is not counted)."""
        self._streams.clear()
        self.last_seen.clear()
        self.count = 0

    def _new_stream(self, subject: bytes, publisher: int, sequence: int) -> None:
        if not self.evictions:
            return
        key = hash((subject, publisher))
        if key in self._evicted:
            self._evicted.discard(key)
            self.restarted += 1
        elif self._evicted_full and sequence != 1:
            self.restarted += 1

    def _sweep(self, now: float) -> None:
        """Mark every stream's number; unchanged since the last sweep means idle."""
        self._next_sweep = now + self.idle_after
        idle = self._idle
        idle.clear()
        for subject, st in self.last_seen.items():
            if st[2] == st[1]:
                idle.append(subject)  # unchanged for a whole interval
            else:
                st[2] = st[1]

    def _evict(self) -> None:
        """Make room: idle subjects first, else the oldest; remember what went."""
        last_seen = self.last_seen
        # still unmoved since the sweep that found them idle (a stream seen again has
        # mark -1, a moved one a number other than its mark)
        idle = [sb for sb in self._idle if (st := last_seen.get(sb)) and st[2] == st[1]]
        self._idle.clear()
        if not idle:
            quota = max(1, len(self.last_seen) // 8)
            idle = [sb for sb, _ in zip(last_seen, range(quota), strict=False)]
        evicted = self._evicted
        for subject in idle:
            st = last_seen.pop(subject)
            publishers = [st[0], *self._streams.pop(subject, ())]
            self.count -= len(publishers)
            self.evictions += len(publishers)
            for pid in publishers:
                if len(evicted) >= self.max_streams:
                    self._evicted_full = True
                else:
                    evicted.add(hash((subject, pid)))
