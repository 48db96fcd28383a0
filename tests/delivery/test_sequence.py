"""Sequence numbers: every publication is numbered per (publisher, subject), and a
subscriber counts what is missing exactly."""

from __future__ import annotations

import struct

import anyio
import pytest
import zmq
import zmq.asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

import aoz
from aoz._protocol.sequence import (
    HEADER_LEN,
    SequenceTracker,
    encode_header,
    gap,
    parse_header,
)

pytestmark = pytest.mark.timeout(60)


def test_gap_arithmetic() -> None:
    assert gap(None, 7) == 0
    assert gap(7, 8) == 0
    assert gap(7, 10) == 2
    assert gap(2**32 - 2, 1) == 2  # wrapped: 2**32-1 and 0 are missing
    assert gap(10, 10) == 0  # a duplicate is not a loss
    assert gap(10, 3) == 0  # a restarted stream is not a loss


def test_header_round_trip() -> None:
    h = encode_header(2, 2**64 - 1, 2**32 + 5)
    assert len(h) == HEADER_LEN and h[0] == 0x06
    assert parse_header(h + b"{}") == (2, 2**64 - 1, 5, HEADER_LEN)
    assert parse_header(b"\x02{}") is None
    assert parse_header(h[:-1]) is None


async def test_messages_carry_publisher_and_sequence(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    async with b.subscribe("SEQ.a") as sa, b.subscribe("SEQ.>") as wild:
        await a.wait_for_interest("SEQ.a")
        await a.wait_for_interest("SEQ.b")  # the wildcard's filter has arrived too
        for i in range(3):
            await a.publish("SEQ.a", {"i": i})
            await a.publish("SEQ.b", f"text {i}")
        got = [await sa.next(timeout=5) for _ in range(3)]
        assert [m.sequence for m in got] == [1, 2, 3]
        assert {m.publisher for m in got} == {a._frames.publisher}
        assert [m.decode() for m in got] == [{"i": 0}, {"i": 1}, {"i": 2}]
        assert got[0].codec is aoz.Codec.MSGPACK and got[0].gap == 0
        seen = [await wild.next(timeout=5) for _ in range(6)]
        b_msgs = [m for m in seen if m.subject == "SEQ.b"]
        assert [m.sequence for m in b_msgs] == [1, 2, 3]  # numbered per subject
        assert [m.data for m in b_msgs] == [b"text 0", b"text 1", b"text 2"]
        assert sa.statistics().lost == 0 and wild.statistics().lost == 0


async def test_unsequenced_node_sends_plain_payloads(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    _, b = static_pair
    async with aoz.connect(bind=["tcp://127.0.0.1:*"], sequence=False) as plain:
        b.connect_endpoint(plain.endpoint)
        async with b.subscribe("PLAIN") as sub:
            await plain.wait_for_interest("PLAIN")
            await plain.publish("PLAIN", b"raw")
            msg = await sub.next(timeout=5)
    assert msg.payload == b"\x00raw" and msg.sequence is None and msg.publisher is None


async def test_gaps_are_counted_exactly_and_marked_on_the_next_message() -> None:
    """A publisher that skips numbers (as a full queue or a cut link would)."""
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.XPUB)
    port = raw.bind_to_random_port("tcp://127.0.0.1")
    sent = [1, 2, 3, 7, 8, 20]  # 3 missing after 3, 11 missing after 8
    try:
        async with (
            aoz.connect(connect=[f"tcp://127.0.0.1:{port}"]) as node,
            node.subscribe("GAP") as sub,
            node.subscribe("GAP.>") as other,
        ):
            with anyio.fail_after(10):
                while (await raw.recv()) != b"\x01GAP\x00":
                    pass
            for seq in sent:
                body = struct.pack("<I", seq)
                await raw.send(b"GAP\0\x01\0" + encode_header(0, 42, seq) + body)
            got = [await sub.next(timeout=5) for _ in sent]
            assert [m.sequence for m in got] == sent
            assert [m.gap for m in got] == [0, 0, 0, 3, 0, 11]
            assert all(m.publisher == 42 for m in got)
            st = sub.statistics()
            assert st.lost == 14 and st.dropped == 0 and st.received == len(sent)
            assert other.statistics().lost == 0  # not its subject
            assert node.statistics().lost_in == 14
    finally:
        raw.close(linger=0)


def test_an_unsent_frame_gives_its_number_back() -> None:
    """publish_nowait on a full blocking node rewinds, so a retry is not a false gap."""
    from aoz._protocol.builder import FrameBuilder

    fb = FrameBuilder(aoz.Codec.MSGPACK, publisher=5)
    frame = fb.publish("S", b"x")
    assert parse_header(frame, 4) == (0, 5, 1, 4 + HEADER_LEN)
    fb.rewind("S")
    assert parse_header(fb.publish("S", b"y"), 4) == (0, 5, 1, 4 + HEADER_LEN)


async def test_interleaved_publishers_on_one_subject_are_tracked_apart() -> None:
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.XPUB)
    port = raw.bind_to_random_port("tcp://127.0.0.1")
    # (publisher, number): B skips 3, A skips 4; a wrap from 2**32-1 to 0 is no loss
    sent = [(1, 1), (2, 1), (1, 2), (2, 2), (1, 3), (2, 4), (1, 5), (1, 6),
            (3, 2**32 - 1), (3, 0), (2, 5)]
    try:
        async with (
            aoz.connect(connect=[f"tcp://127.0.0.1:{port}"]) as node,
            node.subscribe("MIX") as sub,
        ):
            with anyio.fail_after(10):
                while (await raw.recv()) != b"\x01MIX\x00":
                    pass
            for pid, seq in sent:
                await raw.send(b"MIX\0\x01\0" + encode_header(0, pid, seq) + b"x")
            got = [await sub.next(timeout=5) for _ in sent]
            assert [(m.publisher, m.sequence) for m in got] == sent
            assert [m.gap for m in got] == [0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0]
            assert sub.statistics().lost == 2
    finally:
        raw.close(linger=0)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([b"A", b"B"]), st.integers(1, 3),
                          st.integers(0, 12)), max_size=60))
