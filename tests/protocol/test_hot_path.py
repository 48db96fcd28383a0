"""The hot path's parsers agree with the protocol's full decoders on every input."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aoz._protocol.frames import (
    Kind,
    decode_frame,
    encode_publish,
    encode_request,
    make_handle,
    parse_handle,
    publish_subject_end,
)
from aoz._protocol.inbox import InboxTable
from aoz.errors import DecodeError

UUID = "3669840e-d043-11ea-adc2-fcaa146e6b01"

frames_like = st.one_of(
    st.binary(max_size=400),
    st.builds(lambda s, p: encode_publish(s, p),
              st.binary(min_size=1, max_size=256).filter(lambda b: b"\0" not in b),
              st.binary(max_size=64)),
    st.builds(lambda s, n, p: encode_request(s, make_handle(UUID, n), p),
              st.binary(min_size=1, max_size=256).filter(lambda b: b"\0" not in b),
              st.integers(1, 2**64 - 1), st.binary(max_size=300)),
    st.builds(lambda a, b: a + b"\0" + b,
              st.binary(max_size=260), st.sampled_from([b"\x01\x00", b"\x01", b"\x03\x00",
                                                         b"\x02", b"\x01\x00\x01\x00"])),
)


@settings(max_examples=3000, deadline=None)
@given(frames_like)
def test_publish_subject_end_agrees_with_decode_frame(frame: bytes) -> None:
    end = publish_subject_end(frame)
    try:
        fr = decode_frame(frame)
    except DecodeError:
        assert end == -1
        return
    if fr.kind is Kind.PUBLISH:
        assert end == len(fr.subject) and fr.payload_start == end + 3
    else:
        assert end == -1


handles = st.one_of(
    st.binary(max_size=80),
    st.builds(lambda n: make_handle(UUID, n), st.integers(1, 2**64 - 1)),
    st.builds(lambda tail: f"_INBOX.{UUID}.".encode() + tail, st.binary(min_size=16, max_size=16)),
    st.builds(lambda tail: f"_INBOX.{UUID}.{tail}".encode(),
              st.text("0123456789abcdefABCDEF_ +-x", min_size=16, max_size=16)),
)


@settings(max_examples=3000, deadline=None)
@given(handles)
def test_inbox_table_and_parse_handle_agree(handle: bytes) -> None:
    table: InboxTable[str] = InboxTable(UUID)
    try:
        expected: int | None = parse_handle(handle)[1]
        if parse_handle(handle)[0] != UUID:
            expected = None
    except DecodeError:
        expected = None
    try:
        got: int | None = table.serial_of(handle)
    except DecodeError:
        got = None
    assert got == expected


def test_handles_the_old_table_accepted_are_refused() -> None:
    table: InboxTable[str] = InboxTable(UUID)
    for tail in (b" 00000000000000a", b"0000_00000000000a", b"+00000000000000a"):
        handle = f"_INBOX.{UUID}.".encode() + tail[:16]
        try:
            table.serial_of(handle)
        except DecodeError:
            continue
        raise AssertionError(f"accepted {handle!r}")
