"""``node.publish`` is not a coroutine function: the message leaves during the call, and
what the call returns is awaited (done at once, or the wait for room or for the loop's
turn). Whatever it returns works where a coroutine does: ``await``, a task of it,
anyio's ``start_soon``. Runs on the twin the node uses (both, in ``make test``)."""

from __future__ import annotations

import asyncio
import collections.abc
import concurrent.futures
from collections.abc import AsyncIterator

import anyio
import pytest

import aoz
from aoz._mesh import hotpath
from aoz._mesh.node import Node

pytestmark = pytest.mark.timeout(30)


def test_the_compiled_twin_gives_nodes_its_publish() -> None:
    compiled = hotpath.HOT_PATH == "compiled"
    assert (Node.publish is hotpath.node_publish) == compiled
    assert Node.publish.__doc__ and "sent during the call" in Node.publish.__doc__


async def test_done_is_a_finished_coroutine_that_can_be_awaited_again() -> None:
    done = hotpath.DONE
    assert isinstance(done, collections.abc.Coroutine)
    assert await done is None
    assert await done is None  # stateless: one object serves every call
    assert await asyncio.create_task(done) is None
    with pytest.raises(StopIteration):
        done.send(None)
    with pytest.raises(ValueError, match="thrown"):
        done.throw(ValueError("thrown"))
    done.close()
    assert await done is None


@pytest.fixture
async def pair() -> AsyncIterator[tuple[aoz.Node, aoz.Subscription]]:
    async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as pub, \
            aoz.connect(connect=[pub.endpoint]) as sub_node:
        sub = sub_node.subscribe("T.>")
        await pub.wait_for_interest("T.x", timeout=10)
        yield pub, sub


async def _take(sub: aoz.Subscription, n: int) -> list[bytes]:
    got: list[bytes] = []
    with anyio.fail_after(10):
        async for m in sub:
            got.append(m.data)
            if len(got) == n:
                break
    return got


async def test_the_message_leaves_during_the_call(
    pair: tuple[aoz.Node, aoz.Subscription],
) -> None:
    pub, sub = pair
    before = pub.statistics().messages_out
    pending = pub.publish("T.x", b"1")  # not awaited yet
    assert pub.statistics().messages_out == before + 1
    assert await _take(sub, 1) == [b"1"]  # delivered before the await
    assert await pending is None


async def test_what_publish_returns_works_where_a_coroutine_does(
    pair: tuple[aoz.Node, aoz.Subscription],
) -> None:
    pub, sub = pair
    await pub.publish("T.x", b"a")
    await asyncio.create_task(pub.publish("T.x", b"b"))
    await asyncio.gather(pub.publish("T.x", b"c"), pub.publish("T.x", b"d"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(pub.publish, "T.x", b"e")
    await asyncio.wait_for(pub.publish("T.x", b"f", headers={"k": "v"}), 5)
    assert await _take(sub, 6) == [b"a", b"b", b"c", b"d", b"e", b"f"]


async def test_a_tight_loop_of_publishes_still_lets_the_loop_run(
    pair: tuple[aoz.Node, aoz.Subscription],
) -> None:
    """Every few hundred calls the returned awaitable is the loop's turn: another task
    runs while one task publishes without pause."""
    pub, sub = pair
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    t = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    start = ticks
    for i in range(2000):
        await pub.publish("T.x", b"%d" % i)
    t.cancel()
    assert ticks - start >= 2000 // 512  # yields at least every 256 publishes, with slack
    got = await _take(sub, 2000)
    assert got == [b"%d" % i for i in range(2000)]


async def test_errors_are_raised_by_the_call_not_the_await() -> None:
    async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
        with pytest.raises(aoz.EncodeError):
            node.publish("T.x", object())  # nothing to await: it never sent
        with pytest.raises(aoz.SubjectError):
            node.publish("", b"x")
    with pytest.raises(aoz.ClosedError, match="closed"):
        node.publish("T.x", b"late")


async def test_a_call_from_another_thread_publishes_when_the_loop_runs_it(
    pair: tuple[aoz.Node, aoz.Subscription],
) -> None:
    """ZeroMQ sockets are not thread-safe: off the node's loop nothing is sent during the
    call; the coroutine it returns publishes when the loop runs it."""
    pub, sub = pair
    loop = asyncio.get_running_loop()
    before = pub.statistics().messages_out

    def elsewhere() -> tuple[int, object]:
        coro = pub.publish("T.x", b"from a thread")
        sent = pub.statistics().messages_out
        return sent, asyncio.run_coroutine_threadsafe(coro, loop)

    sent, fut = await asyncio.to_thread(elsewhere)
    assert sent == before
    assert isinstance(fut, concurrent.futures.Future)
    await asyncio.wait_for(asyncio.wrap_future(fut), 5)
    assert await _take(sub, 1) == [b"from a thread"]


async def test_a_reply_from_another_thread_is_sent_by_the_loop() -> None:
    async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as a, \
            aoz.connect(bind=["tcp://127.0.0.1:*"], connect=[a.endpoint]) as b:
        a.connect_endpoint(b.endpoint)
        requests = a.subscribe("R.x")
        await b.wait_for_interest("R.x", timeout=10)
        loop = asyncio.get_running_loop()

        async def answer() -> None:
            msg = await requests.next(timeout=10)
            fut = await asyncio.to_thread(
                lambda: asyncio.run_coroutine_threadsafe(msg.respond(b"pong"), loop))
            await asyncio.wrap_future(fut)

        task = asyncio.create_task(answer())
        reply = await b.request("R.x", b"ping", timeout=10)
        await asyncio.wait_for(task, 5)
        assert reply.data == b"pong"
