"""Publish/subscribe between real nodes over loopback ZeroMQ sockets (static mode)."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

import aoz
from aoz._protocol.sequence import HEADER_LEN

pytestmark = pytest.mark.timeout(30)


class Quote(msgspec.Struct):
    symbol: str
    bid: float
    ask: float


async def collect(sub: aoz.Subscription, n: int, timeout: float = 5.0) -> list[aoz.Message]:
    out: list[aoz.Message] = []
    async with asyncio.timeout(timeout):
        async for msg in sub:
            out.append(msg)
            if len(out) == n:
                break
    return out


async def test_exact_subscription_between_two_nodes(static_pair: tuple[aoz.Node, aoz.Node]) -> None:
    a, b = static_pair
    async with b.subscribe("MD.NYSE.IBM") as sub:
        await a.wait_for_interest("MD.NYSE.IBM")
        await a.publish("MD.NYSE.IBMX", b"not me")  # longer subject: filtered at the publisher
        await a.publish("MD.NYSE.IBM", b"hello")
        [msg] = await collect(sub, 1)
    assert msg.subject == "MD.NYSE.IBM"
    assert msg.data == b"hello"
    assert msg.kind is aoz.Kind.PUBLISH
    assert msg.codec is aoz.Codec.RAW
    assert msg.reply is None


async def test_wildcards_see_real_subjects(static_pair: tuple[aoz.Node, aoz.Node]) -> None:
    a, b = static_pair
    subjects = ["MD.NYSE.IBM", "MD.NYSE.AAPL", "MD.LSE.VOD", "NEWS.IBM"]
    async with (
        b.subscribe("MD.NYSE.*") as star,
        b.subscribe("MD.>") as tail,
        b.subscribe(r"^MD\.(NYSE|LSE)\.V.*") as regex,
    ):
        await a.wait_for_interest("MD.LSE.VOD")  # only the later "MD." filter covers it
        for s in subjects:
            await a.publish(s, s.encode())
        got_star = await collect(star, 2)
        got_tail = await collect(tail, 3)
        got_regex = await collect(regex, 1)
    assert [m.subject for m in got_star] == ["MD.NYSE.IBM", "MD.NYSE.AAPL"]
    assert [m.subject for m in got_tail] == ["MD.NYSE.IBM", "MD.NYSE.AAPL", "MD.LSE.VOD"]
    assert [m.subject for m in got_regex] == ["MD.LSE.VOD"]
    assert all(m.data == m.subject.encode() for m in got_star + got_tail + got_regex)


async def test_many_subscriptions_each_get_a_message_once(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    async with b.subscribe("X.1") as s1, b.subscribe("X.1") as s2, b.subscribe("X.*") as s3:
        await a.wait_for_interest("X.end")  # the last filter (X.*); filters arrive in order
        await a.publish("X.1", b"one")
        await a.publish("X.end", b"end")
        for sub in (s1, s2):
            [m] = await collect(sub, 1)
            assert m.data == b"one"
        got = await collect(s3, 2)
        assert [m.data for m in got] == [b"one", b"end"]
        assert s1.pending == 0 and s2.pending == 0


async def test_typed_payloads(static_pair: tuple[aoz.Node, aoz.Node]) -> None:
    a, b = static_pair
    async with b.subscribe("Q.>") as sub:
        await a.wait_for_interest("Q.x")
        await a.publish("Q.struct", Quote("IBM", 1.0, 1.1))
        await a.publish("Q.dict", {"symbol": "AAPL", "bid": 2.0, "ask": 2.5})
        await a.publish("Q.json", {"n": 1}, codec=aoz.Codec.JSON)
        await a.publish("Q.text", "héllo")
        got = await collect(sub, 4)
    assert got[0].codec is aoz.Codec.MSGPACK
    assert got[0].decode(Quote) == Quote("IBM", 1.0, 1.1)
    assert got[1].decode(Quote) == Quote("AAPL", 2.0, 2.5)
    assert got[2].codec is aoz.Codec.JSON and got[2].data == b'{"n":1}'
    assert got[2].decode() == {"n": 1}
    assert got[3].decode() == "héllo"
    with pytest.raises(aoz.DecodeError):
        got[3].decode(Quote)


async def test_self_delivery() -> None:
    async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node, node.subscribe("me.too") as sub:
        await node.wait_for_interest("me.too")
        await node.publish("me.too", b"x")
        [m] = await collect(sub, 1)
    assert m.data == b"x"


async def test_bad_arguments_raise_aoz_errors(static_pair: tuple[aoz.Node, aoz.Node]) -> None:
    a, _ = static_pair
    with pytest.raises(aoz.SubjectError, match="256"):
        await a.publish("x" * 257, b"")
    with pytest.raises(aoz.SubjectError):
        await a.publish("", b"")
    with pytest.raises(aoz.SubjectError):
        await a.publish("a\0b", b"")
    with pytest.raises(aoz.SubjectError):
        await a.publish(42, b"")  # type: ignore[arg-type]
    with pytest.raises(aoz.SubjectError, match="reserved"):
        await a.publish("_INBOX.x", b"")
    with pytest.raises(aoz.SubjectError):
        a.subscribe("a.>.b")
    with pytest.raises(aoz.SubjectError):
        a.subscribe("^(unclosed")
    with pytest.raises(aoz.EncodeError):
        await a.publish("ok", object())
    with pytest.raises(aoz.ConfigError):
        aoz.connect(bind=["tcp://127.0.0.1:*"], queue_size=0)


async def test_bounded_subscription_under_flood_counts_drops(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    total = 5000
    async with (
        b.subscribe("flood", queue_size=100) as newest,
        b.subscribe("flood", queue_size=100, overflow="drop_oldest") as oldest,
        b.subscribe("flood.end") as end,
    ):
        await a.wait_for_interest("flood.end")  # the last filter; filters arrive in order
        for i in range(total):
            a.publish_nowait("flood", i.to_bytes(4, "big"))
        await a.publish("flood.end", b"")
        await end.next(timeout=5)  # every earlier frame has been drained by now
        s_new, s_old = newest.statistics(), oldest.statistics()
        assert s_new.pending == 100 and s_old.pending == 100  # memory is bounded
        assert s_new.received == total and s_old.received == total
        assert s_new.dropped == total - 100 and s_old.dropped == total - 100
        first_new = [int.from_bytes(m.data, "big") for m in await collect(newest, 100)]
        first_old = [int.from_bytes(m.data, "big") for m in await collect(oldest, 100)]
    assert first_new == list(range(100))  # drop_newest keeps the head
    assert first_old == list(range(total - 100, total))  # drop_oldest keeps the tail


async def test_batches_api(static_pair: tuple[aoz.Node, aoz.Node]) -> None:
    a, b = static_pair
    async with b.subscribe("batch") as sub:
        await a.wait_for_interest("batch")
        for i in range(300):
            a.publish_nowait("batch", str(i))
        seen: list[str] = []
        async with asyncio.timeout(5):
            async for batch in sub.batches(128):
                assert 1 <= len(batch) <= 128
                seen.extend(m.decode() for m in batch)
                if len(seen) == 300:
                    break
    assert seen == [str(i) for i in range(300)]


async def test_statistics_count_traffic(static_pair: tuple[aoz.Node, aoz.Node]) -> None:
    a, b = static_pair
    async with b.subscribe("stat") as sub:
        await a.wait_for_interest("stat")
        await a.publish("stat", b"12345")
        await sub.next(timeout=5)
    sa, sb = a.statistics(), b.statistics()
    # the frame: header, then aoz's 13-byte sequence header (codec, publisher, number), body
    assert sa.messages_out == 1 and sa.bytes_out == len(b"stat\0\x01\0") + HEADER_LEN + 5
    assert sb.messages_in >= 1 and sb.bytes_in >= sa.bytes_out
