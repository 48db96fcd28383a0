"""ipc:// between aoz nodes on one host: static, UDP-beacon, brokered and aoz-nsd modes."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import aoz
from aoz._discovery.broker import Broker
from aoz._discovery.nsd import NamingDaemon

from ..ports import free_udp_port

FAST: dict[str, Any] = {"beacon_interval": 0.2, "connect_interval": 0.05, "connect_retries": 200}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short private directory: an ipc path must fit in 107 bytes (pytest's tmp_path may
    not leave room for aoz-<uuid>.ipc)."""
    path = Path(tempfile.mkdtemp(prefix="aoz"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def exchange(a: aoz.Node, b: aoz.Node, subject: str) -> None:
    """b receives what a publishes, and a gets b's reply to a request."""
    async with b.subscribe(subject) as sub:
        await a.wait_for_interest(subject, timeout=10)
        await a.publish(subject, b"over ipc")
        assert (await sub.next(timeout=10)).data == b"over ipc"
    async with b.subscribe(subject + ".svc") as reqs, anyio.create_task_group() as tg:
        await a.wait_for_interest(subject + ".svc", timeout=10)
        replies: list[bytes] = []

        async def ask() -> None:
            replies.append((await a.request(subject + ".svc", b"?", timeout=10)).data)

        tg.start_soon(ask)
        req = await reqs.next(timeout=10)
        await req.respond(b"!")
    assert replies == [b"!"]


async def test_static_mode(short_dir: Path) -> None:
    ep_a, ep_b = f"ipc://{short_dir}/a", "ipc://@aoz-test-" + short_dir.name
    async with (
        aoz.connect(bind=[ep_a], connect=[ep_b]) as a,
        aoz.connect(bind=[ep_b], connect=[ep_a]) as b,
    ):
        assert (a.endpoint, b.endpoint) == (ep_a, ep_b)
        await exchange(a, b, "ipc.static")
        await exchange(b, a, "ipc.static.back")


async def test_udp_mode(short_dir: Path) -> None:
    opts = {**FAST, "mode": "udp", "udp_port": free_udp_port(), "transport": "ipc",
            "ipc_dir": str(short_dir)}
    async with aoz.connect(**opts) as a, aoz.connect(**opts) as b:
        assert a.endpoint == f"ipc://{short_dir}/aoz-{a.uuid}.ipc"
        await a.wait_for_peer(b.uuid, timeout=10)
        await b.wait_for_peer(a.uuid, timeout=10)
        await exchange(a, b, "ipc.udp")


async def test_brokered_mode(short_dir: Path) -> None:
    async with Broker(host=f"ipc://{short_dir}/broker") as broker:
        assert broker.pub_endpoint == f"ipc://{short_dir}/broker.pub"
        assert broker.sub_endpoint == f"ipc://{short_dir}/broker.sub"
        opts = {"broker_pub": broker.pub_endpoint, "broker_sub": broker.sub_endpoint}
        async with aoz.connect(**opts) as a, aoz.connect(**opts) as b:
            await exchange(a, b, "ipc.broker")


async def test_with_an_aoz_nsd(short_dir: Path) -> None:
    async with NamingDaemon(host=f"ipc://{short_dir}/nsd") as nsd:
        assert nsd.endpoint == f"ipc://{short_dir}/nsd"
        assert nsd.xsub_endpoint == f"ipc://{short_dir}/nsd.xsub"
        opts = {**FAST, "naming": [nsd.endpoint], "transport": "ipc", "ipc_dir": str(short_dir)}
        async with aoz.connect(**opts) as a, aoz.connect(**opts) as b:
            assert a.endpoint.startswith("ipc://")
            peer = await a.wait_for_peer(b.uuid, timeout=10)
            assert peer.endpoint == b.endpoint
            await b.wait_for_peer(a.uuid, timeout=10)
            await exchange(a, b, "ipc.nsd")


async def test_tcp_nodes_share_an_ipc_nsd(short_dir: Path) -> None:
    """The nsd's transport and the data transport are separate choices."""
    async with NamingDaemon(host=f"ipc://{short_dir}/nsd") as nsd:
        opts = {**FAST, "naming": [nsd.endpoint]}
        async with aoz.connect(**opts) as a, aoz.connect(**opts, transport="ipc",
                                                        ipc_dir=str(short_dir)) as b:
            await a.wait_for_peer(b.uuid, timeout=10)
            assert a.endpoint.startswith("tcp://") and b.endpoint.startswith("ipc://")
            await exchange(a, b, "ipc.mixed")
            await exchange(b, a, "ipc.mixed.back")


async def test_an_nsd_on_tcp_refuses_ipc_nodes() -> None:
    """OZ programs may read what a tcp nsd relays; they cannot connect to ipc endpoints."""
    with pytest.raises(aoz.ConfigError, match="OZ programs"):
        async with aoz.connect(naming=["tcp://127.0.0.1:5756"], transport="ipc"):
            pass
