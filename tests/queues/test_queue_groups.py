"""Queue groups over real sockets in one process (the multi-process test is in
tests/integrations/test_cli.py: three `aoz reply --queue` processes)."""

from __future__ import annotations

from collections import Counter
from contextlib import AsyncExitStack

import anyio
import pytest

import aoz
from aoz import queues

pytestmark = pytest.mark.timeout(30)


async def test_each_request_answered_by_one_member_and_plain_subscribers_see_all(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    client, server = static_pair
    seen: Counter[str] = Counter()
    async with AsyncExitStack() as stack:
        subs = [
            await stack.enter_async_context(queues.subscribe(server, "SVC.work", "workers"))
            for _ in range(3)
        ]
        wild = await stack.enter_async_context(server.subscribe(">"))
        await queues.wait_for_members(client, "SVC.work", "workers", 3, timeout=5)

        async def member(sub: queues.QueueSubscription) -> None:
            async for req in sub:
                assert req.subject == "SVC.work"  # the sender's subject, not _QUEUE.
                seen[sub.member] += 1
                await req.respond(f"{sub.member}:{req.decode()}")

        async with anyio.create_task_group() as tg:
            for sub in subs:
                tg.start_soon(member, sub)
            replies = [
                (await queues.request(client, "SVC.work", str(i), timeout=5)).decode()
                for i in range(30)
            ]
            tg.cancel_scope.cancel()
        assert [r.split(":")[1] for r in replies] == [str(i) for i in range(30)]
        assert sorted(seen.values()) == [10, 10, 10]  # one sender: strict round robin
        # publications: the `>` subscriber gets the plain frames, never a _QUEUE. copy
        for i in range(5):
            assert await queues.publish(client, "SVC.work", i) == 2  # plain + one member
        await client.publish("END", b"")  # one publisher's frames arrive in order
        got = []
        while not got or got[-1].subject != "END":
            got.append(await wild.next(timeout=5))
            assert len(got) <= 6, [m.subject for m in got]
        assert [m.subject for m in got] == ["SVC.work"] * 5 + ["END"]


async def test_publish_reaches_one_member_and_no_members_means_no_responders(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    client, server = static_pair
    with pytest.raises(aoz.NoResponders):
        await queues.request(client, "SVC.none", b"x", timeout=1)
    async with (
        queues.subscribe(server, "EV.x", "g") as a,
        queues.subscribe(server, "EV.x", "g") as b,
    ):
        await queues.wait_for_members(client, "EV.x", "g", 2, timeout=5)
        assert await queues.publish(client, "EV.x", b"1") == 1
        assert await queues.publish(client, "EV.x", b"2") == 1
        one, two = await a.next(timeout=5), await b.next(timeout=5)
        assert {one.data, two.data} == {b"1", b"2"}
    # both members left: their unsubscriptions reach the sender
    await queues.wait_for_members(client, "EV.x", "g", 0, exactly=True)
    assert await queues.publish(client, "EV.x", b"3") == 0
