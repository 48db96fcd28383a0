"""Application frames and reply handles: byte layout (SPEC §1, §2), round trips, robustness."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aoz._protocol.frames import (
    HANDLE_LEN,
    INBOX_PREFIX,
    MAX_SUBJECT,
    Frame,
    Kind,
    decode_frame,
    encode_publish,
    encode_reply,
    encode_request,
    inbox_subject,
    make_handle,
    parse_handle,
    publish_header,
)
from aoz.errors import DecodeError, SubjectError

SPEC_UUID = "3669840e-d043-11ea-adc2-fcaa146e6b01"
SPEC_HANDLE = b"_INBOX.3669840e-d043-11ea-adc2-fcaa146e6b01.000000000000000a"

subjects = st.binary(min_size=1, max_size=MAX_SUBJECT).filter(lambda b: b"\x00" not in b)
payloads = st.binary(max_size=300)
uuids = st.uuids().map(str)
serials = st.integers(min_value=1, max_value=2**64 - 1)
handles = st.builds(make_handle, uuids, serials)


def _decode_or_decode_error(data: bytes) -> Frame | None:
    """Decode; return None on DecodeError. Any other exception fails the test."""
    try:
        frame = decode_frame(data)
    except DecodeError:
        return None
    assert isinstance(frame, Frame)
    assert 0 < len(frame.subject) <= MAX_SUBJECT
    assert frame.payload_start <= len(data)
    return frame


# ---------------------------------------------------------------- byte layout


def test_publish_layout_is_subject_nul_type_nul_payload() -> None:
    assert encode_publish(b"A.B", b"xy") == b"A.B\x00\x01\x00xy"
    assert publish_header(b"A.B") == b"A.B\x00\x01\x00"
    assert len(publish_header(b"A.B")) == len(b"A.B") + 3


def test_request_layout_has_the_handle_between_type_and_nul() -> None:
    frame = encode_request(b"SVC", SPEC_HANDLE, b"q")
    assert frame == b"SVC\x00\x02" + SPEC_HANDLE + b"\x00q"
    assert len(frame) - 1 == len(b"SVC") + 63


def test_reply_layout_uses_the_handle_as_subject() -> None:
    frame = encode_reply(SPEC_HANDLE, b"r")
    assert frame == SPEC_HANDLE + b"\x00\x03\x00r"
    assert len(frame) - 1 == HANDLE_LEN + 3


def test_decode_request_reports_handle_and_payload_offset() -> None:
    data = encode_request(b"SVC", SPEC_HANDLE, b"payload")
    frame = decode_frame(data)
    assert frame == Frame(Kind.REQUEST, b"SVC", SPEC_HANDLE, 3 + 63)
    assert data[frame.payload_start :] == b"payload"


def test_empty_payload_is_allowed() -> None:
    frame = decode_frame(encode_publish(b"A", b""))
    assert (frame.kind, frame.subject, frame.payload_start) == (Kind.PUBLISH, b"A", 4)


def test_payload_may_contain_nul_and_type_bytes() -> None:
    data = encode_publish(b"A", b"\x00\x02\x00\x03")
    assert data[decode_frame(data).payload_start :] == b"\x00\x02\x00\x03"


def test_handle_example_from_the_spec() -> None:
    assert len(SPEC_HANDLE) == HANDLE_LEN
    assert make_handle(SPEC_UUID, 10) == SPEC_HANDLE
    assert parse_handle(SPEC_HANDLE) == (SPEC_UUID, 10)
    assert inbox_subject(SPEC_UUID) == SPEC_HANDLE[:43]
    assert len(inbox_subject(SPEC_UUID)) == 43
    assert SPEC_HANDLE.startswith(INBOX_PREFIX)


def test_first_and_last_serials() -> None:
    assert make_handle(SPEC_UUID, 1).endswith(b".0000000000000001")
    assert make_handle(SPEC_UUID, 2**64 - 1).endswith(b".ffffffffffffffff")


@pytest.mark.parametrize("serial", [0, -1, 2**64, True, 1.0, "1"])
def test_make_handle_rejects_bad_serials(serial: object) -> None:
    with pytest.raises(SubjectError, match="serial"):
        make_handle(SPEC_UUID, serial)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "uuid", ["", SPEC_UUID.upper(), SPEC_UUID[:-1], SPEC_UUID + "0", SPEC_UUID.replace("-", "x")]
)
def test_make_handle_and_inbox_reject_bad_uuids(uuid: str) -> None:
    with pytest.raises(SubjectError, match="uuid"):
        make_handle(uuid, 1)
    with pytest.raises(SubjectError, match="uuid"):
        inbox_subject(uuid)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "no NUL"),
        (b"A", "no NUL"),
        (b"\x00\x01\x00", "empty subject"),
        (b"A\x00", "truncated"),
        (b"A\x00\x01", "truncated"),
        (b"A\x00\x01x", "missing NUL"),
        (b"A\x00\x03x", "missing NUL"),
        (b"A\x00\x04\x00", "unknown type"),
        (b"A\x00\x00\x00", "unknown type"),
        (b"A\x00\x02" + SPEC_HANDLE, "shorter"),
        (b"A\x00\x02" + SPEC_HANDLE + b"x", "missing NUL"),
        (b"A\x00\x02" + b"\xff" * 60 + b"\x00", "ASCII"),
        (b"x" * (MAX_SUBJECT + 1) + b"\x00\x01\x00", "too long"),
    ],
)
def test_bad_frames_raise_decode_error_with_reason(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason) as info:
        decode_frame(data)
    assert info.value.what == "frame"


def test_longest_subject_decodes() -> None:
    subject = b"s" * MAX_SUBJECT
    assert decode_frame(encode_publish(subject, b"p")).subject == subject


@pytest.mark.parametrize("subject", [b"", b"x" * (MAX_SUBJECT + 1), b"a\x00b"])
def test_encoders_refuse_subjects_that_break_framing(subject: bytes) -> None:
    with pytest.raises(SubjectError):
        encode_publish(subject, b"")
    with pytest.raises(SubjectError):
        publish_header(subject)
    with pytest.raises(SubjectError):
        encode_request(subject, SPEC_HANDLE, b"")


@pytest.mark.parametrize("handle", [b"", SPEC_HANDLE[:-1], SPEC_HANDLE[:-1] + b"\x00"])
def test_encoders_refuse_bad_handles(handle: bytes) -> None:
    with pytest.raises(SubjectError):
        encode_reply(handle, b"")
    with pytest.raises(SubjectError):
        encode_request(b"A", handle, b"")


@pytest.mark.parametrize(
    "handle",
    [
        b"",
        SPEC_HANDLE[:-1],
        SPEC_HANDLE + b"0",
        SPEC_HANDLE.upper(),
        SPEC_HANDLE.replace(b"_INBOX.", b"_OUTBX."),
        SPEC_HANDLE[:-16] + b"0" * 16,
        SPEC_HANDLE[:-16] + b"g" * 16,
        SPEC_HANDLE[:43] + b"-" + SPEC_HANDLE[44:],
    ],
)
def test_parse_handle_rejects_malformed(handle: bytes) -> None:
    with pytest.raises(DecodeError, match="reply handle"):
        parse_handle(handle)


def test_decode_accepts_bytes_like_and_refuses_other_types() -> None:
    data = encode_publish(b"A", b"p")
    assert decode_frame(bytearray(data)) == decode_frame(data)  # type: ignore[arg-type]
    assert decode_frame(memoryview(data)) == decode_frame(data)  # type: ignore[arg-type]
    with pytest.raises(DecodeError):
        decode_frame("A\x00\x01\x00")  # type: ignore[arg-type]
    with pytest.raises(DecodeError):
        parse_handle(12)  # type: ignore[arg-type]


# ---------------------------------------------------------------- round trips


@settings(max_examples=250)
@given(subjects, payloads)
def test_publish_round_trip(subject: bytes, payload: bytes) -> None:
    data = encode_publish(subject, payload)
    assert data == publish_header(subject) + payload
    frame = decode_frame(data)
    assert frame == Frame(Kind.PUBLISH, subject, None, len(subject) + 3)
    assert data[frame.payload_start :] == payload


@settings(max_examples=250)
@given(subjects, handles, payloads)
def test_request_round_trip(subject: bytes, handle: bytes, payload: bytes) -> None:
    data = encode_request(subject, handle, payload)
    frame = decode_frame(data)
    assert frame == Frame(Kind.REQUEST, subject, handle, len(subject) + 63)
    assert data[frame.payload_start :] == payload


@settings(max_examples=250)
@given(handles, payloads)
def test_reply_round_trip(handle: bytes, payload: bytes) -> None:
    data = encode_reply(handle, payload)
    frame = decode_frame(data)
    assert frame == Frame(Kind.REPLY, handle, None, HANDLE_LEN + 3)
    assert data[frame.payload_start :] == payload


@settings(max_examples=250)
@given(uuids, serials)
def test_handle_round_trip(uuid: str, serial: int) -> None:
    handle = make_handle(uuid, serial)
    assert len(handle) == HANDLE_LEN
    assert handle.startswith(inbox_subject(uuid) + b".")
    assert parse_handle(handle) == (uuid, serial)


# ---------------------------------------------------------------- robustness


def _any_valid_frame() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.builds(encode_publish, subjects, payloads),
        st.builds(encode_request, subjects, handles, payloads),
        st.builds(encode_reply, handles, payloads),
    )


@settings(max_examples=100)
@given(_any_valid_frame())
def test_every_truncation_decodes_or_raises_decode_error(data: bytes) -> None:
    header_end = decode_frame(data).payload_start
    for cut in range(len(data) + 1):  # bounded by the frame's length
        frame = _decode_or_decode_error(data[:cut])
        if cut >= header_end:
            # cutting into the payload keeps the header intact
            assert frame == decode_frame(data)


@settings(max_examples=300)
@given(
    _any_valid_frame(),
    st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=8),
)
def test_mutated_frames_decode_or_raise_decode_error(
    data: bytes, mutations: list[tuple[int, int]]
) -> None:
    buf = bytearray(data)
    for pos, value in mutations:
        buf[pos % len(buf)] = value
    _decode_or_decode_error(bytes(buf))


@settings(max_examples=300)
@given(st.binary(max_size=400))
def test_garbage_decodes_or_raises_decode_error(data: bytes) -> None:
    _decode_or_decode_error(data)


@settings(max_examples=300)
@given(
    st.one_of(
        st.binary(max_size=80),
        handles.flatmap(
            lambda h: st.tuples(st.integers(0, HANDLE_LEN - 1), st.integers(0, 255)).map(
                lambda m: h[: m[0]] + bytes([m[1]]) + h[m[0] + 1 :]
            )
        ),
        handles.flatmap(lambda h: st.integers(0, HANDLE_LEN).map(lambda n: h[:n])),
    )
)
def test_parse_handle_returns_or_raises_decode_error(data: bytes) -> None:
    try:
        uuid, serial = parse_handle(data)
    except DecodeError:
        return
    # whatever parses must rebuild to the very same bytes
    assert make_handle(uuid, serial) == data
