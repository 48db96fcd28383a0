"""Message headers between aoz nodes (issue #25 item 5): in aoz's payload header, within
the OZ-safe first-byte rule, with sequence numbers, requests, the CLI."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aoz
from aoz._protocol.builder import FrameBuilder
from aoz._protocol.codecs import Codec
from aoz._protocol.frames import decode_frame
from aoz._protocol.headers import data_start, parse_headers


class Quote(msgspec.Struct):
    symbol: str
    bid: float


async def test_publish_headers_reach_msg_headers_with_the_sequence_intact(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    async with b.subscribe("H.>") as sub:
        await a.wait_for_interest("H.x")
        await a.publish("H.x", b"one")
        await a.publish("H.x", Quote("IBM", 1.5), headers={"traceparent": "00-aa-bb-01"})
        await a.publish("H.x", "three", headers={"k": "v", "ü": "ß"})
        a.publish_nowait("H.x", {"n": 4}, headers={"n": "4"})
        got = [await sub.next(timeout=5) for _ in range(4)]
    assert [m.headers for m in got] == [{}, {"traceparent": "00-aa-bb-01"},
                                        {"k": "v", "ü": "ß"}, {"n": "4"}]
    assert got[0].data == b"one" and got[1].decode(Quote) == Quote("IBM", 1.5)
    assert got[2].decode() == "three" and got[3].decode() == {"n": 4}
    assert [m.sequence for m in got] == [1, 2, 3, 4]  # one stream, headers or not
    assert sub.statistics().lost == 0 and all(m.gap == 0 for m in got)


async def test_request_headers_reach_the_responder(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair

    def echo(req: aoz.Message) -> dict[str, str]:
        return req.headers

    async with aoz.serve(b, "H.svc", echo):
        await aoz.wait_for_service(a, "H.svc")
        reply = await a.request("H.svc", b"", headers={"corr": "42"}, timeout=5)
        assert reply.decode() == {"corr": "42"}
        async with a.request_many("H.svc", headers={"corr": "43"}, timeout=5,
                                  max_replies=1) as replies:
            assert [r.decode() async for r in replies] == [{"corr": "43"}]


async def test_payloads_that_cannot_carry_headers_are_refused_before_anything_is_sent(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    async with b.subscribe("H.r") as sub:
        await a.wait_for_interest("H.r")
        with pytest.raises(aoz.EncodeError, match="Verbatim"):
            await a.publish("H.r", aoz.Verbatim(b"\x01raw"), headers={"k": "v"})
        with pytest.raises(aoz.EncodeError, match="omnm"):
            await a.publish("H.r", {"bid": 1.0}, codec=Codec.OMNM, headers={"k": "v"})
        with pytest.raises(aoz.UsageTypeError):
            await a.publish("H.r", b"x", headers={"k": 1})  # type: ignore[dict-item]
        await a.publish("H.r", b"after")
        msg = await sub.next(timeout=5)
    assert msg.data == b"after" and msg.sequence == 1  # nothing was numbered before it
    assert sub.statistics().lost == 0


@settings(max_examples=200, deadline=None)
@given(headers=st.dictionaries(st.text(max_size=8), st.text(max_size=8), min_size=1,
                               max_size=4),
       body=st.binary(max_size=20), sequenced=st.booleans())
def test_headers_round_trip_and_stay_oz_safe(headers: dict[str, str], body: bytes,
                                             sequenced: bool) -> None:
    b = FrameBuilder(Codec.MSGPACK, publisher=7 if sequenced else None)
    frame = b.publish_with("S", body, None, headers)
    start = decode_frame(frame).payload_start
    assert frame[start] < 0x10  # a C0 control byte: OpenMAMA refuses it safely
    assert parse_headers(frame, start) == headers
    assert frame[data_start(frame, start):] == body
