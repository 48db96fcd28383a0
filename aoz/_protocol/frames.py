"""Application frames and reply handles (SPEC §1, §2). Pure: bytes in, values out.

Theory of operation
-------------------
Every message on a data socket is one ZeroMQ frame::

    subject (1..256, no NUL) | NUL | type | [handle (60), only for requests] | NUL | payload

The subject comes first so that a ZeroMQ SUBSCRIBE filter of ``subject + b"\\0"``
selects exactly one subject at the publisher. :func:`decode_frame` does not copy the
payload: it returns where the payload starts, and the caller slices when it needs to.

A reply handle is ``_INBOX.<uuid>.<serial as 16 lowercase hex>`` (60 ASCII bytes). A
replier publishes the reply with the handle as its subject, so only the requester,
whose data SUB subscribes to ``_INBOX.<uuid>`` (see :func:`inbox_subject`), receives it.

Encoders trust that subjects were validated (:func:`aoz._protocol.subjects.subject_bytes`)
but still refuse, cheaply, a subject that would break the framing.
"""

from __future__ import annotations

import enum
import re
from typing import Final, NamedTuple

from ..errors import DecodeError, SubjectError
from .subjects import MAX_SUBJECT

__all__ = [
    "HANDLE_LEN",
    "INBOX_FILTER_LEN",
    "INBOX_PREFIX",
    "MAX_SUBJECT",
    "UUID_PATTERN",
    "Frame",
    "Kind",
    "decode_frame",
    "inbox_of",
    "is_uuid",
    "publish_subject_end",
    "encode_publish",
    "encode_reply",
    "encode_request",
    "request_prefix",
    "inbox_subject",
    "make_handle",
    "parse_handle",
    "publish_header",
]


class Kind(enum.IntEnum):
    """The frame's type byte."""

    PUBLISH = 1
    REQUEST = 2
    REPLY = 3


#: length of a reply handle, in bytes
HANDLE_LEN: Final = 60
#: every reply handle (and inbox subject) starts with this
INBOX_PREFIX: Final = b"_INBOX."

_UUID_LEN: Final = 36
_SERIAL_HEX: Final = 16
_MAX_SERIAL: Final = 2**64 - 1
#: the one uuid rule of the protocol: 36 lowercase hex characters with hyphens
UUID_PATTERN: Final = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_UUID_RE: Final = re.compile(UUID_PATTERN)
_HANDLE_RE: Final = re.compile(rb"_INBOX\.(%s)\.([0-9a-f]{16})" % UUID_PATTERN.encode())

_PUBLISH_TAIL: Final = b"\x00\x01\x00"
_REQUEST_MID: Final = b"\x00\x02"
_REPLY_TAIL: Final = b"\x00\x03\x00"
_NUL: Final = 0
_T_PUBLISH: Final = 1
_T_REQUEST: Final = 2
_T_REPLY: Final = 3


#: length of an inbox filter ``_INBOX.<uuid>`` (a reply handle without ``.<serial>``)
INBOX_FILTER_LEN: Final = len(INBOX_PREFIX) + _UUID_LEN


def is_uuid(text: str) -> bool:
    """Whether ``text`` is a node uuid as the protocol writes it (lowercase, hyphenated).

    >>> is_uuid("3669840e-d043-11ea-adc2-fcaa146e6b01"), is_uuid("x")
    (True, False)
    """
    return _UUID_RE.fullmatch(text) is not None


def publish_subject_end(frame: bytes) -> int:
    """The hot path's parser: the subject's length if ``frame`` is a well-formed publish
    frame (SPEC §1), else -1 (then :func:`decode_frame` says what the frame is).

    It agrees with :func:`decode_frame` on every input (a hypothesis property checks
    it) at the cost of one ``find`` and one ``startswith``.

    >>> publish_subject_end(b"A.B\x00\x01\x00hi"), publish_subject_end(b"A\x00\x02")
    (3, -1)
    """
    end = frame.find(b"\x00", 0, MAX_SUBJECT + 1)
    if end > 0 and frame.startswith(_PUBLISH_TAIL, end):
        return end
    return -1


