"""Real nodes discovering each other through real naming daemons (SPEC §4-§5)."""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest
import zmq

import aoz
from aoz._discovery.nsd import NamingDaemon
from aoz._protocol.sequence import HEADER_LEN, parse_header

from ..ports import free_port
from .helpers import (
    RawPeer,
    child,
    kill,
    naming_frame,
    nsd_process,
    readline,
)

FAST: dict[str, Any] = {"beacon_interval": 0.2, "connect_interval": 0.05, "connect_retries": 200}


def _peer_uuids(node: aoz.Node) -> set[str]:
    return {p.uuid for p in node.peers}


async def _wait_mesh(nodes: list[aoz.Node], timeout: float = 20.0) -> None:
    everyone = {n.uuid for n in nodes}
    with anyio.fail_after(timeout):
        for n in nodes:
            for other in everyone:
                await n.wait_for_peer(other, timeout=timeout)
    assert all(_peer_uuids(n) == everyone for n in nodes)


async def test_nsd_first_then_nodes() -> None:
    async with NamingDaemon(port=0) as nsd, AsyncExitStack() as stack:
        a = await stack.enter_async_context(aoz.connect(naming=[nsd.endpoint], **FAST))
        b = await stack.enter_async_context(aoz.connect(naming=[nsd.endpoint], **FAST))
        await _wait_mesh([a, b])
        assert a.statistics().discovery["welcomes"] == 1


async def test_nodes_first_then_nsd() -> None:
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    nodes = [aoz.Node(naming=[endpoint], **FAST) for _ in range(3)]
    nsd = NamingDaemon(port=port)
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for n in nodes:
                    tg.start_soon(n.start)
                # the scenario itself, not synchronisation: the nsd comes up late, while
                # the nodes are already announcing into the void
                await anyio.sleep(0.5)
                await nsd.start()
            await _wait_mesh(nodes)
    finally:
        for n in nodes:
            await n.aclose()
        await nsd.aclose()


async def test_connect_fails_with_naming_timeout_when_no_nsd() -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    with anyio.fail_after(10), pytest.raises(aoz.NamingTimeout, match="aoz nsd") as info:
        async with aoz.connect(naming=[endpoint], connect_retries=4, connect_interval=0.05):
            pass
    assert info.value.endpoints == [endpoint]
    assert info.value.timeout == pytest.approx(0.2)


async def test_ten_nodes_reach_a_full_mesh_and_hear_each_other() -> None:
    async with NamingDaemon(port=0) as nsd, AsyncExitStack() as stack:
        with anyio.fail_after(30):
            nodes: list[aoz.Node] = []
            async with anyio.create_task_group() as tg:

                async def start() -> None:
                    n = await stack.enter_async_context(aoz.connect(naming=[nsd.endpoint], **FAST))
                    nodes.append(n)

                for _ in range(10):
                    tg.start_soon(start)
            await _wait_mesh(nodes)
            subs = [await stack.enter_async_context(n.subscribe("MESH.ALL")) for n in nodes]
            heard: list[set[str]] = [set() for _ in nodes]
            everyone = {n.uuid for n in nodes}
            for _ in range(200):  # links and subscriptions settle within a few rounds
                for n in nodes:
                    await n.publish("MESH.ALL", n.uuid)
                for i, sub in enumerate(subs):
                    with anyio.move_on_after(0.05):
                        while heard[i] != everyone:
                            heard[i].add((await sub.next()).decode())
                if all(h == everyone for h in heard):
                    break
            assert all(h == everyone for h in heard)


