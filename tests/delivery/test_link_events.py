"""Link events are pushed as the link state changes, not polled (issue #22, item 4).

The node's housekeeping used to turn link state into ``link_up``/``link_down`` events
every 0.25 s. These tests switch that backstop off (an hour between rounds), so an
event can only come from the push: the SUB's monitor for our half of a link, the
XPUB's subscription events for the peer's half, the driver's peer events.
"""

from __future__ import annotations

import signal

import anyio
import pytest

import aoz
import aoz._mesh.node
from aoz._discovery.nsd import NamingDaemon
from aoz._discovery.peers import PeerEventStream

from .harness import role

FAST = {"beacon_interval": 0.2, "connect_interval": 0.05, "connect_retries": 200}


async def _kinds_until(events: PeerEventStream, uuid: str, done: set[str],
                       timeout: float) -> list[str]:
    """The kinds of ``uuid``'s events, read until every kind in ``done`` was seen."""
    kinds: list[str] = []
    with anyio.fail_after(timeout):
        async for ev in events:
            if ev.peer.uuid == uuid:
                kinds.append(ev.kind)
                if done <= set(kinds):
                    break
    return kinds


@pytest.fixture
def no_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aoz._mesh.node, "_HOUSEKEEPING", 3600.0)


@pytest.mark.usefixtures("no_poll")
async def test_link_up_and_down_of_a_sigkilled_peer_are_pushed() -> None:
    async with NamingDaemon(port=0) as nsd, aoz.connect(naming=[nsd.endpoint], **FAST) as node:
        events = node.peer_events(links=True)
        with role("member", {"nsd": nsd.endpoint, "settings": FAST}) as peer:
            info = await peer.event("ready")
            kinds = await _kinds_until(events, info["uuid"], {"link_up"}, 15)
            peer.signal(signal.SIGKILL)
            # no poll runs: only the monitor's push can say it
            kinds += await _kinds_until(events, info["uuid"], {"link_down"}, 10)
        await events.aclose()
    assert kinds[0] == "joined" and kinds[-2:] == ["link_up", "link_down"], kinds


@pytest.mark.usefixtures("no_poll")
async def test_a_peer_that_unsubscribes_its_inbox_is_reported_down_at_once() -> None:
    """The peer's half of the link (its inbox filter at our XPUB) is pushed too: a
    peer that closes leaves our XPUB's filters before its goodbye is handled."""
    async with NamingDaemon(port=0) as nsd, aoz.connect(naming=[nsd.endpoint], **FAST) as node:
        events = node.peer_events(links=True)
        async with aoz.connect(naming=[nsd.endpoint], **FAST) as guest:
            await _kinds_until(events, guest.uuid, {"link_up"}, 15)
        kinds = await _kinds_until(events, guest.uuid, {"left", "link_down"}, 10)
        await events.aclose()
    assert "link_down" in kinds and "left" in kinds, kinds


async def test_a_stream_opened_late_with_current_starts_from_the_links_up_now() -> None:
    """A listener opened after a link came up used to wait for the next change to hear
    of it; ``current=True`` starts it with the state as it is, and ``node.links`` says
    the same."""
    async with NamingDaemon(port=0) as nsd, aoz.connect(naming=[nsd.endpoint], **FAST) as node:
        early = node.peer_events(links=True)
        async with aoz.connect(naming=[nsd.endpoint], **FAST) as guest:
            await _kinds_until(early, guest.uuid, {"link_up"}, 15)
            assert node.links == {guest.uuid: True}
            late = node.peer_events(links=True, current=True)
            members = node.peer_events(current=True)  # no link events asked for
            with anyio.fail_after(5):
                first = [await late.__anext__(), await late.__anext__()]
                member = await members.__anext__()
            assert [(e.kind, e.peer.uuid) for e in first] == [
                ("joined", guest.uuid), ("link_up", guest.uuid)]
            assert (member.kind, member.peer.uuid) == ("joined", guest.uuid)
        kinds = await _kinds_until(late, guest.uuid, {"left", "link_down"}, 10)
        assert "link_up" not in kinds, kinds  # nothing reported twice
        assert node.links == {}
        for stream in (early, late, members):
            await stream.aclose()
