"""The link rooms as units (issue #19): aoz._mesh.liveness.PeerLinks (both halves of a link,
the events it pushes) and aoz._mesh.peerlinks.PeerLinkTable (our SUB's side, from monitor
events), with stand-ins for the sockets and the data plane."""

from __future__ import annotations

import types
from typing import Any

import zmq

from aoz._discovery.peers import Peer, PeerEvent, PeerEventHub
from aoz._mesh.interest import InterestSet
from aoz._mesh.liveness import PeerLinks
from aoz._mesh.peerlinks import PeerLinkTable
from aoz._protocol.frames import inbox_subject
from aoz.config import Settings

ME = "00000000-0000-4000-8000-000000000000"
PEER = Peer(uuid="3669840e-d043-11ea-adc2-fcaa146e6b01", program="p", host="h", pid=1,
            endpoint="tcp://127.0.0.1:4000", last_seen=0.0)


class FakeLinks:
    def __init__(self) -> None:
        self.state: dict[str, bool] = {}

    def up(self, endpoint: str) -> bool:
        return self.state.get(endpoint, False)


def _links(peers: list[Peer]) -> tuple[PeerLinks, FakeLinks, InterestSet, list[PeerEvent]]:
    sub_side = FakeLinks()
    plane: Any = types.SimpleNamespace(links=sub_side)
    interest = InterestSet()
    events: list[PeerEvent] = []

    class Recording(PeerEventHub):
        def push(self, event: PeerEvent) -> None:
            events.append(event)

    hub = Recording()
    return PeerLinks(ME, plane, interest, hub, lambda: peers), sub_side, interest, events


def test_a_link_is_up_only_when_both_halves_are() -> None:
    links, sub_side, interest, events = _links([PEER])
    assert not links.up(PEER.endpoint)
    sub_side.state[PEER.endpoint] = True  # our SUB shook hands with its publisher
    assert not links.up(PEER.endpoint)  # its inbox filter has not reached us yet
    interest.apply(b"\x01" + inbox_subject(PEER.uuid))
    assert links.up(PEER.endpoint)
    links.report()
    interest.apply(b"\x00" + inbox_subject(PEER.uuid))  # frozen: the publisher cut it
    links.report()
    links.report()  # no change, no event
    assert [e.kind for e in events] == ["link_up", "link_down"]


def test_a_departed_peer_leaves_no_state_and_no_event() -> None:
    peers = [PEER]
    links, sub_side, interest, events = _links(peers)
    sub_side.state[PEER.endpoint] = True
    interest.apply(b"\x01" + inbox_subject(PEER.uuid))
    links.report()
    peers.clear()  # discovery dropped it (left or expired: those events are discovery's)
    links.report()
    assert [e.kind for e in events] == ["link_up"] and not links._seen


def _event(event: int, endpoint: str) -> list[bytes]:
    return [event.to_bytes(2, "little") + (0).to_bytes(4, "little"), endpoint.encode()]


class FakeMonitor:
    def __init__(self, events: list[list[bytes]]) -> None:
        self.events = events

    def recv_multipart(self, flags: int = 0) -> list[bytes]:
        if not self.events:
            raise zmq.Again()
        return self.events.pop(0)


class FakeSub:
    closed = False

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def connect(self, endpoint: str) -> None:
        self.calls.append(("connect", endpoint))

    def disconnect(self, endpoint: str) -> None:
        self.calls.append(("disconnect", endpoint))

    def setsockopt(self, *args: Any) -> None:
        pass

    def getsockopt(self, *args: Any) -> int:
        return 0


async def test_the_table_keeps_state_for_connected_endpoints_only() -> None:
    counted: list[tuple[str, int]] = []
    table = PeerLinkTable(Settings(mode="static", bind=["tcp://127.0.0.1:*"]),
                          lambda c, n: counted.append((c, n)))
    sub = FakeSub()
    table.attach(sub)  # type: ignore[arg-type]
    changes: list[int] = []
    table.on_change = lambda: changes.append(1)
    table.connect_peer("tcp://127.0.0.1:4000")
    assert sub.calls == [("connect", "tcp://127.0.0.1:4000")]
    mon = FakeMonitor([
        _event(zmq.EVENT_HANDSHAKE_SUCCEEDED, "tcp://127.0.0.1:4000"),
        _event(zmq.EVENT_HANDSHAKE_SUCCEEDED, "tcp://127.0.0.1:9999"),  # not ours: ignored
        [b"junk"],  # a malformed event is counted, not fatal
    ])
    table.drain_monitor(mon)  # type: ignore[arg-type]
    assert table.up("tcp://127.0.0.1:4000") and not table.up("tcp://127.0.0.1:9999")
    assert changes == [1] and ("monitor_malformed", 1) in counted
    table.drain_monitor(FakeMonitor([_event(zmq.EVENT_DISCONNECTED,  # type: ignore[arg-type]
                                            "tcp://127.0.0.1:4000")]))
    assert not table.up("tcp://127.0.0.1:4000") and changes == [1, 1]
    table._disconnect_now("tcp://127.0.0.1:4000")  # what the grace timer calls
    assert sub.calls[-1] == ("disconnect", "tcp://127.0.0.1:4000")
    assert "tcp://127.0.0.1:4000" not in table.connected
    table.close()
