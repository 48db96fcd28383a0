"""The publisher cache (aoz._mesh.cache) and its query/reply format
(aoz._protocol.cachequery): round trips, strict parsing, bounds. Pure."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aoz
from aoz._mesh.cache import CacheAnswers, PublishCache
from aoz._protocol.builder import FrameBuilder
from aoz._protocol.cachequery import (
    HISTORY,
    LAST,
    MAX_CHUNK,
    NO_CACHE,
    RANGE,
    CacheQuery,
    decode_query,
    decode_reply,
    encode_query,
    encode_reply,
)
from aoz._protocol.codecs import Codec

patterns = st.text(min_size=1, max_size=40).filter(lambda t: len(t.encode()) <= 1024)
queries = st.one_of(
    st.builds(lambda p, r, n, pub: CacheQuery(kind=HISTORY, pattern=p, regex=r, n=n,
                                                publisher=pub),
              patterns, st.booleans(), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)),
    st.builds(lambda p, pub, f, c: CacheQuery(kind=RANGE, pattern=p, publisher=pub, first=f,
                                                count=c),
              patterns, st.integers(1, 2**64 - 1), st.integers(0, 2**32 - 1),
              st.integers(1, 2**32 - 1)),
)


@settings(max_examples=300, deadline=None)
@given(q=queries)
def test_queries_round_trip(q: CacheQuery) -> None:
    assert decode_query(encode_query(q)) == q


@settings(max_examples=300, deadline=None)
@given(q=queries, data=st.data())
def test_a_damaged_query_raises_decode_error_only(q: CacheQuery, data: st.DataObject) -> None:
    raw = encode_query(q)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(aoz.DecodeError):
        decode_query(raw[:cut])
    i = data.draw(st.integers(0, len(raw) - 1))
    mutated = raw[:i] + bytes([data.draw(st.integers(0, 255))]) + raw[i + 1:]
    try:
        decode_query(mutated)  # may still be a valid query; never another exception
    except aoz.DecodeError:
        pass
    with pytest.raises(aoz.DecodeError):
        decode_query(raw + b"x")


@settings(max_examples=200, deadline=None)
@given(pub=st.integers(0, 2**64 - 1), frames=st.lists(st.binary(max_size=300), max_size=20),
       flags=st.sampled_from([0, NO_CACHE]))
def test_replies_round_trip(pub: int, frames: list[bytes], flags: int) -> None:
    chunks = encode_reply(pub, frames, flags)
    decoded = [decode_reply(c) for c in chunks]
    assert [e for r in decoded for e in r.entries] == frames
    assert [r.last for r in decoded] == [False] * (len(chunks) - 1) + [True]
    assert decoded[-1].flags == flags | LAST
    assert all(r.publisher == pub for r in decoded)
    assert [r.chunk for r in decoded] == list(range(len(chunks)))


def test_a_big_answer_is_cut_into_bounded_chunks() -> None:
    frames = [bytes(100_000)] * 25 + [bytes(MAX_CHUNK + 10)]  # one bigger than a chunk
    chunks = encode_reply(7, frames)
    assert len(chunks) > 2
    assert all(len(c) <= MAX_CHUNK + 64 for c in chunks[:-1])
    assert [e for c in chunks for e in decode_reply(c).entries] == frames


@settings(max_examples=300, deadline=None)
@given(frames=st.lists(st.binary(max_size=40), max_size=6), data=st.data())
def test_a_damaged_reply_raises_decode_error_only(frames: list[bytes],
                                                  data: st.DataObject) -> None:
    [raw] = encode_reply(3, frames)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(aoz.DecodeError):
        decode_reply(raw[:cut])
    i = data.draw(st.integers(0, len(raw) - 1))
    mutated = raw[:i] + bytes([data.draw(st.integers(0, 255))]) + raw[i + 1:]
    try:
        decode_reply(mutated)
    except aoz.DecodeError:
        pass
    with pytest.raises(aoz.DecodeError):
        decode_reply(raw, max_size=len(raw) - 1)


def _frames(builder: FrameBuilder, subject: str, n: int) -> list[bytes]:
    return [builder.publish(subject, f"{subject}{i}".encode()) for i in range(n)]


def test_the_cache_keeps_the_last_n_per_subject_and_counts_evictions() -> None:
    b = FrameBuilder(Codec.MSGPACK, publisher=5)
    c = PublishCache(3, 1 << 20)
    for f in _frames(b, "A", 10):
        c.add("A", f)
    c.add("B", b.publish("B", b"b"))
    assert [f[-2:] for f in c.latest("A", 10)] == [b"A7", b"A8", b"A9"]
    assert c.frames == 4 and c.subjects == 2 and c.evicted == 7
    assert c.nbytes == sum(len(f) for f in c.latest("A", 3)) + len(c.latest("B", 1)[0])
    assert [f[-2:] for f in c.between("A", 8, 5)] == [b"A7", b"A8", b"A9"]  # 8..12
    assert c.between("A", 1, 7) == [] and c.between("Z", 1, 1) == []


def test_the_byte_bound_evicts_round_robin_and_holds() -> None:
    b = FrameBuilder(Codec.MSGPACK, publisher=5)
    c = PublishCache(100, 2000)
    for i in range(200):
        s = f"S{i % 4}"
        c.add(s, b.publish(s, bytes(50)))
        assert c.nbytes <= 2000
    assert c.subjects == 4 and c.evicted == 200 - c.frames
    assert c.nbytes == sum(len(f) for s in ("S0", "S1", "S2", "S3") for f in c.latest(s, 100))
    counts = [len(c.latest(f"S{i}", 100)) for i in range(4)]
    assert max(counts) - min(counts) <= 1  # no subject starved


def test_answers_history_range_other_publishers_and_junk() -> None:
    b = FrameBuilder(Codec.MSGPACK, publisher=9)
    cache = PublishCache(2, 1 << 20)
    for s in ("MD.A", "MD.B", "FX.C"):
        for f in _frames(b, s, 3):
            cache.add(s, f)
    answers = CacheAnswers(cache, 9)
    [chunk] = answers.answer(encode_query(CacheQuery(kind=HISTORY, pattern="MD.>", n=1))) or []
    assert [e[-4:] for e in decode_reply(chunk).entries] == [b"MD.A2"[-4:], b"MD.B2"[-4:]]
    [chunk] = answers.answer(encode_query(CacheQuery(kind=HISTORY, pattern=r"^FX\..*",
                                                     regex=True, n=5))) or []
    assert len(decode_reply(chunk).entries) == 2
    [chunk] = answers.answer(encode_query(CacheQuery(kind=RANGE, pattern="MD.A", publisher=9,
                                                     first=2, count=1))) or []
    assert [e[-5:] for e in decode_reply(chunk).entries] == [b"MD.A1"]
    # another publisher's range: silent; junk: silent and counted
    assert answers.answer(encode_query(CacheQuery(kind=RANGE, pattern="MD.A", publisher=8,
                                                  first=1, count=1))) is None
    assert answers.answer(b"\x1cjunk") is None
    bad = CacheQuery(kind=HISTORY, pattern="(unclosed", regex=True, n=1)
    assert answers.answer(encode_query(bad)) is None
    assert answers.malformed == 2 and answers.queries == 4
    # no cache: an empty answer that says so
    [chunk] = CacheAnswers(None, 9).answer(
        encode_query(CacheQuery(kind=HISTORY, pattern=">", n=1))) or []
    r = decode_reply(chunk)
    assert r.entries == [] and r.flags == LAST | NO_CACHE
