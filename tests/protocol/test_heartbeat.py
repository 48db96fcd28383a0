"""Publisher heartbeats, the pure parts: the frame (encode/decode, strict), the schedule
(which subjects a tick announces, ``now`` passed in), the tracker's ``advance``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aoz._mesh.heartbeat import Heartbeats
from aoz._protocol import heartbeat as hb
from aoz._protocol.builder import FrameBuilder
from aoz._protocol.codecs import Codec
from aoz._protocol.frames import Kind, decode_frame
from aoz._protocol.sequence import SequenceTracker
from aoz.errors import DecodeError

subjects = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)),
                   min_size=1, max_size=60).map(str.encode).filter(lambda b: len(b) <= 256)
items = st.lists(st.tuples(subjects, st.integers(0, 2**32 - 1)), min_size=1, max_size=300)


@settings(max_examples=200, deadline=None)
@given(items=items, publisher=st.integers(0, 2**64 - 1),
       max_frame=st.sampled_from([300, 1024, hb.MAX_FRAME]))
def test_frames_round_trip_in_order_each_within_the_bound(
    items: list[tuple[bytes, int]], publisher: int, max_frame: int
) -> None:
    frames = hb.encode(publisher, items, max_frame)
    out: list[tuple[bytes, int]] = []
    for frame in frames:
        assert len(frame) <= max_frame
        fr = decode_frame(frame)  # a well-formed publish frame (SPEC §1)
        assert fr.kind is Kind.PUBLISH and fr.subject == hb.SUBJECT
        payload = frame[fr.payload_start:]
        assert payload[0] == hb.FIRST_BYTE
        pid, entries = hb.decode(payload)
        assert pid == publisher
        out.extend(entries)
    assert out == items


def test_many_subjects_are_batched_into_few_bounded_frames() -> None:
    items = [(f"MD.SUBJECT.{i:05d}".encode(), i + 1) for i in range(10_000)]
    frames = hb.encode(1, items)
    assert all(len(f) <= hb.MAX_FRAME for f in frames)
    body = sum(2 + len(s) + 4 for s, _ in items)  # 220,000 bytes of entries
    head = len(hb.SUBJECT_HEADER) + 12
    # each frame is filled to within one 22-byte entry of the bound: 27 frames
    assert all(len(f) > hb.MAX_FRAME - 22 for f in frames[:-1])
    assert len(frames) == -(-body // (hb.MAX_FRAME - head - 21)) == 27


@settings(max_examples=300, deadline=None)
@given(junk=st.binary(max_size=64))
def test_decode_refuses_junk_with_decode_error_only(junk: bytes) -> None:
    try:
        hb.decode(junk)
    except DecodeError:
        pass


@settings(max_examples=300, deadline=None)
@given(items=items, cut=st.integers(0, 10_000), flip=st.integers(0, 255))
def test_every_truncation_and_mutation_is_refused_or_decodes_exactly(
    items: list[tuple[bytes, int]], cut: int, flip: int
) -> None:
    payload = hb.encode(3, items[:5])[0][len(hb.SUBJECT_HEADER):]
    cut %= len(payload)
    with pytest.raises(DecodeError):
        hb.decode(payload[:cut])
    mutated = bytearray(payload)
    mutated[cut] ^= flip or 1
    try:
        _pid, entries = hb.decode(bytes(mutated))
    except DecodeError:
        return
    # a mutation inside a subject or a number still has the exact layout
    assert len(entries) == len(items[:5])


class E:
    def __init__(self, seq: int) -> None:
        self.seq = seq


def test_schedule_announces_quiet_subjects_for_the_window_only() -> None:
    s = hb.HeartbeatSchedule(window=3.0)
    entries = {"A": E(1), "B": E(0)}  # B never numbered (an omnm-only subject)
    assert s.tick(entries, 0.0) == []  # A just published: not quiet
    assert s.tick(entries, 1.0) == [("A", 1)]
    entries["A"].seq = 4  # published again between ticks
    entries["C"] = E(7)
    assert s.tick(entries, 2.0) == []  # both moved since the last tick
    assert s.tick(entries, 3.0) == [("A", 4), ("C", 7)]
    assert s.tick(entries, 5.0) == [("A", 4), ("C", 7)]  # 3 s after they moved: in
    assert s.recent == 2
    assert s.tick(entries, 5.5) == []  # past the window: nothing, ever again
    assert s.recent == 0
    assert s.tick(entries, 100.0) == []
    entries["C"].seq = 8
    assert s.tick(entries, 101.0) == []
    assert s.tick(entries, 102.0) == [("C", 8)]


def test_schedule_keeps_subjects_the_builder_let_go() -> None:
    """The frame builder clears its entries past 8,192 subjects: a subject missing from
    them was not published since, and is still announced for the window."""
    s = hb.HeartbeatSchedule(window=10.0)
    assert s.tick({"A": E(2)}, 0.0) == []
    assert s.tick({}, 1.0) == [("A", 2)]
    assert s.tick({"A": E(2)}, 2.0) == [("A", 2)]  # back with the same number: quiet


def test_the_task_sends_a_tick_s_frames_and_counts_what_is_refused() -> None:
    fb = FrameBuilder(Codec.MSGPACK, publisher=99)
    for i in range(3000):
        fb.publish(f"MD.S{i}", b"x")
    fb.publish("MD.S0", b"y")
    sent: list[bytes] = []
    refuse = [False]

    def send(frame: bytes) -> bool:
        if refuse[0]:
            return False
        sent.append(frame)
        return True

    beats = Heartbeats(fb, send, interval=1.0, window=30.0)
    assert beats.tick(0.0) == 0 and not sent
    n = beats.tick(1.0)
    assert n == len(sent) > 1 and beats.sent == n
    got = dict(e for f in sent for e in hb.decode(f[len(hb.SUBJECT_HEADER):])[1])
    assert len(got) == 3000 and got[b"MD.S0"] == 2 and got[b"MD.S1"] == 1
    refuse[0] = True
    assert beats.tick(2.0) == 0 and beats.refused == n and beats.sent == n
    assert Heartbeats(FrameBuilder(Codec.MSGPACK), send, interval=1.0,
                      window=1.0).tick(5.0) == 0  # an unsequenced node announces nothing


def test_subjects_the_builder_lets_go_between_ticks_are_announced() -> None:
    """Past its header cache's bound the builder clears its entries, maybe several
    times between two ticks: every subject published since the last tick is still
    announced once quiet, with its last number."""
    fb = FrameBuilder(Codec.MSGPACK, publisher=5, cache_max=4)
    sent: list[bytes] = []
    beats = Heartbeats(fb, lambda f: sent.append(f) is None, interval=1.0, window=30.0)
    for i in range(10):
        fb.publish(f"S{i}", b"x")
    fb.publish("S0", b"x")  # number 2, in a fresh entry
    assert len(fb.entries) < 10  # the cache let most of them go
    assert beats.tick(0.0) == 0  # all moved since the last tick
    assert beats.tick(1.0) >= 1
    got = dict(e for f in sent for e in hb.decode(f[len(hb.SUBJECT_HEADER):])[1])
    assert got == {f"S{i}".encode(): 1 for i in range(1, 10)} | {b"S0": 2}
    off = FrameBuilder(Codec.MSGPACK, publisher=5, cache_max=4)
    Heartbeats(off, lambda f: True, interval=0.0, window=30.0)
    assert off.on_release is None  # heartbeats off: nothing kept for them


def test_no_tick_while_numbered_frames_wait_to_be_sent() -> None:
    """send_policy="block": a publish waiting for room holds a numbered frame; a
    heartbeat then would announce a number ahead of the wire (a false lost tail, and
    the frame itself later seen as a restarted stream)."""
    fb = FrameBuilder(Codec.MSGPACK, publisher=5)
    waiting = [True]
    sent: list[bytes] = []
    beats = Heartbeats(fb, lambda f: sent.append(f) is None, interval=1.0, window=30.0,
                       busy=lambda: waiting[0])
    fb.publish("S", b"x")
    assert beats.tick(0.0) == 0 and beats.tick(1.0) == 0 and beats.tick(2.0) == 0
    waiting[0] = False
    assert beats.tick(3.0) == 0  # first seen now: moved since the last tick
    assert beats.tick(4.0) == 1 and hb.decode(sent[0][len(hb.SUBJECT_HEADER):])[1] == [
        (b"S", 1)]


def test_tracker_advance_moves_known_streams_only() -> None:
    t = SequenceTracker()
    assert t.advance(b"S", 1, 5) == 0  # unknown: a heartbeat never starts a stream
    assert t.last_seen == {}
    t.check(b"S", 1, 3)
    t.check(b"S", 2, 10)  # publisher 2 is now the latest, 1 goes to the side table
    assert t.advance(b"S", 1, 5) == 2  # 4, 5
    assert t.advance(b"S", 1, 5) == 0  # said again: nothing new
    assert t.advance(b"S", 2, 9) == 0  # behind: overtaken by its own messages
    assert t.advance(b"S", 2, 12) == 2
    assert t.check(b"S", 1, 6) == 0 and t.check(b"S", 2, 13) == 0  # no double count
    assert t.advance(b"S", 3, 50) == 0  # a publisher never seen on S
    t.check(b"W", 1, 2**32 - 1)
    assert t.advance(b"W", 1, 1) == 2  # across the wrap: 0, 1


@settings(max_examples=500, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["pub", "pub", "pub", "beat"]),
                                st.booleans()), max_size=80))
def test_gaps_and_tails_together_count_each_loss_exactly_once(
    steps: list[tuple[str, bool]],
) -> None:
    """One publisher, in order: each publication arrives or is lost; a heartbeat (which
    may itself be lost) announces the last number so far. What the tracker reports
    (gaps on arrival + tails from heartbeats) is exactly what is known missing:
    every number up to the highest one arrived or announced, minus what arrived."""
    t = SequenceTracker()
    seq = 0
    arrived = 0
    known = 0  # highest number the subscriber has seen, by a message or a heartbeat
    first: int | None = None  # the stream starts at the first message that arrives
    reported = 0
    for kind, delivered in steps:
        if kind == "pub":
            seq += 1
            if delivered:
                reported += t.check(b"S", 9, seq)
                arrived += 1
                first = seq if first is None else first
                known = max(known, seq)
        elif delivered and seq:
            reported += t.advance(b"S", 9, seq)
            if first is not None:
                known = max(known, seq)
    expected = 0 if first is None else known - first + 1 - arrived
    assert reported == expected