def inbox_of(handle: bytes) -> bytes:
    """The inbox filter (``_INBOX.<uuid>``) that a reply handle is routed by.

    >>> inbox_of(b"_INBOX.3669840e-d043-11ea-adc2-fcaa146e6b01.000000000000000a")
    b'_INBOX.3669840e-d043-11ea-adc2-fcaa146e6b01'
    """
    return handle[:INBOX_FILTER_LEN]


class Frame(NamedTuple):
    """A decoded application frame.

    ``payload_start`` is the index of the first payload byte in the original frame
    (``frame[payload_start:]`` is the payload). ``reply`` is the 60-byte reply handle
    of a request, ``None`` for other kinds. For a reply, ``subject`` is the handle.
    """

    kind: Kind
    subject: bytes
    reply: bytes | None
    payload_start: int


def _bad(reason: str) -> DecodeError:
    return DecodeError(f"not an aoz/OZ application frame: {reason}", what="frame")


def decode_frame(frame: bytes) -> Frame:
    """Parse the header of one data frame.

    Raises :class:`aoz.errors.DecodeError` for anything that is not a valid frame
    (and never another exception).

    >>> decode_frame(b"A.B\\x00\\x01\\x00hi")
    Frame(kind=<Kind.PUBLISH: 1>, subject=b'A.B', reply=None, payload_start=6)
    """
    if type(frame) is not bytes:
        try:
            frame = bytes(frame)
        except (TypeError, ValueError, BufferError) as exc:
            raise _bad(f"expected bytes, got {type(frame).__name__}") from exc
    end = frame.find(b"\x00", 0, MAX_SUBJECT + 1)
    if end < 0:
        if len(frame) <= MAX_SUBJECT:
            raise _bad(f"no NUL after the subject ({len(frame)} bytes, truncated?)")
        raise _bad(f"no NUL within the first {MAX_SUBJECT + 1} bytes (subject too long)")
    if end == 0:
        raise _bad("empty subject")
    size = len(frame)
    if size < end + 3:
        raise _bad(f"truncated header ({size} bytes, subject of {end})")
    kind = frame[end + 1]
    if kind in (_T_PUBLISH, _T_REPLY):
        if frame[end + 2] != _NUL:
            raise _bad(f"missing NUL after the type byte (found {frame[end + 2]:#04x})")
        return Frame(Kind.PUBLISH if kind == _T_PUBLISH else Kind.REPLY, frame[:end], None, end + 3)
    if kind == _T_REQUEST:
        hend = end + 2 + HANDLE_LEN
        if size < hend + 1:
            raise _bad(f"request shorter than its {HANDLE_LEN}-byte reply handle")
        if frame[hend] != _NUL:
            raise _bad(f"missing NUL after the reply handle (found {frame[hend]:#04x})")
        handle = frame[end + 2 : hend]
        if not handle.isascii() or b"\x00" in handle:
            raise _bad(f"reply handle is not {HANDLE_LEN} printable ASCII bytes: {handle!r}")
        return Frame(Kind.REQUEST, frame[:end], handle, hend + 1)
    raise _bad(f"unknown type byte {kind:#04x} (expected 0x01, 0x02 or 0x03)")


def _check_subject(subject: bytes) -> None:
    n = len(subject)
    if n == 0 or n > MAX_SUBJECT or b"\x00" in subject:
        if n == 0:
            rule = "is empty"
        elif n > MAX_SUBJECT:
            rule = f"is {n} bytes long (at most {MAX_SUBJECT} allowed)"
        else:
            rule = "contains a NUL byte"
        raise SubjectError(
            f"subject {subject[:64]!r} {rule}; use 1..{MAX_SUBJECT} bytes without NUL",
            subject=subject,
        )


def _check_handle(handle: bytes) -> None:
    if len(handle) != HANDLE_LEN or b"\x00" in handle or not handle.isascii():
        raise SubjectError(
            f"reply handle {handle[:80]!r} must be {HANDLE_LEN} ASCII bytes without NUL "
            "(build it with make_handle())",
            subject=handle,
        )


def publish_header(subject: bytes) -> bytes:
    """The header of a publish frame on ``subject`` (``subject + b"\\0\\x01\\0"``).

    >>> publish_header(b"A") + b"data"
    b'A\\x00\\x01\\x00data'
    """
    _check_subject(subject)
    return subject + _PUBLISH_TAIL


