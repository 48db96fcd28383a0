"""nsd-free discovery with UDP broadcast beacons (SPEC §6), on a random UDP port."""

from __future__ import annotations

import socket
import uuid as uuidlib
from typing import Any

import anyio
import pytest

import aoz
from aoz._discovery.udp import decode_datagram
from aoz._protocol.naming import NamingFrame, NamingType, encode_beacon
from aoz.errors import DecodeError

from ..ports import free_udp_port

FAST: dict[str, Any] = {"beacon_interval": 0.2, "connect_interval": 0.05, "connect_retries": 100}


async def test_udp_nodes_find_each_other_and_say_goodbye() -> None:
    port = free_udp_port()
    settings = {**FAST, "mode": "udp", "udp_port": port}
    async with aoz.connect(**settings) as a:
        events = a.peer_events()
        async with aoz.connect(**settings) as b:
            await a.wait_for_peer(b.uuid, timeout=10)
            await b.wait_for_peer(a.uuid, timeout=10)
            async with b.subscribe("UDP.T") as sub:
                await a.wait_for_interest("UDP.T", timeout=10)
                await a.publish("UDP.T", "over udp discovery")
                assert (await sub.next(timeout=10)).decode() == "over udp discovery"
            gone = b.uuid
        with anyio.fail_after(10):
            async for ev in events:
                if ev.peer.uuid == gone and ev.kind != "joined":
                    break
        assert ev.kind == "left"
        assert {p.uuid for p in a.peers} == {a.uuid}


async def test_hostile_datagrams_are_counted_and_ignored() -> None:
    port = free_udp_port()
    async with aoz.connect(**FAST, mode="udp", udp_port=port) as node:
        evil = NamingFrame(NamingType.CONNECT, "x", "h", 1, str(uuidlib.uuid4()), "ipc:///tmp/evil")
        bad = encode_beacon(evil, uuidlib.UUID(evil.uuid).bytes)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            with anyio.fail_after(10):
                while node.statistics().discovery["naming_malformed"] < 2:
                    s.sendto(b"junk", ("127.255.255.255", port))
                    s.sendto(bad, ("127.255.255.255", port))
                    await anyio.sleep(0.02)  # pacing the sender; the loop waits on the counter
        assert {p.uuid for p in node.peers} == {node.uuid}


def test_datagram_node_id_must_match_the_uuid() -> None:
    f = NamingFrame(NamingType.BEACON, "p", "h", 1, str(uuidlib.uuid4()), "tcp://127.0.0.1:1")
    assert decode_datagram(encode_beacon(f, uuidlib.UUID(f.uuid).bytes)) == f
    with pytest.raises(DecodeError, match="node id"):
        decode_datagram(encode_beacon(f, bytes(16)))
