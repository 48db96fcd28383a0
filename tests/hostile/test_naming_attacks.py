"""Attacks on the naming plane (issue #11, bug 7 of #9), reproduced with real sockets.

Every attacker here is a plain ZeroMQ socket connected to the nsd's XSUB: what any
program that can reach the nsd can do in OZ's protocol. Each test asserts the figure
the issue reported (messages lost to a forged ``D``, peers evicted...).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import pytest
import zmq
import zmq.asyncio

import aoz
from aoz._discovery.nsd import NamingDaemon
from aoz._protocol.naming import NamingType

from .helpers import eventually, forged, naming_attacker, new_uuid

D, C, W = NamingType.DISCONNECT, NamingType.CONNECT, NamingType.WELCOME
# OZ's beacon interval (1 s): a forged D right after a beacon had the longest effect
FAST: dict[str, Any] = {"beacon_interval": 1.0, "connect_interval": 0.05, "connect_retries": 200}


@asynccontextmanager
async def mesh() -> AsyncIterator[tuple[NamingDaemon, aoz.Node, aoz.Node]]:
    """An nsd, a publisher ``a`` and a subscriber ``b`` whose data link to ``a`` is up."""
    async with NamingDaemon(port=0) as nsd, AsyncExitStack() as stack:
        a = await stack.enter_async_context(aoz.connect(naming=[nsd.endpoint], **FAST))
        b = await stack.enter_async_context(aoz.connect(naming=[nsd.endpoint], **FAST))
        await b.wait_for_peer(a.uuid)
        await a.wait_for_peer(b.uuid)
        yield nsd, a, b


def disc(node: aoz.Node) -> dict[str, int]:
    return node.statistics().discovery


async def stream(a: aoz.Node, b: aoz.Node, n: int, attack: Any) -> int:
    """``a`` publishes ``n`` numbered messages (2 ms apart) while ``attack(i)`` runs
    before message ``i``; returns how many ``b`` lost."""
    got: set[int] = set()
    async with b.subscribe("HOSTILE.T") as sub:
        await a.wait_for_interest("HOSTILE.T")
        await eventually(lambda: b._links.up(a.endpoint), "b's data link to a is up")

        async def collect() -> None:
            with anyio.move_on_after(n * 0.002 + 10):
                async for msg in sub:
                    got.add(int(msg.data))
                    if len(got) == n or int(msg.data) == n - 1:
                        # the last one arrived: whatever is missing now was lost
                        return

        async with anyio.create_task_group() as tg:
            tg.start_soon(collect)
            for i in range(n):
                await attack(i)
                await a.publish("HOSTILE.T", str(i).encode())
                await anyio.sleep(0.002)  # a steady feed, as market data is
    return n - len(got)


@asynccontextmanager
async def naming_observer(nsd: NamingDaemon) -> AsyncIterator[zmq.asyncio.Socket]:
    """A naming SUB on the nsd: the attacker watches for the victim's beacons."""
    sock = zmq.asyncio.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, b"_NAMING")
    sock.connect(nsd.endpoint)
    try:
        yield sock
    finally:
        sock.close(linger=0)


async def next_beacon(observer: zmq.asyncio.Socket, uuid: str) -> None:
    with anyio.fail_after(5):
        while True:
            raw = await observer.recv()
            if raw[257:258] == b"c" and raw[588:624].decode() == uuid:
                return


async def test_one_forged_goodbye_loses_no_messages() -> None:
    async with (
        mesh() as (nsd, a, b),
        naming_attacker(nsd.xsub_endpoint) as evil,
        naming_observer(nsd) as observer,
    ):

        async def attack(i: int) -> None:
            if i == 50:  # right after the victim's beacon, as in the issue
                await next_beacon(observer, a.uuid)
                await evil.send(forged(D, a.uuid, a.endpoint))

        lost = await stream(a, b, 400, attack)
        print(f"forged D once: {lost} of 400 messages lost")
        assert lost == 0
        assert disc(b)["goodbyes_deferred"] == 1  # the D did arrive, and was judged
        assert a.uuid in {p.uuid for p in b.peers}
        assert disc(b)["peers_left"] == 0 and disc(b)["peers_expired"] == 0


