"""The naming state machine's rules against forged frames, as plain function calls."""

from __future__ import annotations

import uuid as uuidlib

from aoz._discovery.state import (
    ConnectNamingPub,
    DisconnectData,
    DropNamingConnection,
    NamingState,
    PeerExpired,
    PeerLeft,
    Phase,
    Ready,
    SendNaming,
)
from aoz._protocol.naming import NamingFrame, NamingType

C, BEACON, D, W = NamingType.CONNECT, NamingType.BEACON, NamingType.DISCONNECT, NamingType.WELCOME
XSUB = "tcp://127.0.0.1:6000"


def peer(n: int, ftype: NamingType = C, endpoint: str | None = None) -> NamingFrame:
    ep = endpoint or f"tcp://127.0.0.1:{4000 + n}"
    return NamingFrame(ftype, f"p{n}", "h", n, str(uuidlib.UUID(int=n)), ep)


def welcome(endpoint: str = XSUB) -> NamingFrame:
    return NamingFrame(W, "nsd", "h", 1, "", endpoint)


def ready(**kw: float) -> NamingState:
    st = NamingState(
        uuid=str(uuidlib.UUID(int=1)), endpoint="tcp://127.0.0.1:4001", program="p1",
        host="h", pid=1, **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    st.start(0.0)
    assert st.received(welcome(), 0.01, first=True)[0] == ConnectNamingPub(XSUB)
    assert Ready() in st.received(st.frame(C), 0.02)
    return st


def test_a_welcome_is_believed_only_as_the_first_frame_of_a_connection() -> None:
    st = ready()
    # anything relayed by an nsd comes after its welcome: refused, connection dropped
    assert st.received(welcome("tcp://10.6.6.6:1"), 1.0) == [DropNamingConnection()]
    assert st.counters["welcomes_refused"] == 1
    # the nsd restarted: a fresh connection's first frame is its new welcome
    out = st.received(welcome("tcp://127.0.0.1:6001"), 2.01, first=True)
    assert out == [ConnectNamingPub("tcp://127.0.0.1:6001"), SendNaming(C)]
    # however soon after a handshake, a second W is refused: no window is trusted
    assert st.received(welcome("tcp://10.6.6.6:2"), 2.02) == [DropNamingConnection()]
    assert st.counters["welcomes_refused"] == 2
    assert st.xsub_endpoints == [XSUB, "tcp://127.0.0.1:6001"]


def test_goodbye_with_the_link_up_is_deferred_then_refuted_by_a_beacon() -> None:
    st = ready()
    st.received(peer(2), 1.0)
    st.link_state(peer(2).endpoint, True, 1.1)
    assert st.received(peer(2, D), 1.2) == []  # data kept
    assert st.counters["goodbyes_deferred"] == 1
    assert st.received(peer(2, BEACON), 2.0) == []
    assert st.counters["goodbyes_refuted"] == 1
    assert not any(isinstance(a, PeerLeft | DisconnectData) for a in st.tick(10.0))
    assert peer(2).uuid in {p.uuid for p in st.peers}


def test_goodbye_with_the_link_up_is_confirmed_when_the_link_drops() -> None:
    st = ready()
    st.received(peer(2), 1.0)
    st.link_state(peer(2).endpoint, True, 1.1)
    assert st.received(peer(2, D), 1.2) == []
    out = st.link_state(peer(2).endpoint, False, 1.5)
    assert [type(a) for a in out] == [DisconnectData, PeerLeft]
    assert st.counters["peers_left"] == 1


def test_goodbye_without_beacons_after_it_is_confirmed_after_the_window() -> None:
    st = ready(beacon_interval=1.0, expire_beacons=3)
    st.received(peer(2), 1.0)
    st.link_state(peer(2).endpoint, True, 1.1)
    st.received(peer(2, D), 1.2)
    assert not any(isinstance(a, PeerLeft) for a in st.tick(4.0))
    assert any(isinstance(a, PeerLeft) for a in st.tick(4.3))


def test_goodbye_for_a_peer_whose_link_is_down_applies_at_once() -> None:
    st = ready()
    st.received(peer(2), 1.0)
    assert [type(a) for a in st.received(peer(2, D), 1.2)] == [DisconnectData, PeerLeft]


def test_impostor_on_a_live_peers_endpoint_is_a_conflict() -> None:
    st = ready()
    st.received(peer(2), 1.0)
    st.link_state(peer(2).endpoint, True, 1.1)
    impostor = peer(3, endpoint=peer(2).endpoint)
    assert st.received(impostor, 1.5) == []
    assert st.counters["naming_conflicts"] == 1
    # once the holder is silent for the window, the newcomer supersedes it (port reuse)
    out = st.received(impostor, 1.0 + st.expire_window + 0.1)
    assert isinstance(out[0], PeerExpired) and out[0].peer.uuid == peer(2).uuid


def test_impostor_on_our_own_endpoint_never_expires_us() -> None:
    """Bug 7 of #9."""
    st = ready()
    assert st.received(peer(3, endpoint=st.endpoint), 1.0) == []
    assert st.counters["naming_conflicts"] == 1 and st.counters["peers_expired"] == 0
    assert st.uuid in {p.uuid for p in st.peers}
    assert st.phase is Phase.READY
