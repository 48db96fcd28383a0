"""Queue groups are visible to every request path and every wait (issue #25 item 2):
before, `node.request` raised NoResponders, `aoz.wait_for_service` timed out and
`request_many` said "no responders" while only a queue group served the subject."""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
import pytest

import aoz
from aoz import queues

pytestmark = pytest.mark.timeout(30)


async def _members(server: aoz.Node, stack: AsyncExitStack, n: int) -> None:
    async def answer(sub: queues.QueueSubscription) -> None:
        async for req in sub:
            await req.respond(sub.member)

    tg = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(tg.cancel_scope.cancel)
    for _ in range(n):
        sub = await stack.enter_async_context(queues.subscribe(server, "SVC.q", "quoters"))
        tg.start_soon(answer, sub)


async def test_plain_request_and_wait_for_service_see_a_queue_group(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    client, server = static_pair
    async with AsyncExitStack() as stack:
        await _members(server, stack, 2)
        await aoz.wait_for_service(client, "SVC.q", timeout=5)
        answered = {(await client.request("SVC.q", b"x", timeout=5)).decode()
                    for _ in range(6)}
        assert len(answered) == 2  # round robin over both members, one answer each time
        assert await aoz.call(client, "SVC.q", b"x", timeout=5) in answered


async def test_request_many_gets_one_reply_per_group_and_the_plain_subscribers(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    client, server = static_pair
    async with AsyncExitStack() as stack:
        await _members(server, stack, 3)
        plain = await stack.enter_async_context(server.subscribe("SVC.q"))

        async def answer_plain() -> None:
            async for req in plain:
                await req.respond("plain")

        tg = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tg.cancel_scope.cancel)
        tg.start_soon(answer_plain)
        await queues.wait_for_members(client, "SVC.q", "quoters", 3, timeout=5)
        await client.wait_for_interest("SVC.q", timeout=5, responders=True)
        async with client.request_many("SVC.q", b"x", timeout=1.0) as replies:
            got = sorted([r.decode() async for r in replies], key=lambda r: r == "plain")
        assert len(got) == 2 and got[-1] == "plain" and got[0] != "plain", got


async def test_wait_for_service_still_times_out_without_anyone(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    client, _ = static_pair
    with pytest.raises(aoz.WaitTimeout, match="queue group"):
        await aoz.wait_for_service(client, "SVC.nobody", timeout=0.2)
    with pytest.raises(aoz.NoResponders, match="queue group"):
        await client.request("SVC.nobody", b"", timeout=1)
