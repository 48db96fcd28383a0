"""Behaviour the node redesign fixed (issue: the node, redesigned), each reproduced
against the old node first."""

from __future__ import annotations

import asyncio
import time

import anyio
import pytest
import zmq
import zmq.asyncio

import aoz
import aoz._mesh.routing
from aoz.security import keypair

from ..ports import free_port

pytestmark = pytest.mark.timeout(30)


async def test_two_tasks_share_one_subscription(static_pair: tuple[aoz.Node, aoz.Node]) -> None:
    """Bug 1: a second consumer hung forever, even after aclose()."""
    a, b = static_pair
    got: dict[str, list[bytes]] = {"x": [], "y": []}
    sub = b.subscribe("shared")
    all_in = anyio.Event()

    async def consume(name: str) -> None:
        async for msg in sub:
            got[name].append(msg.data)
            if len(got["x"]) + len(got["y"]) == 200:
                all_in.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume, "x")
        tg.start_soon(consume, "y")
        await a.wait_for_interest("shared")
        for i in range(200):
            await a.publish("shared", b"%d" % i)
        with anyio.fail_after(5):
            await all_in.wait()
        await sub.aclose()  # ends both loops; the task group then exits
    everything = sorted(got["x"] + got["y"], key=int)
    assert everything == [b"%d" % i for i in range(200)]  # each message to exactly one


