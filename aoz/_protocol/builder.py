"""Frames for a publisher, with the headers it uses cached. Pure.

A node publishes on a few subjects many times, so the header of each subject
(``subject NUL 0x01 NUL``, SPEC §1) is validated and built once and kept, with the
raw codec byte appended for the common case of a ``bytes`` payload (one
concatenation per message). The cache is cleared when it grows past ``cache_max``
subjects (8,192), which bounds the memory of headers.

Sequence numbers are never given up: a subject's number survives the cache being
cleared (it is kept in a plain subject -> number table), so a publisher never restarts
a live subject's numbering and a subscriber can never mistake that for "nothing
missing". The cost is one small counter per subject this node ever published on
(about 110 bytes with a 16-byte subject: 100,000 subjects take ~10 MiB,
``python -m benchmarks.scale``).

>>> b = FrameBuilder(Codec.MSGPACK)
>>> b.publish("A.B", b"x")
b'A.B\\x00\\x01\\x00\\x00x'
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping

from ..errors import EncodeError, SubjectError
from .codecs import Codec, Verbatim, encode_payload
from .frames import encode_reply, encode_request, publish_header
from .headers import add_headers, is_aoz_flagged
from .sequence import FLAG, HEADER_LEN
from .subjects import is_reserved, subject_bytes

__all__ = ["Entry", "FrameBuilder"]

_CACHE_MAX = 8192
_U32 = struct.Struct("<I").pack
_U64 = struct.Struct("<Q").pack
_SEQ_WRAP = 0xFFFFFFFF
_AOZ_CODECS = Codec.TEXT + 1  # payload ids aoz's codecs own; others are never touched


class Entry:
    """One subject's cached prefixes and its last sequence number."""

    __slots__ = ("header", "prefix", "seq")

    def __init__(self, header: bytes, prefix: bytes) -> None:
        self.header = header  # subject NUL 0x01 NUL
        self.prefix = prefix  # header + raw codec byte (+ the publisher id when sequencing)
        self.seq = 0