async def test_two_nsds_give_no_duplicates() -> None:
    async with NamingDaemon(port=0) as nsd1, NamingDaemon(port=0) as nsd2, AsyncExitStack() as st:
        naming = [nsd1.endpoint, nsd2.endpoint]
        a = await st.enter_async_context(aoz.connect(naming=naming, **FAST))
        b = await st.enter_async_context(aoz.connect(naming=naming, **FAST))
        await _wait_mesh([a, b])
        assert a.statistics().discovery["welcomes"] == 2
        assert len(a.peers) == 2  # frames arrive twice, the table holds each uuid once
        sub = await st.enter_async_context(b.subscribe("DUP.T"))
        await a.wait_for_interest("DUP.T", timeout=10)
        for i in range(50):
            await a.publish("DUP.T", i)
        await a.publish("DUP.T", "end")
        got = []
        with anyio.fail_after(10):
            while (msg := await sub.next()).decode() != "end":
                got.append(msg.decode())
        assert got == list(range(50))


async def test_nsd_restart_keeps_data_flowing_and_finds_new_nodes() -> None:
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(nsd_process(port))
        a = await stack.enter_async_context(aoz.connect(naming=[endpoint], **FAST))
        b = await stack.enter_async_context(aoz.connect(naming=[endpoint], **FAST))
        await _wait_mesh([a, b])
        sub = await stack.enter_async_context(b.subscribe("FLOW.T"))
        await a.wait_for_interest("FLOW.T", timeout=10)
        sent = 0
        running = True

        async def publisher() -> None:
            nonlocal sent
            while running:
                await a.publish("FLOW.T", sent)
                sent += 1
                await anyio.sleep(0.002)  # a steady stream, not synchronisation

        async with anyio.create_task_group() as tg:
            tg.start_soon(publisher)
            kill(first)  # SIGKILL: no goodbye from the nsd
            async with nsd_process(port):
                t0 = time.monotonic()
                c = await stack.enter_async_context(aoz.connect(naming=[endpoint], **FAST))
                await _wait_mesh([a, b, c])
                heal = time.monotonic() - t0
            running = False
        await a.publish("FLOW.T", "end")
        got = []
        with anyio.fail_after(10):
            while (msg := await sub.next()).decode() != "end":
                got.append(msg.decode())
        assert got == list(range(sent))  # nothing lost on the established link
        assert a.statistics().discovery["welcomes"] == 2
        assert heal < 15


async def test_killed_peer_process_is_expired() -> None:
    script = (
        "import sys, anyio, aoz\n"
        "async def main():\n"
        "    async with aoz.connect(naming=[sys.argv[1]], beacon_interval=0.2) as n:\n"
        "        print(n.uuid, flush=True)\n"
        "        await anyio.sleep_forever()\n"
        "anyio.run(main)\n"
    )
    async with NamingDaemon(port=0) as nsd:
        settings = {**FAST, "expire_beacons": 2}
        async with aoz.connect(naming=[nsd.endpoint], **settings) as node:
            with child(["-c", script, nsd.endpoint]) as proc:
                assert proc.stdout is not None
                uuid = (await readline(proc.stdout)).strip()
                await node.wait_for_peer(uuid, timeout=15)
                events = node.peer_events()
                kill(proc)
                with anyio.fail_after(15):
                    async for ev in events:
                        if ev.peer.uuid == uuid:
                            break
                assert ev.kind == "expired"
                assert uuid not in _peer_uuids(node)
                assert node.statistics().discovery["peers_expired"] == 1


