"""Request/reply through inboxes (SPEC §2)."""

from __future__ import annotations

import asyncio

import anyio
import pytest
from anyio import TASK_STATUS_IGNORED
from anyio.abc import TaskStatus

import aoz

pytestmark = pytest.mark.timeout(30)

async def respond_forever(
    node: aoz.Node, subject: str, tag: bytes, *, task_status: TaskStatus[None] = TASK_STATUS_IGNORED
) -> None:
    async with node.subscribe(subject) as sub:
        task_status.started()
        async for req in sub:
            await req.respond(tag + b":" + req.data)


async def test_request_one_responder(static_pair: tuple[aoz.Node, aoz.Node]) -> None:
    a, b = static_pair
    async with anyio.create_task_group() as tg:
        tg.start_soon(respond_forever, b, "svc.echo", b"b")
        await a.wait_for_interest("svc.echo")
        reply = await a.request("svc.echo", b"ping", timeout=2)
        assert reply.data == b"b:ping"
        assert reply.kind is aoz.Kind.REPLY
        assert reply.subject.startswith(f"_INBOX.{a.uuid}.")
        tg.cancel_scope.cancel()


async def test_request_many_collects_every_responder(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    async with anyio.create_task_group() as tg:
        await tg.start(respond_forever, a, "svc.all", b"a")  # self-delivery: a answers itself
        await tg.start(respond_forever, b, "svc.all", b"b1")
        await tg.start(respond_forever, b, "svc.all", b"b2")
        # An XPUB reports a filter once, whoever sends it, so "svc.all" cannot show that
        # both a's and b's filters reached a. Filters travel in order on each link, and
        # only one node subscribes each probe: seeing the probe proves the rest arrived.
        async with a.subscribe("probe.a"), b.subscribe("probe.b"):
            await a.wait_for_interest("probe.a")
            await a.wait_for_interest("probe.b")
        async with a.request_many("svc.all", b"q", timeout=5, max_replies=3) as replies:
            got = sorted([r.data async for r in replies])
        assert got == [b"a:q", b"b1:q", b"b2:q"]
        # until the deadline, without a count
        got2 = sorted([r.data async for r in a.request_many("svc.all", b"z", timeout=0.5)])
        assert got2 == [b"a:z", b"b1:z", b"b2:z"]
        tg.cancel_scope.cancel()
    assert a.statistics().replies_dropped == 0


async def test_no_responders_fails_fast(static_pair: tuple[aoz.Node, aoz.Node]) -> None:
    a, _ = static_pair
    with anyio.fail_after(0.5):  # far less than the request's own 30 s deadline
        with pytest.raises(aoz.NoResponders) as info:
            await a.request("nobody.home", b"", timeout=30)
    assert info.value.subject == "nobody.home"
    assert a.statistics().no_responders == 1


async def test_timeout_when_subscriber_does_not_answer(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    async with b.subscribe("svc.silent") as sub:
        await a.wait_for_interest("svc.silent")
        with pytest.raises(aoz.RequestTimeout) as info:
            await a.request("svc.silent", b"?", timeout=0.2)
        assert isinstance(info.value, TimeoutError)
        # the request reached b; answering now is too late and is counted, not an error
        late = await sub.next(timeout=5)
        await late.respond(b"late")
        # b's frames reach a in order: once the next reply is in, the late one was seen
        nxt = asyncio.create_task(a.request("svc.silent", b"again", timeout=5))
        req = await sub.next(timeout=5)
        await req.respond(b"on time")
        assert (await nxt).data == b"on time"
    stats = a.statistics()
    assert stats.request_timeouts == 1
    assert stats.replies_dropped == 1


async def test_responding_to_a_publication_is_an_error(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    async with b.subscribe("pub.only") as sub:
        await a.wait_for_interest("pub.only")
        await a.publish("pub.only", b"")
        msg = await sub.next(timeout=5)
        with pytest.raises(aoz.AozError, match="not a request"):
            await msg.respond(b"x")


async def test_cancelled_request_leaks_no_inbox_entry(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    async with b.subscribe("svc.slow") as sub:
        await a.wait_for_interest("svc.slow")
        task = asyncio.create_task(a.request("svc.slow", b"1", timeout=10))
        req = await sub.next(timeout=5)  # the request is in flight
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(a._requests) == 0
        await req.respond(b"too late")
        # a later request still works and gets its own reply, not the stale one
        t2 = asyncio.create_task(a.request("svc.slow", b"2", timeout=5))
        req2 = await sub.next(timeout=5)
        assert req2.data == b"2"
        await req2.respond(b"fresh")
        assert (await t2).data == b"fresh"
    assert len(a._requests) == 0


async def test_request_frames_on_the_wire_are_the_protocol_core_s() -> None:
    """The node builds request frames from a per-subject prefix it keeps (and a bytes
    payload without encoding it): the bytes must be encode_request's, for every kind
    of payload, with and without headers; and each request fails at its own deadline
    (one timer serves them all, earliest first, whatever order they were sent in)."""
    import zmq
    import zmq.asyncio

    from aoz._protocol.builder import FrameBuilder
    from aoz._protocol.codecs import Codec
    from aoz._protocol.frames import decode_frame, encode_request

    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.SUB)  # a responder that never answers: its filter counts
    raw.setsockopt(zmq.LINGER, 0)
    raw.setsockopt(zmq.SUBSCRIBE, b"svc.wire\0")
    payloads: list[tuple[object, aoz.Codec | None, dict[str, str] | None]] = [
        (b"raw", None, None), (b"", None, None), ("text", None, None), ({"k": 1}, None, None),
        (b"as json", aoz.Codec.JSON, None), (b"hdr", None, {"trace": "1"}),
    ]
    try:
        async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
            raw.connect(node.endpoint)
            await node.wait_for_interest("svc.wire", timeout=5, responders=True)
            frames = FrameBuilder(Codec[node.settings.default_codec.upper()])
            timeouts = [0.6, 0.2, 0.4, 0.2, 0.5, 0.3]
            async with anyio.create_task_group() as tg:
                ended: list[float] = []

                async def one(i: int) -> None:
                    data, codec, headers = payloads[i]
                    with pytest.raises(aoz.RequestTimeout):
                        await node.request("svc.wire", data, timeout=timeouts[i], codec=codec,
                                           headers=headers)
                    ended.append(timeouts[i])

                for i in range(len(payloads)):
                    tg.start_soon(one, i)
                    got = await raw.recv()
                    fr = decode_frame(got)
                    assert fr.reply is not None
                    data, codec, headers = payloads[i]
                    assert got == encode_request(
                        b"svc.wire", fr.reply, frames.payload(data, codec, headers))
            assert sorted(ended) == ended  # each failed at its own deadline, in order
            assert node.statistics().request_timeouts == len(payloads)
            assert len(node._requests) == 0
    finally:
        raw.close(0)


async def test_a_request_follows_the_interest_set(static_pair: tuple[aoz.Node, aoz.Node]) -> None:
    """Where a request goes is kept per subject until the interest set changes: a
    responder that leaves makes the next request fail fast, and one that comes back is
    answered again (queue groups, whose members take turns, are never kept: tests/queues)."""
    a, b = static_pair
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def serve() -> None:
            with scope:
                await respond_forever(b, "svc.moves", b"plain")

        tg.start_soon(serve)
        await a.wait_for_interest("svc.moves", responders=True)
        assert (await a.request("svc.moves", b"1", timeout=5)).data == b"plain:1"
        assert (await a.request("svc.moves", b"2", timeout=5)).data == b"plain:2"
        scope.cancel()  # the responder leaves: its filter goes
        with anyio.fail_after(5):
            while a.has_interest("svc.moves", responders=True):
                await a.interest_changed(0.1)
        with pytest.raises(aoz.NoResponders):
            await a.request("svc.moves", b"3", timeout=5)
        tg.start_soon(respond_forever, b, "svc.moves", b"back")
        await a.wait_for_interest("svc.moves", responders=True)
        assert (await a.request("svc.moves", b"4", timeout=5)).data == b"back:4"
        tg.cancel_scope.cancel()


async def test_reply_frames_on_the_wire_are_the_protocol_core_s() -> None:
    """respond() builds a bytes reply without the builder: the bytes must be
    encode_reply's for every kind of payload."""
    import uuid

    import zmq
    import zmq.asyncio

    from aoz._protocol.codecs import Codec, encode_payload
    from aoz._protocol.frames import encode_reply, make_handle

    ctx = zmq.asyncio.Context.instance()
    pub = ctx.socket(zmq.PUB)  # the requester's publisher...
    inbox = ctx.socket(zmq.SUB)  # ...and its inbox
    requester = str(uuid.uuid4())
    for s in (pub, inbox):
        s.setsockopt(zmq.LINGER, 0)
    inbox.setsockopt(zmq.SUBSCRIBE, f"_INBOX.{requester}".encode())
    answers: list[tuple[object, Codec | None]] = [
        (b"raw", None), (b"", None), ("text", None), ({"k": 1}, None), (b"j", Codec.JSON),
        (aoz.Verbatim(b"\x05as is"), None),
    ]
    try:
        async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
            port = pub.bind_to_random_port("tcp://127.0.0.1")
            node.connect_endpoint(f"tcp://127.0.0.1:{port}")
            inbox.connect(node.endpoint)
            async with node.subscribe("svc.back") as sub:
                for i, (data, codec) in enumerate(answers, 1):
                    handle = make_handle(requester, i)
                    msg = None
                    for _ in range(50):  # the node's SUB link to the raw PUB may be connecting
                        await pub.send(b"svc.back\0\x02" + handle + b"\0\0q")
                        with anyio.move_on_after(0.2):
                            msg = await sub.next()
                        if msg is not None:
                            break
                    assert msg is not None
                    with anyio.fail_after(5):  # our inbox filter reaches the node first
                        await node.wait_for_interest(f"_INBOX.{requester}.x", timeout=5)
                    await msg.respond(data, codec=codec)
                    with anyio.fail_after(5):
                        got = await inbox.recv()
                    assert got == encode_reply(handle, encode_payload(data, codec))
                    while True:  # the retries' duplicates, answered or not, are not replies
                        try:
                            await sub.next(timeout=0.05)
                        except aoz.WaitTimeout:
                            break
    finally:
        pub.close(0)
        inbox.close(0)


async def test_a_request_whose_send_fails_leaves_nothing_behind(
    static_pair: tuple[aoz.Node, aoz.Node], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The send's error reaches the caller, the inbox entry goes, and the deadline the
    request left in the heap fails nothing later (no timeout counted, no future with an
    exception nobody retrieves)."""
    a, b = static_pair
    async with b.subscribe("svc.fails"):
        await a.wait_for_interest("svc.fails")

        def refuse(frame: bytes) -> None:
            raise aoz.TransportError("refused by the test")

        monkeypatch.setattr(a._send, "send", refuse)
        with pytest.raises(aoz.TransportError, match="refused by the test"):
            await a.request("svc.fails", b"x", timeout=0.01)
        assert len(a._requests) == 0
        assert a._requests._inbox.due(float("inf")) == []  # what the timer would fail
        assert a.statistics().request_timeouts == 0
