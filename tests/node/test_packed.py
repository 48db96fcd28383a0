"""Packed frames (several rows of one subject in one ZeroMQ frame, what the Spark sink's
sidecar sends; aoz._protocol.packed): the receiving node unpacks them, so `async for`
sees one message per row and the subscription counts rows, dropped or not."""

from __future__ import annotations

import asyncio

import msgspec

import aoz
from aoz._protocol.codecs import Codec
from aoz._protocol.frames import encode_publish
from aoz._protocol.packed import pack_rows

ENC = msgspec.msgpack.encode


def packed(subject: str, values: list[object]) -> bytes:
    return encode_publish(subject.encode(), pack_rows(int(Codec.MSGPACK), [ENC(v) for v in values]))


async def drain(sub: aoz.Subscription, n: int) -> list[aoz.Message]:
    out: list[aoz.Message] = []
    async with asyncio.timeout(5):
        async for batch in sub.batches(64):
            out += batch
            if len(out) >= n:
                break
    return out


async def test_a_packed_frame_arrives_as_one_message_per_row_in_order(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    async with b.subscribe("P.>") as sub, b.subscribe("P.end") as end:
        await a.wait_for_interest("P.end")
        frames = [packed("P.a", [{"i": i} for i in range(5)]),
                  encode_publish(b"P.b", b"\x01" + ENC({"i": 5})),  # a plain frame between
                  packed("P.a", [{"i": i} for i in range(6, 9)])]
        assert await a.publish_frames(frames) == 3
        await a.publish("P.end", b"")
        await end.next(timeout=5)
        got = [await sub.next(timeout=5) for _ in range(9)]
        stats = sub.statistics()
    assert [m.decode() for m in got[:9]] == [{"i": i} for i in range(9)]
    assert [m.subject for m in got[:9]] == ["P.a"] * 5 + ["P.b"] + ["P.a"] * 3
    assert all(m.codec is Codec.MSGPACK and m.kind is aoz.Kind.PUBLISH for m in got)
    assert got[0].data == ENC({"i": 0}) and got[0].payload == b"\x01" + ENC({"i": 0})
    assert stats.received == 10 and stats.dropped == 0 and stats.pending == 1  # + P.end


async def test_rows_of_packed_frames_are_counted_one_by_one_when_dropped(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    async with (
        b.subscribe("D.x", queue_size=10) as newest,
        b.subscribe("D.x", queue_size=10, overflow="drop_oldest") as oldest,
        b.subscribe("D.end") as end,
    ):
        await a.wait_for_interest("D.end")
        await a.publish_frames([packed("D.x", list(range(i, i + 7))) for i in range(0, 28, 7)])
        await a.publish("D.end", b"")
        await end.next(timeout=5)
        s_new, s_old = newest.statistics(), oldest.statistics()
        kept_new = [m.decode() for m in await drain(newest, 10)]
        kept_old = [m.decode() for m in await drain(oldest, 10)]
    assert s_new.received == s_old.received == 28  # rows, not frames
    assert s_new.dropped == s_old.dropped == 18 and s_new.pending == s_old.pending == 10
    assert kept_new == list(range(10)) and kept_old == list(range(18, 28))


async def test_a_blocking_subscription_drops_no_row_of_a_packed_frame(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    async with b.subscribe("B.x", queue_size=4, overflow="block") as sub:
        await a.wait_for_interest("B.x")
        await a.publish_frames([packed("B.x", list(range(i, i + 10))) for i in range(0, 50, 10)])
        got = [m.decode() for m in await drain(sub, 50)]
        stats = sub.statistics()
    assert got == list(range(50))  # the queue overshoots by one frame's rows, never drops
    assert stats.received == 50 and stats.dropped == 0


async def test_a_malformed_packed_frame_is_delivered_whole(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    good = pack_rows(1, [ENC(1), ENC(2)])
    bad = [good[:-1], good[:1] + b"\xff\xff\xff\xff" + good[5:], good[:5]]
    async with b.subscribe("M.x") as sub:
        await a.wait_for_interest("M.x")
        await a.publish_frames([encode_publish(b"M.x", p) for p in bad])
        got = [await sub.next(timeout=5) for _ in range(3)]
    assert [m.payload for m in got] == bad  # never dropped: a foreign payload, as it came
    assert all(m.codec is Codec.UNKNOWN for m in got)


async def test_a_request_with_a_packed_payload_is_delivered_whole(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    payload = pack_rows(1, [ENC(1), ENC(2)])
    async with b.subscribe("Q.svc") as sub:
        await a.wait_for_interest("Q.svc")
        async with asyncio.TaskGroup() as tg:
            reply = tg.create_task(a.request("Q.svc", aoz.Verbatim(payload), timeout=5))
            req = await sub.next(timeout=5)
            await req.respond("ok")
        assert req.kind is aoz.Kind.REQUEST and req.payload == payload  # one message
        assert reply.result().decode() == "ok"