async def test_forged_goodbyes_every_100ms_for_3s_lose_no_messages() -> None:
    async with mesh() as (nsd, a, b), naming_attacker(nsd.xsub_endpoint) as evil:

        async def attack(i: int) -> None:
            if i % 50 == 0:  # every 50 x 2 ms
                await evil.send(forged(D, a.uuid, a.endpoint))

        lost = await stream(a, b, 1500, attack)
        print(f"forged D every ~100 ms for ~3 s: {lost} of 1500 messages lost")
        assert lost == 0
        # a's beacons (every second) refuted the goodbyes as they came
        assert disc(b)["goodbyes_deferred"] >= 2
        assert disc(b)["goodbyes_refuted"] >= 1
        assert a.uuid in {p.uuid for p in b.peers}
        assert disc(b)["peers_left"] == 0


async def test_a_real_goodbye_still_disconnects() -> None:
    async with NamingDaemon(port=0) as nsd, aoz.connect(naming=[nsd.endpoint], **FAST) as b:
        async with aoz.connect(naming=[nsd.endpoint], **FAST) as a:
            await b.wait_for_peer(a.uuid)
            await eventually(lambda: b._links.up(a.endpoint), "b's data link to a is up")
        # a sent D and closed its publisher: the link going down confirms the goodbye
        await eventually(lambda: a.uuid not in {p.uuid for p in b.peers}, "a left b's table")
        assert disc(b)["peers_left"] == 1


async def test_an_impostor_uuid_on_a_live_peers_endpoint_evicts_nobody() -> None:
    async with mesh() as (nsd, a, b), naming_attacker(nsd.xsub_endpoint) as evil:
        await eventually(lambda: b._links.up(a.endpoint), "b's data link to a is up")
        before = disc(b)["naming_conflicts"]
        await evil.send(forged(C, new_uuid(), a.endpoint))
        await eventually(lambda: disc(b)["naming_conflicts"] > before, "b judged the impostor")
        assert {p.uuid for p in b.peers} == {a.uuid, b.uuid}
        assert disc(b)["peers_expired"] == 0
        async with b.subscribe("HOSTILE.after") as sub:  # data still flows from a
            await a.wait_for_interest("HOSTILE.after")
            await a.publish("HOSTILE.after", b"still here")
            assert (await sub.next(timeout=5)).data == b"still here"


async def test_an_impostor_uuid_on_our_own_endpoint_does_not_expire_us() -> None:
    """Bug 7 of #9: another uuid announcing *our* endpoint expired us from our table."""
    async with mesh() as (nsd, _a, b), naming_attacker(nsd.xsub_endpoint) as evil:
        before = disc(b)["naming_conflicts"]
        await evil.send(forged(C, new_uuid(), b.endpoint))
        await eventually(lambda: disc(b)["naming_conflicts"] > before, "b judged the impostor")
        assert b.uuid in {p.uuid for p in b.peers}
        assert len(b.peers) == 2 and disc(b)["peers_expired"] == 0


async def test_a_forged_welcome_is_refused() -> None:
    ctx = zmq.asyncio.Context.instance()
    trap = ctx.socket(zmq.XSUB)  # where the forged W tries to send nodes' announcements
    trap.setsockopt(zmq.LINGER, 0)
    port = trap.bind_to_random_port("tcp://127.0.0.1")
    mon = trap.get_monitor_socket(zmq.EVENT_ACCEPTED)
    try:
        async with mesh() as (nsd, _a, b), naming_attacker(nsd.xsub_endpoint) as evil:
            await evil.send(forged(W, "", f"tcp://127.0.0.1:{port}"))
            await eventually(lambda: disc(b)["welcomes_refused"] >= 1, "b judged the W")
            assert disc(b)["welcomes"] == 1  # the nsd's own, at connection time
        with pytest.raises(zmq.Again):
            await mon.recv_multipart(zmq.NOBLOCK)  # nobody ever connected to the trap
    finally:
        trap.disable_monitor()
        mon.close(linger=0)
        trap.close(linger=0)
