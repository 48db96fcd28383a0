"""The OZ-safe first-byte rule (issue #20): nothing aoz emits on its own can crash or
confuse an OZ/OpenMAMA receiver.

An OZ program hands a payload's first byte to OpenMAMA's ``mamaInternal_findPayload``,
which returns NULL for ``'\\0'`` and otherwise reads ``byChar[(uint8_t)id]`` from a
127-entry table with no bounds check. The model below says what each byte does there;
every payload aoz builds by itself must land on "refused".
"""

from __future__ import annotations

import asyncio
import string

import anyio
import msgspec
import pytest
import zmq
import zmq.asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

import aoz
from aoz._protocol import heartbeat as hb
from aoz._protocol.builder import FrameBuilder
from aoz._protocol.codecs import Codec, Verbatim, encode_payload
from aoz._protocol.frames import Kind, decode_frame, make_handle
from aoz._protocol.packed import pack_rows
from aoz.spark.sidecar import ChunkError, decode_chunk, encode_chunk

#: payload ids of OpenMAMA 6.3.1's mama/msg.h (mamaPayloadType)
OPENMAMA_IDS = frozenset(b"15ABFHIKLNPQRSTVWXU")
MAMA_PAYLOAD_MAX = 127  # CHAR_MAX: byChar's size


def openmama_dispatch(first: int) -> str:
    """What OpenMAMA does with a payload whose first byte is ``first``.

    ``"refused"``: no bridge (NULL, or an empty table slot that no bridge can take: a
    control byte); ``"parsed"``: a bridge may own it (a listed id, or any printable
    character, which a dynamically loaded bridge may register); ``"undefined"``: read
    past the end of ``byChar`` (what crashed OZ programs).
    """
    if first == 0:
        return "refused"
    if first >= MAMA_PAYLOAD_MAX:
        return "undefined"
    if first in OPENMAMA_IDS or chr(first) in string.printable.strip():
        return "parsed"
    return "refused"


def test_the_model_matches_what_the_issue_measured() -> None:
    assert openmama_dispatch(0x80) == openmama_dispatch(0x81) == "undefined"  # the crashes
    assert openmama_dispatch(ord("O")) == "parsed"  # omnm: only when asked for
    assert openmama_dispatch(0x01) == openmama_dispatch(0x07) == "refused"


class Quote(msgspec.Struct):
    symbol: str
    bid: float


payloads = st.one_of(
    st.binary(max_size=40),
    st.binary(max_size=40).map(bytearray),
    st.binary(max_size=40).map(memoryview),
    st.text(max_size=20),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.none(),
    st.booleans(),
    st.lists(st.integers(0, 9), max_size=5),
    st.dictionaries(st.text(max_size=5), st.integers(0, 9), max_size=4),
    st.builds(Quote, st.text(max_size=5), st.floats(allow_nan=False)),
)
codecs = st.sampled_from([None, Codec.RAW, Codec.MSGPACK, Codec.JSON, Codec.TEXT])
defaults = st.sampled_from([Codec.MSGPACK, Codec.JSON])


def _first(payload: bytes) -> int:
    return payload[0] if payload else 0  # an empty payload: OpenMAMA sees no id


def _payload(frame: bytes) -> bytes:
    return frame[decode_frame(frame).payload_start :]


def _encodable(data: object, codec: Codec | None, default: Codec) -> bytes | None:
    try:
        return encode_payload(data, codec, default=default)
    except aoz.EncodeError:
        return None  # refused before anything is built: nothing reaches the wire


@settings(max_examples=400, deadline=None)
@given(data=payloads, codec=codecs, default=defaults, sequenced=st.booleans(),
       subject=st.sampled_from(["A", "MD.NYSE.IBM", "x" * 200]))
def test_every_publish_request_and_reply_starts_with_a_refused_byte(
    data: object, codec: Codec | None, default: Codec, sequenced: bool, subject: str
) -> None:
    if _encodable(data, codec, default) is None:
        return
    builder = FrameBuilder(default, publisher=2**64 - 1 if sequenced else None)
    frames = [
        builder.publish(subject, data, codec),
        builder.publish(subject, data, codec),  # the second number too
        builder.request(subject, make_handle("3669840e-d043-11ea-adc2-fcaa146e6b01", 7),
                        builder.payload(data, codec)),
        builder.reply(make_handle("3669840e-d043-11ea-adc2-fcaa146e6b01", 8), data, codec),
        *builder.publish_many(subject, [data, data], codec),
    ]
    for frame in frames:
        payload = _payload(frame)
        assert openmama_dispatch(_first(payload)) == "refused", (frame, payload[:1])


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.dictionaries(st.text(max_size=4), st.integers(-(2**63), 2**63 - 1),
                                     max_size=3),
                     min_size=1, max_size=12),
       codec=st.sampled_from([Codec.MSGPACK, Codec.JSON]),
       pack=st.sampled_from([1, 2, 3, 1000]), grouped=st.booleans())