def encode_publish(subject: bytes, payload: bytes) -> bytes:
    """A publish frame: ``subject + b"\\0\\x01\\0" + payload``.

    >>> encode_publish(b"A.B", b"x")
    b'A.B\\x00\\x01\\x00x'
    """
    _check_subject(subject)
    return b"".join((subject, _PUBLISH_TAIL, payload))


def encode_request(subject: bytes, handle: bytes, payload: bytes) -> bytes:
    """A request frame: ``subject + NUL + 0x02 + handle (60) + NUL + payload``."""
    _check_subject(subject)
    _check_handle(handle)
    return b"".join((subject, _REQUEST_MID, handle, b"\x00", payload))


def request_prefix(subject: bytes) -> bytes:
    """What every request frame on ``subject`` starts with (``subject + NUL + 0x02``):
    ``request_prefix(s) + handle + b"\\0" + payload == encode_request(s, handle, payload)``
    for a valid handle.

    >>> request_prefix(b"SVC.time")
    b'SVC.time\\x00\\x02'
    """
    _check_subject(subject)
    return subject + _REQUEST_MID


def encode_reply(handle: bytes, payload: bytes) -> bytes:
    """A reply frame, published on the requester's handle: ``handle + b"\\0\\x03\\0" + payload``."""
    _check_handle(handle)
    return b"".join((handle, _REPLY_TAIL, payload))


def _check_uuid(node_uuid: str) -> None:
    if not isinstance(node_uuid, str) or not is_uuid(node_uuid):
        raise SubjectError(
            f"node uuid {node_uuid!r} must be {_UUID_LEN} lowercase hex characters with "
            "hyphens, e.g. str(uuid.uuid4())",
            subject=str(node_uuid),
        )


def make_handle(node_uuid: str, serial: int) -> bytes:
    """The reply handle of request ``serial`` (1 <= serial < 2**64) of node ``node_uuid``.

    >>> make_handle("3669840e-d043-11ea-adc2-fcaa146e6b01", 10)
    b'_INBOX.3669840e-d043-11ea-adc2-fcaa146e6b01.000000000000000a'
    """
    _check_uuid(node_uuid)
    if isinstance(serial, bool) or not isinstance(serial, int) or not 1 <= serial <= _MAX_SERIAL:
        raise SubjectError(
            f"request serial {serial!r} must be an int with 1 <= serial < 2**64",
            subject=None,
        )
    return b"%s%s.%016x" % (INBOX_PREFIX, node_uuid.encode("ascii"), serial)


def parse_handle(handle: bytes) -> tuple[str, int]:
    """Split a reply handle into ``(node_uuid, serial)``; inverse of :func:`make_handle`.

    Raises :class:`aoz.errors.DecodeError` if ``handle`` is not a well-formed handle.

    >>> parse_handle(b"_INBOX.3669840e-d043-11ea-adc2-fcaa146e6b01.000000000000000a")
    ('3669840e-d043-11ea-adc2-fcaa146e6b01', 10)
    """
    if type(handle) is not bytes:
        try:
            handle = bytes(handle)
        except (TypeError, ValueError, BufferError) as exc:
            raise DecodeError(
                f"reply handle must be bytes, got {type(handle).__name__}", what="reply handle"
            ) from exc
    m = _HANDLE_RE.fullmatch(handle)
    if m is None:
        raise DecodeError(
            f"malformed reply handle {handle[:80]!r}: expected "
            "_INBOX.<36-char lowercase uuid>.<16 lowercase hex digits>",
            what="reply handle",
        )
    serial = int(m.group(2), 16)
    if serial == 0:
        raise DecodeError(
            f"malformed reply handle {handle!r}: serial 0 is never used", what="reply handle"
        )
    return m.group(1).decode("ascii"), serial


def inbox_subject(node_uuid: str) -> bytes:
    """The data-SUB filter that receives every reply to ``node_uuid``'s requests (43 bytes).

    >>> inbox_subject("3669840e-d043-11ea-adc2-fcaa146e6b01")
    b'_INBOX.3669840e-d043-11ea-adc2-fcaa146e6b01'
    """
    _check_uuid(node_uuid)
    return INBOX_PREFIX + node_uuid.encode("ascii")
