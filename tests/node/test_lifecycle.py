"""Close semantics, cancellation safety, malformed input, bytes on the wire, threads."""

from __future__ import annotations

import asyncio
import threading

import anyio
import pytest
import zmq
import zmq.asyncio

import aoz

pytestmark = pytest.mark.timeout(30)


async def test_closing_ends_async_for_and_fails_requests() -> None:
    node = aoz.connect(bind=["tcp://127.0.0.1:*"])
    await node.start()
    sub = node.subscribe("never")
    other = node.subscribe("svc")  # gives the request someone to wait on
    await node.wait_for_interest("svc")
    ended = asyncio.Event()

    async def consume() -> None:
        async for _ in sub:
            pass
        ended.set()

    consumer = asyncio.create_task(consume())
    request = asyncio.create_task(node.request("svc", b"", timeout=30))
    await other.next(timeout=5)  # the request is pending now
    await node.aclose()
    with anyio.fail_after(2):
        await ended.wait()
        with pytest.raises(aoz.ClosedError):
            await request
    await consumer
    assert node.closed
    with pytest.raises(aoz.ClosedError):
        await node.publish("x", b"")
    with pytest.raises(aoz.ClosedError):
        node.subscribe("x")
    await node.aclose()  # idempotent


async def test_cancelling_the_owner_closes_the_node() -> None:
    started = asyncio.Event()
    holder: list[aoz.Node] = []

    async def owner() -> None:
        async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
            holder.append(node)
            started.set()
            async for _ in node.subscribe("forever"):
                pass

    task = asyncio.create_task(owner())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert holder[0].closed
    assert holder[0]._plane.closed


async def test_cancelled_async_for_loses_no_message(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    async with b.subscribe("cs") as sub:
        await a.wait_for_interest("cs")
        waiting = asyncio.create_task(sub.next())
        await asyncio.sleep(0)  # let it park on the empty queue
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        for i in range(10):
            await a.publish("cs", bytes([i]))
        got = [(await sub.next(timeout=5)).data for _ in range(10)]
    assert got == [bytes([i]) for i in range(10)]


async def test_malformed_frames_are_counted_and_dropped() -> None:
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.XPUB)
    port = raw.bind_to_random_port("tcp://127.0.0.1")
    try:
        async with aoz.connect(
            bind=["tcp://127.0.0.1:*"], connect=[f"tcp://127.0.0.1:{port}"]
        ) as node, node.subscribe(">") as sub:
            with anyio.fail_after(5):
                while True:  # the node's ">" filter (b"") reaching the raw XPUB
                    if (await raw.recv()) == b"\x01":  # not its inbox filter, sent first
                        break
            bad = [
                b"",  # empty
                b"\0\x01\0x",  # empty subject
                b"a" * 300,  # no NUL within 257 bytes
                b"abc\0\x09\0",  # unknown type
                b"abc\0\x02short\0",  # request with a truncated handle
                b"abc\0\x01",  # missing trailing NUL
                b"\xff\xfe\0\x01\0x",  # subject is not UTF-8
            ]
            for frame in bad:
                await raw.send(frame)
            await raw.send(b"good\0\x01\0\x00ok")
            msg = await sub.next(timeout=5)
            assert msg.subject == "good" and msg.data == b"ok"
            assert node.statistics().malformed_in == len(bad)
    finally:
        raw.close(linger=0)


async def test_bytes_on_the_wire_match_the_spec() -> None:
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.SUB)
    # a subject filter, not b"": a catch-all subscriber is not a responder (NoResponders)
    raw.setsockopt(zmq.SUBSCRIBE, b"MD.")
    try:
        # sequence=False: the payload exactly as SPEC §1 frames it, no sequence header
        async with aoz.connect(bind=["tcp://127.0.0.1:*"], sequence=False) as node:
            raw.connect(node.endpoint)
            await node.wait_for_interest("MD.IBM")
            await node.publish("MD.IBM", b"payload")
            frame = await asyncio.wait_for(raw.recv(), 5)
            # subject NUL 0x01 NUL payload(codec byte 0x00 = raw)
            assert frame == b"MD.IBM\x00\x01\x00\x00payload"
            assert len(frame) - len(b"\x00payload") == len("MD.IBM") + 3

            task = asyncio.create_task(node.request("MD.IBM", b"q", timeout=0.2))
            req = await asyncio.wait_for(raw.recv(), 5)
            with pytest.raises(aoz.RequestTimeout):
                await task
            header = len("MD.IBM") + 63
            assert req[:8] == b"MD.IBM\x00\x02"
            handle = req[8:68]
            assert handle == f"_INBOX.{node.uuid}.0000000000000001".encode()
            assert len(handle) == 60
            assert req[68:69] == b"\x00"
            assert req[header:] == b"\x00q"
    finally:
        raw.close(linger=0)


def test_blocking_facade_from_two_threads() -> None:
    with (
        aoz.BlockingNode(bind=["tcp://127.0.0.1:*"]) as server,
        aoz.BlockingNode(bind=["tcp://127.0.0.1:*"], connect=[server.endpoint]) as client,
    ):
        server._call(server.node.connect_endpoint, client.endpoint)
        requests = server.subscribe("svc.add")
        results: dict[int, list[int]] = {0: [], 1: []}
        errors: list[BaseException] = []
        client.wait_for_interest("svc.add", timeout=5)

        def serve() -> None:
            for _ in range(40):
                req = requests.next(timeout=10)
                a, b = req.decode()
                server.respond(req, a + b)

        def call(tid: int) -> None:
            try:
                for i in range(20):
                    results[tid].append(client.request("svc.add", [tid, i], timeout=5).decode())
            except BaseException as exc:  # surfaced by the assertion below
                errors.append(exc)

        threads = [threading.Thread(target=serve)] + [
            threading.Thread(target=call, args=(t,)) for t in (0, 1)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
        assert not errors
        assert results == {0: list(range(20)), 1: [1 + i for i in range(20)]}
        requests.close()
    with pytest.raises(aoz.ClosedError):
        client.publish("x", b"")


def test_blocking_facade_subscribes_with_history() -> None:
    with (
        aoz.BlockingNode(bind=["tcp://127.0.0.1:*"], publish_cache=1) as feed,
        aoz.BlockingNode(bind=["tcp://127.0.0.1:*"], connect=[feed.endpoint]) as app,
    ):
        feed._call(feed.node.connect_endpoint, app.endpoint)
        feed.publish("HB.x", b"old")
        feed.publish("HB.x", b"last")
        sub = app.subscribe("HB.>", history=1, recover=True)
        msg = sub.next(timeout=10)
        assert (msg.subject, msg.data, msg.replayed) == ("HB.x", b"last", True)
        sub.close()