async def test_goodbye_then_a_new_node_on_the_same_port_is_connected() -> None:
    async with NamingDaemon(port=0) as nsd, aoz.connect(naming=[nsd.endpoint], **FAST) as node:
        events = node.peer_events()
        async with aoz.connect(naming=[nsd.endpoint], **FAST) as leaver:
            await node.wait_for_peer(leaver.uuid, timeout=10)
            port = int(leaver.endpoint.rsplit(":", 1)[1])
            gone = leaver.uuid
        with anyio.fail_after(10):
            async for ev in events:
                if ev.peer.uuid == gone and ev.kind != "joined":
                    break
        assert ev.kind == "left"
        # an OZ node (raw pyzmq) now binds the port the leaver used
        raw = None
        with anyio.fail_after(10):
            while raw is None:
                try:
                    raw = RawPeer(nsd.endpoint, data_port=port)
                except zmq.ZMQError:  # the leaver's socket is still being torn down
                    await anyio.sleep(0.05)
        try:
            async with node.subscribe("REUSE.T") as sub:
                with anyio.fail_after(15):
                    while raw.uuid not in _peer_uuids(node):
                        await raw.pump()
                        if raw.welcomed:
                            raw.announce()
                    msg = None
                    while msg is None:  # until the data link and subscription are up
                        await raw.data_pub.send(b"REUSE.T\0\x01\0\x00hello")
                        with anyio.move_on_after(0.05):
                            msg = await sub.next()
                assert msg.subject == "REUSE.T" and msg.data == b"hello"
        finally:
            raw.close()


async def test_raw_spec_peer_is_discovered_and_receives_publications() -> None:
    async with NamingDaemon(port=0) as nsd, aoz.connect(naming=[nsd.endpoint], **FAST) as node:
        raw = RawPeer(nsd.endpoint)
        try:
            raw.data_sub.setsockopt(zmq.SUBSCRIBE, b"RAW.T\0")
            with anyio.fail_after(15):
                while raw.uuid not in _peer_uuids(node) or node.endpoint not in raw.connected:
                    await raw.pump()
                    if raw.welcomed:
                        raw.announce()
                peer = next(p for p in node.peers if p.uuid == raw.uuid)
                assert (peer.program, peer.host, peer.pid) == ("rawpeer", "rawhost", 4242)
                await node.wait_for_interest("RAW.T", timeout=10)
                await node.publish("RAW.T", b"to-oz")
                data = await raw.data_sub.recv()
            # SPEC §1: subject, NUL, type, NUL, payload; the payload is aoz's: the codec byte
            # with the sequence flag (raw | 0x04: below 0x7F, OZ-safe), the publisher id,
            # the number (1), the body
            assert data[:9] == b"RAW.T\0\x01\0\x04"
            assert parse_header(data, 8) == (0, node._frames.publisher, 1, 8 + HEADER_LEN)
            assert data[8 + HEADER_LEN :] == b"to-oz"
        finally:
            raw.close()


async def test_malformed_naming_frames_do_not_crash_nodes() -> None:
    async with NamingDaemon(port=0) as nsd, aoz.connect(naming=[nsd.endpoint], **FAST) as node:
        raw = RawPeer(nsd.endpoint)
        evil_uuid = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
        garbage = [
            b"_NAMING\0short",
            naming_frame(b"C", evil_uuid, "ipc:///tmp/evil"),
            naming_frame(b"C", evil_uuid, "tcp://*:1"),
            naming_frame(b"X", evil_uuid, "tcp://127.0.0.1:1"),
            naming_frame(b"C", "not-a-uuid", "tcp://127.0.0.1:1"),
            naming_frame(b"C", node.uuid, "tcp://127.0.0.1:1"),  # our uuid, someone else's port
            naming_frame(b"W", "", "inproc://evil"),
            b"_NAMING" + b"\xff" * 875,
        ]
        try:
            with anyio.fail_after(15):
                while node.statistics().discovery["naming_malformed"] < 6:
                    await raw.pump()
                    if raw.welcomed:
                        for g in garbage:
                            await raw.naming_pub.send(g)
            stats = node.statistics().discovery
            assert stats["naming_conflicts"] >= 1
            assert all(p.endpoint.startswith("tcp://127.0.0.1:") for p in node.peers)
            assert evil_uuid not in _peer_uuids(node)
            assert _peer_uuids(node) == {node.uuid}
            # still fully working: a newcomer is found and heard
            async with aoz.connect(naming=[nsd.endpoint], **FAST) as other:
                await _wait_mesh([node, other])
        finally:
            raw.close()
