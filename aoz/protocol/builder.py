"""Frames for a publisher, with the headers it uses cached. Pure.

A node publishes on a few subjects many times, so the header of each subject
(``subject NUL 0x01 NUL``, SPEC §1) is validated and built once and kept, with the
raw codec byte appended for the common case of a ``bytes`` payload (one
concatenation per message). The cache is cleared when it grows past ``cache_max``
subjects, which bounds its memory.

>>> b = FrameBuilder(Codec.MSGPACK)
>>> b.publish("A.B", b"x")
b'A.B\\x00\\x01\\x00\\x00x'
"""

from __future__ import annotations

from ..errors import SubjectError
from .codecs import Codec, encode_payload
from .frames import encode_reply, encode_request, publish_header
from .subjects import is_reserved, subject_bytes

__all__ = ["FrameBuilder"]

_CACHE_MAX = 8192


class FrameBuilder:
    """Builds publish, request and reply frames (see the module docstring)."""

    __slots__ = ("_headers", "_raw_headers", "cache_max", "default_codec")

    def __init__(self, default_codec: Codec, cache_max: int = _CACHE_MAX) -> None:
        self.default_codec = default_codec
        self.cache_max = cache_max
        self._headers: dict[str, bytes] = {}
        self._raw_headers: dict[str, bytes] = {}  # header + the raw codec byte

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
                    "choose a subject that does not start with _INBOX. or _NAMING",
                    subject=subject,
                )
            h = publish_header(subject_bytes(subject))
            if len(self._headers) >= self.cache_max:
                self._headers.clear()
                self._raw_headers.clear()
            self._headers[subject] = h
        return h

    def payload(self, data: object, codec: Codec | None) -> bytes:
        return encode_payload(data, codec, default=self.default_codec)

    def publish(self, subject: str, data: object, codec: Codec | None = None) -> bytes:
        """A publish frame; ``bytes`` go raw, ``str`` as text, the rest msgpack/JSON."""
        raw_header = self._raw_headers.get(subject)
        if raw_header is None:
            raw_header = self._raw_headers[subject] = self.header(subject) + b"\0"
        if codec is None and type(data) is bytes:
            return raw_header + data
        return raw_header[:-1] + encode_payload(data, codec, default=self.default_codec)

    def request(self, subject: str, handle: bytes, payload: bytes) -> bytes:
        """A request frame for an encoded ``payload`` (see :meth:`payload`)."""
        self.header(subject)  # validates, and refuses reserved subjects
        return encode_request(subject_bytes(subject), handle, payload)

    def reply(self, handle: bytes, data: object, codec: Codec | None) -> bytes:
        return encode_reply(handle, encode_payload(data, codec, default=self.default_codec))
