"""NamingDriver against a real nsd and a fake DataLinks (no node)."""

from __future__ import annotations

import os
import uuid as uuidlib
from collections.abc import Callable

import anyio
import pytest

from aoz._discovery.driver import NamingDriver
from aoz._discovery.nsd import NamingDaemon
from aoz._discovery.peers import PeerEvent
from aoz.config import Settings
from aoz.errors import NamingTimeout

from ..ports import free_port


class FakeLinks:
    """Records what the driver asks of the node."""

    def __init__(self, settings: Settings, port: int) -> None:
        self.uuid = str(uuidlib.uuid4())
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.settings = settings
        self.program = "fake"
        self.host = "localhost"
        self.pid = os.getpid()
        self.connected: list[str] = []
        self.disconnected: list[str] = []
        self.events: list[PeerEvent] = []
        self.counts: dict[str, int] = {}
        self._changed = anyio.Event()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._changed.wait()
            self._changed = anyio.Event()

    def connect_peer(self, endpoint: str) -> None:
        self.connected.append(endpoint)
        self._changed.set()

    def disconnect_peer(self, endpoint: str) -> None:
        self.disconnected.append(endpoint)
        self._changed.set()

    def link_up(self, endpoint: str) -> bool:
        return True

    def link_silent(self, endpoint: str) -> bool:
        return False

    def peer_event(self, event: PeerEvent) -> None:
        self.events.append(event)

    def count(self, counter: str, n: int = 1) -> None:
        self.counts[counter] = self.counts.get(counter, 0) + n


async def test_two_drivers_find_each_other_and_part() -> None:
    async with NamingDaemon(port=0) as nsd:
        settings = Settings(naming=[nsd.endpoint], connect_interval=0.05, beacon_interval=0.1)
        la, lb = FakeLinks(settings, 1001), FakeLinks(settings, 1002)
        da, db = NamingDriver(settings), NamingDriver(settings)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                await tg.start(da.run, la)
                await tg.start(db.run, lb)
                assert la.connected[0] == la.endpoint  # our own endpoint first: self-delivery
                await la.wait_until(lambda: lb.endpoint in la.connected)
                assert {p.uuid for p in da.peers} == {la.uuid, lb.uuid}
                await db.goodbye()
                await la.wait_until(lambda: lb.endpoint in la.disconnected)
                tg.cancel_scope.cancel()
        assert [e.kind for e in la.events if e.peer.uuid == lb.uuid] == ["joined", "left"]
        stats = da.statistics()
        assert stats["welcomes"] == 1 and stats["naming_out"] >= 1 and stats["peers_left"] == 1


async def test_driver_times_out_with_a_helpful_error() -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    settings = Settings(naming=[endpoint], connect_interval=0.05, connect_retries=3)
    with anyio.fail_after(10), pytest.raises(NamingTimeout, match="start one with `aoz nsd`"):
        await NamingDriver(settings).run(FakeLinks(settings, 1003))
