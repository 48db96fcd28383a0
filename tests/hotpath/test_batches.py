"""What the compiled hot path brought to the API, on whichever path runs: batch publish
(`publish_many`), per-drain hand-over (`Mailbox.push_many`), and messages that the
cyclic garbage collector does not track."""

from __future__ import annotations

import gc
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aoz
from aoz._mesh.message import Message, WeakResponder
from aoz._mesh.subscription import Mailbox
from aoz._protocol.frames import Kind

ANY = "tcp://127.0.0.1:*"


async def test_publish_many_delivers_every_item_in_order_with_no_gap() -> None:
    async with aoz.connect(bind=[ANY]) as node:
        async with node.subscribe("MANY") as sub:
            await node.wait_for_interest("MANY")
            await node.publish("MANY", b"first")
            await node.publish_many("MANY", [i.to_bytes(4, "big") for i in range(2000)])
            await node.publish("MANY", {"last": True})
            got = [await sub.next(timeout=5) for _ in range(2002)]
            assert got[0].data == b"first" and got[-1].decode() == {"last": True}
            assert [int.from_bytes(m.data, "big") for m in got[1:-1]] == list(range(2000))
            assert [m.sequence for m in got] == list(range(1, 2003))
            assert sub.statistics().lost == 0 and sub.statistics().dropped == 0
        assert node.statistics().messages_out == 2002


async def test_publish_many_refuses_a_bad_item_before_sending_or_numbering() -> None:
    async with aoz.connect(bind=[ANY]) as node, node.subscribe("MANY") as sub:
        await node.wait_for_interest("MANY")
        await node.publish("MANY", b"a")
        with pytest.raises(aoz.EncodeError):
            await node.publish_many("MANY", [b"b", {"c": 1}, object()])
        await node.publish("MANY", b"d")
        first, second = await sub.next(timeout=5), await sub.next(timeout=5)
        assert (first.data, second.data) == (b"a", b"d")
        assert (first.sequence, second.sequence, second.gap) == (1, 2, 0)
        assert sub.pending == 0


async def test_publish_many_on_a_blocking_node_loses_nothing_at_a_slow_reader() -> None:
    n = 20_000
    received: list[int] = []
    async with (
        aoz.connect(bind=[ANY], send_policy="block", send_hwm=50) as node,
        node.subscribe("MANY", queue_size=64, overflow="block") as sub,
    ):
        await node.wait_for_interest("MANY")

        async def read() -> None:
            async for msg in sub:
                received.append(msg.sequence or 0)
                if len(received) == n:
                    return

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            with anyio.fail_after(60):
                await node.publish_many("MANY", [b"x" * 100] * n)
        assert received == list(range(1, n + 1))
        stats = sub.statistics()
        assert (stats.lost, stats.dropped) == (0, 0)
        assert node.statistics().blocked_sends > 0  # it did have to wait


def _pushes(limit: int, overflow: Any, queued: int, items: list[int], many: bool
            ) -> tuple[list[int], int, int]:
    box: Mailbox[int] = Mailbox(limit, overflow)
    for i in range(queued):
        box.push(-1 - i)
    if many:
        box.push_many(items)
    else:
        for item in items:
            box.push(item)
    return list(box._queue), box.received, box.dropped


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(1, 8), overflow=st.sampled_from(["drop_newest", "drop_oldest"]),
       queued=st.integers(0, 8), items=st.lists(st.integers(0, 100), max_size=20))
def test_push_many_is_push_in_a_loop(limit: int, overflow: Any, queued: int,
                                     items: list[int]) -> None:
    queued = min(queued, limit)
    assert _pushes(limit, overflow, queued, items, True) == \
        _pushes(limit, overflow, queued, items, False)


async def test_push_many_wakes_as_many_consumers_as_it_brings_items() -> None:
    box: Mailbox[int] = Mailbox(10)
    got: list[int] = []

    async def consume() -> None:
        got.append(await box._get())

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(consume)
        for _ in range(100):  # bounded: until all three wait
            if len(box._waiters) == 3:
                break
            await anyio.lowlevel.checkpoint()
        assert len(box._waiters) == 3
        box.push_many([1, 2])
        for _ in range(100):
            if len(got) == 2:
                break
            await anyio.lowlevel.checkpoint()
        assert sorted(got) == [1, 2] and len(box._waiters) == 1
        box.push_many([3])
    assert sorted(got) == [1, 2, 3]


class _Node:
    async def respond_to(self, handle: str, data: object, codec: Any) -> None:
        raise AssertionError("not reached")


async def test_messages_are_not_tracked_by_the_gc_and_hold_their_node_weakly() -> None:
    node = _Node()
    msg = Message(b"S\0\x02\0h", 1, 4, 4, Kind.REQUEST, "_INBOX.x", 0.0, WeakResponder(node))
    assert not gc.is_tracked(msg)
    del node
    gc.collect()
    with pytest.raises(aoz.ClosedError, match="gone"):
        await msg.respond(b"late")


async def test_a_node_with_queued_messages_is_freed_when_closed_and_dropped() -> None:
    import weakref

    async with aoz.connect(bind=[ANY]) as node:
        sub = node.subscribe("KEEP")
        await node.wait_for_interest("KEEP")
        await node.publish_many("KEEP", [b"m"] * 50)
        kept = await sub.next(timeout=5)
        ref = weakref.ref(node)
    del node, sub
    gc.collect()
    assert ref() is None  # the message it left behind does not keep it alive
    assert kept.data == b"m"
