"""omnm on real sockets: an aoz node and an OZ-like peer (raw pyzmq, SPEC §1/§2)."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
import zmq
import zmq.asyncio

import aoz
from aoz import omnm
from aoz._protocol.sequence import parse_header
from aoz.omnm import FieldType, Price

from .golden import by_name

QUOTE = omnm.Message([
    omnm.Field("wIssueSymbol", 305, FieldType.STRING, "IBM"),
    omnm.Field("wBidPrice", 237, FieldType.F64, 135.25),
    omnm.Field("wBidSize", 238, FieldType.U32, 300),
])


class OzPeer:
    """An OZ program's data sockets: a PUB (an XPUB, to see subscriptions arrive) and a SUB.

    It frames messages as OZ does (SPEC §1) and answers through inbox handles (§2).
    """

    def __init__(self, ctx: zmq.asyncio.Context) -> None:
        self.pub = ctx.socket(zmq.XPUB)
        self.pub.bind("tcp://127.0.0.1:*")
        self.endpoint = self.pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.sub = ctx.socket(zmq.SUB)

    async def wait_subscribed(self, prefix: bytes) -> None:
        """Until a subscription starting with ``prefix`` reaches the PUB (readiness signal)."""
        async with asyncio.timeout(5):
            while True:
                event = await self.pub.recv()
                if event[:1] == b"\x01" and event[1:].startswith(prefix):
                    return

    async def recv(self) -> bytes:
        return await asyncio.wait_for(self.sub.recv(), 5)

    def close(self) -> None:
        self.pub.close(linger=0)
        self.sub.close(linger=0)


@pytest.fixture
async def oz_and_node() -> AsyncIterator[tuple[OzPeer, aoz.Node]]:
    oz = OzPeer(zmq.asyncio.Context.instance())
    try:
        async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
            oz.sub.connect(node.endpoint)
            node.connect_endpoint(oz.endpoint)
            # the node subscribes to its own inbox on every link (SPEC §2)
            await oz.wait_subscribed(f"_INBOX.{node.uuid}".encode())
            yield oz, node
    finally:
        oz.close()


async def test_published_omnm_is_exactly_subject_header_and_omnm_bytes(
    oz_and_node: tuple[OzPeer, aoz.Node],
) -> None:
    oz, node = oz_and_node
    oz.sub.subscribe(b"MD.NYSE.IBM\0")
    await node.wait_for_interest("MD.NYSE.IBM")
    await node.publish("MD.NYSE.IBM", QUOTE)
    frame = await oz.recv()
    assert frame == b"MD.NYSE.IBM\x00\x01\x00" + omnm.encode(QUOTE)
    assert frame[len("MD.NYSE.IBM") + 3 :][:3] == b"O\x01\x00"  # what OZ's bridge reads


async def test_golden_bytes_from_oz_decode_in_aoz(oz_and_node: tuple[OzPeer, aoz.Node]) -> None:
    oz, node = oz_and_node
    golden = bytes.fromhex(by_name("market_data_mixed")["hex"])
    async with node.subscribe("MD.>") as sub:
        await oz.wait_subscribed(b"MD.")
        await oz.pub.send(b"MD.NYSE.IBM\x00\x01\x00" + golden)
        msg = await sub.next(timeout=5)
    assert msg.codec is aoz.Codec.OMNM
    assert msg.data == msg.payload == golden  # no aoz byte to strip
    decoded = msg.decode()
    assert isinstance(decoded, omnm.Message) and decoded["wIssueSymbol"] == "IBM"
    assert decoded == omnm.decode(golden)


async def test_oz_requester_gets_an_omnm_reply(oz_and_node: tuple[OzPeer, aoz.Node]) -> None:
    oz, node = oz_and_node
    oz_uuid = "3669840e-d043-11ea-adc2-fcaa146e6b01"
    handle = f"_INBOX.{oz_uuid}.0000000000000001".encode()
    oz.sub.subscribe(f"_INBOX.{oz_uuid}".encode())
    await node.wait_for_interest(f"_INBOX.{oz_uuid}.0000000000000001")

    async def responder(sub: aoz.Subscription) -> Any:
        req = await sub.next(timeout=5)
        request = req.decode()
        await req.respond(omnm.Message({"symbol": request["symbol"], "bid": Price(1.5, 2)}))
        return request

    async with node.subscribe("SVC.quote") as sub:
        await oz.wait_subscribed(b"SVC.quote\x00")
        task = asyncio.create_task(responder(sub))
        ask = omnm.encode({"symbol": "IBM"})
        await oz.pub.send(b"SVC.quote\x00\x02" + handle + b"\x00" + ask)
        reply = await oz.recv()
        request = await task
    assert request == omnm.Message({"symbol": "IBM"})
    assert reply[: len(handle) + 3] == handle + b"\x00\x03\x00"
    body = reply[len(handle) + 3 :]
    assert body == omnm.encode({"symbol": "IBM", "bid": Price(1.5, 2)})
    assert omnm.decode(body)["bid"].precision == 2


async def test_aoz_request_to_an_oz_replier(oz_and_node: tuple[OzPeer, aoz.Node]) -> None:
    oz, node = oz_and_node
    oz.sub.subscribe(b"SVC.oz\0")
    await node.wait_for_interest("SVC.oz")

    async def oz_replier() -> bytes:
        frame = await oz.recv()
        subject, rest = frame.split(b"\0", 1)
        assert subject == b"SVC.oz" and rest[:1] == b"\x02" and rest[61:62] == b"\0"
        handle, payload = rest[1:61], rest[62:]
        answer = omnm.Message().add("echo", omnm.decode(payload)["q"], fid=1)
        answer.add("size", 7, fid=2, type=FieldType.I64)
        await oz.pub.send(handle + b"\x00\x03\x00" + omnm.encode(answer))
        return payload

    task = asyncio.create_task(oz_replier())
    reply = await node.request("SVC.oz", omnm.Message({"q": "ping"}), timeout=5)
    sent = await task
    assert sent == omnm.encode({"q": "ping"})  # the request carried no aoz byte either
    assert reply.codec is aoz.Codec.OMNM
    got = reply.decode()
    assert [(f.name, f.fid, f.type, f.value) for f in got] == [
        ("echo", 1, FieldType.STRING, "ping"), ("size", 2, FieldType.I64, 7)
    ]


class Quote(msgspec.Struct):
    symbol: str
    bid: float
    size: int


async def test_omnm_as_the_default_codec_and_verbatim_payloads() -> None:
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.SUB)
    raw.subscribe(b"")
    try:
        async with aoz.connect(bind=["tcp://127.0.0.1:*"], default_codec="omnm") as node:
            raw.connect(node.endpoint)
            await node.wait_for_interest("A")
            await node.publish("A", {"bid": 1.5, "size": 300})  # dict -> omnm
            await node.publish("A", Quote("IBM", 2.5, 100))  # Struct -> omnm
            await node.publish("A", {"n": 1}, codec=aoz.Codec.JSON)  # still selectable
            await node.publish("A", aoz.Verbatim(b"Jforeign"))  # no aoz byte at all
            await node.publish("A", aoz.Verbatim(b"\x01looks like msgpack"))  # untouched too
            await node.publish("A", b"raw")  # bytes stay raw
            frames = [await asyncio.wait_for(raw.recv(), 5) for _ in range(6)]
    finally:
        raw.close(linger=0)
    bodies = [f[len("A") + 3 :] for f in frames]
    assert bodies[0] == omnm.encode({"bid": 1.5, "size": 300})
    assert omnm.decode(bodies[1]).to_dict() == {"symbol": "IBM", "bid": 2.5, "size": 100}
    assert bodies[3] == b"Jforeign"  # never touched, like omnm (no sequence header either)
    assert bodies[4] == b"\x01looks like msgpack"
    # aoz's own codecs keep their codec byte (and aoz's sequence header, when on)
    for body, codec_id, rest in ((bodies[2], 0x02, b'{"n":1}'), (bodies[5], 0x00, b"raw")):
        seq = parse_header(body)
        assert body[0] in (codec_id, codec_id | 0x04)
        assert body[seq[3] if seq else 1 :] == rest


async def test_omnm_between_aoz_nodes(static_pair: tuple[aoz.Node, aoz.Node]) -> None:
    a, b = static_pair
    async with b.subscribe("Q") as sub:
        await a.wait_for_interest("Q")
        await a.publish("Q", {"symbol": "IBM", "bid": 1.25, "size": 3}, codec=aoz.Codec.OMNM)
        await a.publish("Q", {"symbol": "IBM"}, codec="omnm")  # type: ignore[arg-type]
        first = await sub.next(timeout=5)
        second = await sub.next(timeout=5)
    assert first.decode(Quote) == Quote("IBM", 1.25, 3)
    assert first.decode(dict) == {"symbol": "IBM", "bid": 1.25, "size": 3}
    assert first.decode(bytes) == first.payload
    assert second.decode()["symbol"] == "IBM"
    with pytest.raises(aoz.DecodeError, match="does not fit"):
        second.decode(Quote)


class Tick(msgspec.Struct):
    bid: float
    ts: datetime.datetime


def test_omnm_decodes_into_structs_with_plain_values() -> None:
    from aoz._protocol.codecs import decode_payload, split_payload

    when = datetime.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=datetime.UTC)
    data = omnm.encode({"bid": Price(1.25, 2), "ts": when, "extra": "ignored"})
    assert decode_payload(*split_payload(data), Tick) == Tick(1.25, when)


def test_codec_errors_are_aoz_errors() -> None:
    from aoz._protocol.codecs import encode_payload

    with pytest.raises(aoz.EncodeError, match="Verbatim"):
        encode_payload(b"not omnm", aoz.Codec.OMNM)
    assert encode_payload(omnm.encode({"x": 1}), aoz.Codec.OMNM) == omnm.encode({"x": 1})
    with pytest.raises(aoz.EncodeError, match="named fields"):
        encode_payload([1, 2], aoz.Codec.OMNM)
    with pytest.raises(aoz.EncodeError, match="no null"):
        encode_payload({"x": None}, aoz.Codec.OMNM)