def test_the_sinks_frames_start_with_a_refused_byte(rows: list[dict[str, int]],
                                                    codec: Codec, pack: int,
                                                    grouped: bool) -> None:
    # pack > 1: the sidecar's packed frames (0x10|codec), plain or grouped by subject
    enc = msgspec.msgpack.encode if codec is Codec.MSGPACK else msgspec.json.encode
    index = sorted(i % 2 for i in range(len(rows))) if grouped else [i % 2 for i in
                                                                     range(len(rows))]
    parts = encode_chunk(int(codec), ["OUT.A", "OUT.B"], index, [enc(r) for r in rows], pack)
    for frame in decode_chunk(parts, {}):
        assert openmama_dispatch(_first(_payload(frame))) == "refused"


@pytest.mark.parametrize("codec", [Codec.RAW, Codec.MSGPACK, Codec.JSON, Codec.TEXT])
def test_packed_payloads_start_with_a_refused_byte(codec: Codec) -> None:
    first = pack_rows(int(codec), [b"a", b"b"])[0]
    assert 0x10 <= first <= 0x13 and openmama_dispatch(first) == "refused"


@pytest.mark.parametrize("codec", [0x04, 0x4F, 0x80, 0xFF])
def test_the_sidecar_refuses_a_chunk_that_would_send_another_first_byte(codec: int) -> None:
    with pytest.raises(ChunkError):
        decode_chunk(encode_chunk(codec, ["OUT"], [0], [b"x"]), {})


def test_only_omnm_and_verbatim_send_another_first_byte() -> None:
    b = FrameBuilder(Codec.MSGPACK, publisher=1)
    omnm_payload = _payload(b.publish("A", {"bid": 1.5}, Codec.OMNM))
    assert omnm_payload[:1] == b"O"  # OpenMAMA's own omnm id, as OZ programs send it
    verbatim = _payload(b.publish("A", Verbatim(b"\xffcaller's bytes")))
    assert verbatim == b"\xffcaller's bytes"  # the caller's choice (see Verbatim's warning)


async def test_a_default_node_sends_an_oz_subscriber_only_refused_first_bytes() -> None:
    """A default node (sequence on, msgpack default) publishes every payload type to a
    raw ZeroMQ SUB shaped like an OZ program's: an exact subject, and a catch-all."""
    ctx = zmq.asyncio.Context()
    raw = ctx.socket(zmq.SUB)
    sent: list[object] = [b"raw", bytearray(b"ba"), memoryview(b"mv"), "text", {"a": 1},
                          [1, 2], 3, 2.5, None, True, Quote("IBM", 1.0), b""]
    try:
        async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
            raw.setsockopt(zmq.SUBSCRIBE, b"OZ.")
            raw.connect(node.endpoint)
            await node.wait_for_interest("OZ.X", timeout=10)
            for i, data in enumerate(sent):
                await node.publish(f"OZ.X{i % 3}", data)
            await node.publish("OZ.J", {"a": 1}, codec=Codec.JSON)
            frames = [await asyncio.wait_for(raw.recv(), 5) for _ in range(len(sent) + 1)]
    finally:
        raw.close(linger=0)
        ctx.term()
    firsts = {_first(_payload(f)) for f in frames}
    assert all(decode_frame(f).kind is Kind.PUBLISH for f in frames)
    assert firsts and all(b < 0x7F and openmama_dispatch(b) == "refused" for b in firsts), firsts


@settings(max_examples=100, deadline=None)
@given(entries=st.lists(st.tuples(st.text(min_size=1, max_size=40).map(str.encode)
                                  .filter(lambda b: b"\0" not in b and len(b) <= 256),
                                  st.integers(0, 2**32 - 1)), min_size=1, max_size=50),
       publisher=st.integers(0, 2**64 - 1))