class FrameBuilder:
    """Builds publish, request and reply frames (see the module docstring)."""

    __slots__ = ("_entry", "_headers", "_pid", "_seqs", "cache_max", "default_codec",
                 "entries", "on_release", "publisher")

    def __init__(
        self,
        default_codec: Codec,
        *,
        publisher: int | None = None,
        cache_max: int = _CACHE_MAX,
        entry_type: Callable[[bytes, bytes], Entry] | None = None,
    ) -> None:
        self.default_codec = default_codec
        # the compiled hot path brings an entry type of its own (aoz._mesh._speedups.Entry:
        # the same fields, readable from C)
        self._entry = Entry if entry_type is None else entry_type
        self.cache_max = cache_max
        #: the sequence header's publisher id; None: publications are not sequenced
        self.publisher = publisher
        self._pid = b"" if publisher is None else _U64(publisher)
        self._headers: dict[str, bytes] = {}
        #: subject -> its cached prefixes and sequence number (the compiled Sender reads them)
        self.entries: dict[str, Entry] = {}
        # the numbers of subjects whose entry the cache let go (never forgotten)
        self._seqs: dict[str, int] = {}
        #: called with :attr:`entries` just before the cache lets them go (the publisher
        #: heartbeat's schedule reads their numbers: aoz._protocol.heartbeat)
        self.on_release: Callable[[Mapping[str, Entry]], None] | None = None

    def header(self, subject: str) -> bytes:
        """The publish header of ``subject``; raises SubjectError for an invalid or
        reserved subject."""
        h = self._headers.get(subject)
        if h is None:
            if not isinstance(subject, str):
                raise SubjectError(
                    f"subject must be a str, not {type(subject).__name__}", subject=None
                )
            if is_reserved(subject):
                raise SubjectError(
                    f"subject {subject!r} is reserved for aoz's inboxes and naming; "
                    "choose a subject that does not start with _INBOX., _NAMING or _AOZ.",
                    subject=subject,
                )
            h = publish_header(subject_bytes(subject))
            if len(self._headers) >= self.cache_max:
                self._headers.clear()
                if self.on_release is not None:
                    self.on_release(self.entries)
                seqs = self._seqs
                for name, e in self.entries.items():
                    if e.seq:
                        seqs[name] = e.seq
                self.entries.clear()  # cleared in place: the compiled Sender holds it
            self._headers[subject] = h
        return h

    def payload(self, data: object, codec: Codec | None,
                headers: Mapping[str, str] | None = None) -> bytes:
        """A payload (codec byte and body, with a header block when ``headers``)."""
        body = encode_payload(data, codec, default=self.default_codec)
        return add_headers(body, headers) if headers else body

    def publish_with(self, subject: str, data: object, codec: Codec | None,
                     headers: Mapping[str, str]) -> bytes:
        """A publish frame carrying ``headers`` (numbered as :meth:`publish` numbers);
        raises EncodeError for a payload that is not aoz's (omnm, Verbatim) without
        numbering anything."""
        if type(data) is Verbatim:
            raise EncodeError("headers ride in aoz's payload header; a Verbatim payload "
                              "goes out exactly as given, so it cannot carry them")
        frame = self.publish(subject, data, codec)
        start = len(self.entries[subject].header)
        first = frame[start] if len(frame) > start else 0xFF
        numbered = self.publisher is not None and is_aoz_flagged(first) and bool(first & FLAG)
        try:
            return frame[:start] + add_headers(frame[start:], headers,
                                               HEADER_LEN - 1 if numbered else 0)
        except BaseException:
            if numbered:
                self.rewind(subject)  # not built: the number is reused
            raise

    def publish(self, subject: str, data: object, codec: Codec | None = None) -> bytes:
        """A publish frame; ``bytes`` go raw, ``str`` as text, the rest msgpack/JSON."""
        e = self.entries.get(subject)
        if e is None:
            header = self.header(subject)
            raw = header + (b"\0" if self.publisher is None else bytes((FLAG,)) + self._pid)
            e = self.entries[subject] = self._entry(header, raw)
            if self._seqs:
                e.seq = self._seqs.pop(subject, 0)
        if self.publisher is None:
            if codec is None and type(data) is bytes:
                return e.prefix + data
            return e.header + encode_payload(data, codec, default=self.default_codec)
        e.seq += 1
        if codec is None and type(data) is bytes:
            return e.prefix + _U32(e.seq & _SEQ_WRAP) + data
        seq = e.seq & _SEQ_WRAP
        body = encode_payload(data, codec, default=self.default_codec)
        if not body or body[0] >= _AOZ_CODECS or type(data) is Verbatim:
            e.seq -= 1  # a foreign payload (omnm...) goes out as it is
            return e.header + body
        return b"".join((e.header, bytes((body[0] | FLAG,)), self._pid, _U32(seq), body[1:]))

    def publish_many(
        self, subject: str, items: Iterable[object], codec: Codec | None = None
    ) -> list[bytes]:
        """The publish frames of every item; if one cannot be encoded, the error is
        raised and the subject's sequence is left as it was (nothing was numbered)."""
        e = self.entries.get(subject)
        start = self._seqs.get(subject, 0) if e is None else e.seq
        try:
            return [self.publish(subject, data, codec) for data in items]
        except BaseException:
            e = self.entries.get(subject)
            if e is not None:
                e.seq = start
            raise

    def rewind(self, subject: str) -> None:
        """The last frame built for ``subject`` was not sent: reuse its sequence number."""
        e = self.entries.get(subject)
        if e is not None and self.publisher is not None:
            e.seq -= 1

    def request(self, subject: str, handle: bytes, payload: bytes) -> bytes:
        """A request frame for an encoded ``payload`` (see :meth:`payload`)."""
        self.header(subject)  # validates, and refuses reserved subjects
        return encode_request(subject_bytes(subject), handle, payload)

    def reply(self, handle: bytes, data: object, codec: Codec | None) -> bytes:
        return encode_reply(handle, encode_payload(data, codec, default=self.default_codec))
