"""Issue #22, item 1: every subscription reaches every publisher, however many.

Subscriptions travel from a node's data SUB to each publisher it is connected to, as
messages on that link; libzmq drops those above the SUB's send high-water mark
(1,000 by default) without a word, in the burst of a subscribe loop and again in the
burst that greets every publisher that connects later. Before the fix a publisher
started before the subscriptions saw about 4,000 of 10,001 filters and one started
after them saw 1,002, without the subscriber's inbox filter: its link never came up
and requests to it had no route back.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

import aoz
from aoz._discovery.nsd import NamingDaemon
from aoz._protocol.frames import inbox_subject

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

N = 10_000
FAST: dict[str, Any] = {"beacon_interval": 0.5, "connect_interval": 0.05, "connect_retries": 200}


def subject(i: int) -> str:
    return f"SCALE.{i}"


async def filters_reached(pub: aoz.Node, sub: aoz.Node, timeout: float = 30.0) -> int:
    """How many of ``sub``'s N + 1 filters (subjects and inbox) reached ``pub``'s
    publisher once the set stops changing (it changes at every filter that arrives)."""
    wanted = {subject(i).encode() + b"\0" for i in range(N)} | {inbox_subject(sub.uuid)}
    with anyio.move_on_after(timeout):
        while not wanted <= pub.interest.filters():
            await pub.interest_changed(timeout=2.0)  # bounded by the scope above
            if wanted - pub.interest.filters() and not await _changes_within(pub, 2.0):
                break  # quiet for 2 s with filters missing: they are not coming
    return len(wanted & pub.interest.filters())


async def _changes_within(node: aoz.Node, seconds: float) -> bool:
    before = node.interest.version
    await node.interest_changed(timeout=seconds)
    return node.interest.version != before


async def serve(node: aoz.Node, subject: str, *, task_status: Any) -> None:
    async with node.subscribe(subject) as sub:
        task_status.started()
        async for msg in sub:
            await msg.respond(b"ok " + msg.data)


async def test_ten_thousand_subscriptions_reach_early_and_late_publishers() -> None:
    async with NamingDaemon(port=0) as nsd, AsyncExitStack() as stack:
        early = await stack.enter_async_context(aoz.connect(naming=[nsd.endpoint], **FAST))
        sub = await stack.enter_async_context(aoz.connect(naming=[nsd.endpoint], **FAST))
        await sub.wait_for_peer(early.uuid)
        await early.wait_for_peer(sub.uuid)
        for i in range(N):
            await stack.enter_async_context(sub.subscribe(subject(i)))
        late = await stack.enter_async_context(aoz.connect(naming=[nsd.endpoint], **FAST))
        await sub.wait_for_peer(late.uuid)

        reached_early = await filters_reached(early, sub)
        reached_late = await filters_reached(late, sub)
        print(f"filters reached of {N + 1}: early publisher {reached_early}, "
              f"late publisher {reached_late}")
        assert reached_early == N + 1
        assert reached_late == N + 1

        # the links come up both ways: requests and their replies are routed
        async with anyio.create_task_group() as tg:
            await tg.start(serve, sub, "SVC.sub")
            await tg.start(serve, late, "SVC.late")
            await late.wait_for_interest("SVC.sub", timeout=10, responders=True)
            await sub.wait_for_interest("SVC.late", timeout=10, responders=True)
            with anyio.fail_after(10):
                for _ in range(200):  # until both links are judged up
                    if late._links.up(sub.endpoint) and sub._links.up(late.endpoint):
                        break
                    await late.interest_changed(timeout=0.05)
            assert late._links.up(sub.endpoint) and sub._links.up(late.endpoint)
            assert (await late.request("SVC.sub", b"1", timeout=5)).data == b"ok 1"
            assert (await sub.request("SVC.late", b"2", timeout=5)).data == b"ok 2"
            tg.cancel_scope.cancel()