def test_publisher_heartbeats_start_with_a_refused_byte(
    entries: list[tuple[bytes, int]], publisher: int
) -> None:
    """A heartbeat (issue #21) is a publish frame on ``_AOZ.HB``: an OZ program that
    subscribes to everything receives it, and OpenMAMA must refuse its payload."""
    for frame in hb.encode(publisher, entries, 512):
        assert decode_frame(frame).kind is Kind.PUBLISH
        assert openmama_dispatch(_first(_payload(frame))) == "refused"


async def test_an_oz_catch_all_subscriber_gets_only_refused_heartbeats() -> None:
    """A node's real heartbeats, read by a catch-all SUB as an OZ program would."""
    ctx = zmq.asyncio.Context()
    raw = ctx.socket(zmq.SUB)
    try:
        async with aoz.connect(bind=["tcp://127.0.0.1:*"], publisher_heartbeat=0.1) as node:
            raw.setsockopt(zmq.SUBSCRIBE, b"")
            raw.connect(node.endpoint)
            await node.wait_for_interest("OZ.HB", timeout=10)
            await node.publish("OZ.HB", {"a": 1})
            frames: list[bytes] = []
            with anyio.fail_after(10):
                while not any(f.startswith(hb.FILTER) for f in frames):
                    frames.append(await raw.recv())
    finally:
        raw.close(linger=0)
        ctx.term()
    beats = [f for f in frames if f.startswith(hb.FILTER)]
    assert all(openmama_dispatch(_first(_payload(f))) == "refused" for f in beats)
    assert _first(_payload(beats[0])) == hb.FIRST_BYTE


@settings(max_examples=100, deadline=None)
@given(pattern=st.text(min_size=1, max_size=30).filter(lambda t: len(t.encode()) <= 1024),
       n=st.integers(0, 2**32 - 1), pub=st.integers(1, 2**64 - 1),
       frames=st.lists(st.binary(max_size=64), max_size=5))
def test_cache_queries_and_replies_start_with_a_refused_byte(
    pattern: str, n: int, pub: int, frames: list[bytes]
) -> None:
    """Cache queries and their answers (aoz._mesh.cache, issue #21) travel as request and reply
    payloads: an OZ program subscribed to everything would see them."""
    from aoz._protocol.cachequery import CacheQuery, encode_query, encode_reply

    q = encode_query(CacheQuery(kind=1, pattern=pattern, n=n))
    r = encode_query(CacheQuery(kind=2, pattern=pattern, publisher=pub, first=n, count=1))
    for payload in (q, r, *encode_reply(pub, frames), *encode_reply(pub, [], 0x02)):
        assert openmama_dispatch(_first(payload)) == "refused", payload[:1]


async def test_a_caching_node_answers_an_oz_subscriber_only_refused_first_bytes() -> None:
    """A node with a cache, queried for its history by another: a raw catch-all SUB (an
    OZ program's) connected to both sees the query and the answers."""
    ctx = zmq.asyncio.Context()
    raw = ctx.socket(zmq.SUB)
    try:
        async with aoz.connect(bind=["tcp://127.0.0.1:*"], publish_cache=2) as pub:
            await pub.publish("OZ.C", {"a": 1})
            async with aoz.connect(bind=["tcp://127.0.0.1:*"], connect=[pub.endpoint]) as sub:
                pub.connect_endpoint(sub.endpoint)
                raw.setsockopt(zmq.SUBSCRIBE, b"")
                raw.connect(pub.endpoint)
                raw.connect(sub.endpoint)
                await pub.wait_for_interest("ANY.THING", timeout=10)
                await sub.wait_for_interest("ANY.THING", timeout=10)
                async with sub.subscribe("OZ.>", history=1) as s:
                    m = await s.next(timeout=5)
                assert m.replayed
                frames = []
                for _ in range(50):  # the query (sub's PUB) and two answers (pub's, sub's)
                    try:
                        frames.append(await asyncio.wait_for(raw.recv(), 0.5))
                    except TimeoutError:
                        break
    finally:
        raw.close(linger=0)
        ctx.term()
    kinds = {decode_frame(f).kind for f in frames}
    assert {Kind.REQUEST, Kind.REPLY} <= kinds, kinds
    for f in frames:
        assert openmama_dispatch(_first(_payload(f))) == "refused", f[:80]