async def test_a_failing_node_ends_subscriptions_with_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bug 2: a node whose task failed ended every `async for` as if cleanly."""

    def broken(self: object, subject: bytes) -> None:
        raise ValueError("router exploded")

    with pytest.raises(aoz.ClosedError) as outer:
        async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
            sub = node.subscribe("boom")
            await node.wait_for_interest("boom")
            # the first frame on a subject is routed (then cached): on both hot paths
            monkeypatch.setattr(aoz._mesh.routing.RoutingTable, "route", broken)
            await node.publish("boom", b"x")
            with pytest.raises(aoz.ClosedError) as inner:
                async for _ in sub:
                    pass
            assert isinstance(inner.value.__cause__, ValueError)
            assert node.closed
            with pytest.raises(aoz.ClosedError):
                await node.publish("boom", b"y")
    # leaving `async with` re-raises the failure
    assert isinstance(outer.value.__cause__, ValueError)


async def test_cancelling_connect_is_prompt() -> None:
    """Bug 3: a timeout around connect() waited for the whole naming deadline."""
    port = free_port()  # no nsd listens here
    retries, interval = 100, 0.1  # the naming deadline: 10 s
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            async with aoz.connect(naming=[f"tcp://127.0.0.1:{port}"],
                                   connect_retries=retries, connect_interval=interval):
                pass
    # the bug waited out the naming deadline; a cancelled connect() returns long before
    # it (0.2 s here, and over 0.5 s at load 23: compare with the deadline, not a speed)
    assert time.monotonic() - t0 < retries * interval / 2


async def test_invalid_curve_key_is_an_aoz_error() -> None:
    """Bug 4: connect() raised a raw zmq.ZMQError for a malformed key."""
    _, secret = keypair()
    with pytest.raises(aoz.ConfigError, match="CURVE key"):
        async with aoz.connect(bind=["tcp://127.0.0.1:*"], curve_server_public=" " * 40,
                               curve_server_secret=secret):
            pass


async def test_bind_errors_are_aoz_errors() -> None:
    async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as a:
        with pytest.raises(aoz.TransportError, match="cannot bind"):
            async with aoz.connect(bind=[a.endpoint]):
                pass


async def test_respond_to_a_gone_requester_does_not_block() -> None:
    """Bug 6: respond() to a requester that had gone blocked for 2 s."""
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.PUB)  # a requester that never subscribes to its inbox
    try:
        async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
            port = raw.bind_to_random_port("tcp://127.0.0.1")
            node.connect_endpoint(f"tcp://127.0.0.1:{port}")
            async with node.subscribe("svc") as sub:
                handle = b"_INBOX.3669840e-d043-11ea-adc2-fcaa146e6b01.0000000000000001"
                req = b"svc\x00\x02" + handle + b"\x00\x00q"
                msg = None
                for _ in range(50):  # the SUB's link to the raw PUB may still be connecting
                    await raw.send(req)
                    try:
                        msg = await sub.next(timeout=0.2)
                        break
                    except aoz.WaitTimeout:
                        continue
                assert msg is not None and msg.reply == handle.decode()
                t0 = time.monotonic()
                for _ in range(5):  # a sequential responder is not stalled
                    await msg.respond(b"answer")
                assert time.monotonic() - t0 < 0.5
                for _ in range(150):  # each deferred reply gives up after 5 s
                    if node.statistics().discovery.get("replies_unroutable", 0) == 5:
                        break
                    await anyio.sleep(0.1)
                assert node.statistics().discovery["replies_unroutable"] == 5
    finally:
        raw.close(linger=0)


async def test_catch_all_subscriber_is_not_a_responder(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    """Bug 9: one `>` or unanchored-regex subscriber made NoResponders never fire."""
    a, b = static_pair
    async with b.subscribe(">") as monitor, b.subscribe("^.*x$") as rx:
        await a.wait_for_interest("anything.at.all")  # publications do reach them
        with pytest.raises(aoz.NoResponders):
            await a.request("SVC.nobody", b"?", timeout=2)
        async with b.subscribe("SVC.somebody") as svc:
            assert a.has_interest("SVC.somebody")  # the catch-all covers publications
            await a.wait_for_interest("SVC.somebody", responders=True)
            task = asyncio.create_task(a.request("SVC.somebody", b"?", timeout=5))
            req = await svc.next(timeout=5)
            await req.respond(b"!")
            assert (await task).data == b"!"
        assert monitor.statistics().received >= 0 and rx.pattern.kind == "regex"


async def test_abandoned_reply_stream_is_cleaned_without_a_finalizer(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    """Bug 8: ReplyStream.__del__ edited the inbox table from a finalizer."""
    a, b = static_pair
    assert not hasattr(aoz.ReplyStream, "__del__")
    async with b.subscribe("svc.many"):
        await a.wait_for_interest("svc.many")
        stream = a.request_many("svc.many", b"", timeout=0.1)
        assert len(a._requests) == 1
        del stream  # walked away without iterating or closing
        for _ in range(100):  # housekeeping sweeps every 0.25 s; deadline + 1 s
            if not len(a._requests):
                break
            await anyio.sleep(0.05)
        assert len(a._requests) == 0


async def test_wildcard_and_exact_subscribers_each_get_every_message(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    """The routing cache gives the same deliveries as matching every frame."""
    a, b = static_pair
    async with b.subscribe("MD.NYSE.IBM") as exact, b.subscribe("MD.*.IBM") as star, \
            b.subscribe("MD.>") as tail:
        await a.wait_for_interest("MD.NYSE.IBM")
        await a.wait_for_interest("MD.LSE.VOD")  # only the wildcards' filter covers it
        for i in range(50):
            await a.publish("MD.NYSE.IBM", b"%d" % i)
            await a.publish("MD.LSE.IBM", b"%d" % i)
            await a.publish("MD.LSE.VOD", b"%d" % i)
        counts = {}
        for name, sub, n in (("exact", exact, 50), ("star", star, 100), ("tail", tail, 150)):
            got = [await sub.next(timeout=5) for _ in range(n)]
            counts[name] = len(got)
            assert sub.pending == 0 or name == "tail"
        # a new subscription invalidates the cache: the next frames reach it too
        async with b.subscribe("MD.LSE.*") as late:
            await a.wait_for_interest("MD.LSE.VOD")
            await a.publish("MD.LSE.VOD", b"late")
            assert (await late.next(timeout=5)).data == b"late"
            assert (await tail.next(timeout=5)).data == b"late"
    assert counts == {"exact": 50, "star": 100, "tail": 150}
