"""``async for`` over a subscription: a message already queued comes without a coroutine
on the compiled twin (a ready awaitable); whatever ``__anext__`` returns, awaiting it,
a task made of it, ``anext``, ``wait_for`` and a held producer behave as a coroutine's
result would. Runs on the twin the node uses (both, in ``make test``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from aoz._mesh import hotpath
from aoz._mesh.message import Message, data_start
from aoz._mesh.subscription import Subscription
from aoz._protocol.frames import Kind, encode_publish
from aoz._protocol.subjects import compile_pattern


def msg(i: int) -> Message:
    f = encode_publish(b"A", b"\x00%d" % i)
    return Message(f, 1, 4, data_start(f, 4), Kind.PUBLISH, None, 0.0, None)


def sub_with(n: int, limit: int = 100, overflow: Any = "drop_newest") -> Subscription:
    s = Subscription(compile_pattern("A"), limit, overflow, lambda: None)
    s.push_many([msg(i) for i in range(n)])
    return s


def test_the_compiled_twin_gives_subscriptions_its_anext() -> None:
    compiled = hotpath.HOT_PATH == "compiled"
    assert (Subscription.__anext__ is getattr(hotpath.implementation(),
                                              "subscription_anext", None)) == compiled


async def test_async_for_takes_queued_messages_in_order_then_waits() -> None:
    s = sub_with(5)
    got: list[bytes] = []

    async def consume() -> None:
        async for m in s:
            got.append(m.data)
            if len(got) == 7:
                return

    task = asyncio.create_task(consume())
    for _ in range(50):  # bounded: the consumer takes the five queued ones
        await asyncio.sleep(0)
        if len(got) == 5:
            break
    assert got == [b"%d" % i for i in range(5)] and not task.done()
    s.push(msg(5))
    s.push(msg(6))
    await asyncio.wait_for(task, 5)
    assert got[5:] == [b"5", b"6"]


async def test_what_anext_returns_works_as_a_coroutine_would() -> None:
    s = sub_with(4)
    first = s.__anext__()
    assert (await first).data == b"0"
    assert (await asyncio.create_task(s.__anext__())).data == b"1"  # a task of it
    assert (await anext(s)).data == b"2"
    assert (await asyncio.wait_for(s.__anext__(), 5)).data == b"3"
    waiting = asyncio.create_task(s.__anext__())  # nothing queued: it waits
    await asyncio.sleep(0)
    assert not waiting.done()
    s.push(msg(9))
    assert (await asyncio.wait_for(waiting, 5)).data == b"9"
    s.close()
    with pytest.raises(StopAsyncIteration):
        await s.__anext__()


async def test_a_held_producer_is_released_through_async_for() -> None:
    released: list[str] = []
    s = Subscription(compile_pattern("A"), 4, "block", lambda: None)
    s.backpressure(lambda: released.append("full"), lambda: released.append("room"))
    s.push_many([msg(i) for i in range(4)])
    assert released == ["full"]
    got = [(await s.__anext__()).data for _ in range(2)]
    assert got == [b"0", b"1"] and released == ["full", "room"]  # half empty: room
    assert [(await s.__anext__()).data for _ in range(2)] == [b"2", b"3"]
    assert s.statistics().dropped == 0


async def test_a_cancelled_wait_loses_nothing() -> None:
    s = sub_with(0)
    waiting = asyncio.create_task(s.__anext__())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    s.push(msg(1))
    assert (await s.__anext__()).data == b"1"