def test_tracker_matches_a_plain_model(events: list[tuple[bytes, int, int]]) -> None:
    """The hot path's split state (latest publisher apart) equals one plain table."""
    tracker = SequenceTracker()
    model: dict[tuple[bytes, int], int] = {}
    fast_hits = 0
    for subject, pid, seq in events:
        latest = tracker.last_seen.get(subject)
        if latest is not None and latest[0] == pid and seq == latest[1] + 1:
            latest[1] = seq  # what the data plane does without calling check()
            got = 0
            fast_hits += 1
        else:
            got = tracker.check(subject, pid, seq)
        assert got == gap(model.get((subject, pid)), seq)
        model[(subject, pid)] = seq
    assert tracker.count == len(model)
    assert fast_hits <= len(events)


def test_tracker_is_bounded() -> None:
    t = SequenceTracker(max_streams=10)
    for i in range(100):
        assert t.check(b"s%d" % i, 1, 5) == 0
        assert t.count <= 10


async def test_a_foreign_payload_outside_the_sequenced_range_is_not_taken_for_one(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    """A payload that is not aoz's (Verbatim, another program's bytes) may start with a
    byte of 0x10..0xff (0x04..0x0F are aoz's flagged codecs: sequence header, headers;
    0x80..0x83 were before the OZ-safe rule): with 12 bytes after it, it must not be read
    as a sequence header, or random 'numbers' would count as lost."""
    a, b = static_pair
    async with b.subscribe("FOREIGN") as sub:
        await a.wait_for_interest("FOREIGN")
        firsts = [*range(0x10, 0x20), *range(0x80, 0x84), 0x84, 0xC4, 0xFF]
        bodies = [bytes([firsts[i % len(firsts)]]) + struct.pack("<QI", 1000, 7 * i) + b"zz"
                  for i in range(50)]
        for body in bodies:
            await a.publish("FOREIGN", aoz.Verbatim(body))
        got = [await sub.next(timeout=5) for _ in range(50)]
        assert [m.data for m in got] == bodies
        assert all(m.sequence is None and m.gap == 0 for m in got)
        assert sub.statistics().lost == 0 and b.statistics().lost_in == 0
