"""Identities bound to keys (issue #22, item 9): with ``curve_identity=True`` a listed
key cannot announce, beacon or publish as another node, and per-key permissions hold
where a brokerless mesh can enforce them. Real sockets, CURVE on."""

from __future__ import annotations

import socket
import uuid as uuidlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import pytest
import zmq
import zmq.asyncio

import aoz
from aoz._discovery.nsd import NamingDaemon
from aoz._mesh.identity import (
    IdentityTable,
    Permissions,
    SubscribeGate,
    identity_publisher,
    identity_uuid,
)
from aoz._protocol import heartbeat
from aoz._protocol.frames import encode_publish, encode_request, is_uuid, make_handle
from aoz._protocol.naming import NamingFrame, NamingType, encode_beacon
from aoz._protocol.sequence import encode_header
from aoz.errors import ConfigError
from aoz.security import keypair
from tests.ports import free_udp_port

from .helpers import eventually, forged

FAST: dict[str, Any] = {"beacon_interval": 0.5, "connect_interval": 0.05, "connect_retries": 200}


def test_the_key_identity_decision() -> None:
    """Pure: which key owns which uuid and publisher id, and what permissions allow."""
    (a, _), (b, _), (x, _) = keypair(), keypair(), keypair()
    table = IdentityTable([a, b])
    ua, ub = identity_uuid(a), identity_uuid(b)
    assert is_uuid(ua) and is_uuid(ub) and ua != identity_uuid(a)  # random per process
    assert table.owns_uuid(a, ua) and table.owns_uuid(b, ub)
    assert not table.owns_uuid(a, ub) and not table.owns_uuid(b, ua)  # another's identity
    assert not table.owns_uuid(x, identity_uuid(x))  # an unlisted key owns nothing
    assert not table.owns_uuid(a, "3669840e-d043-11ea-adc2-fcaa146e6b01")  # not derived
    assert table.key_of_uuid(ua) == a and table.key_of_uuid(identity_uuid(x)) is None
    pa = identity_publisher(a)
    assert table.owns_publisher(a, pa) and not table.owns_publisher(b, pa)
    assert table.key_of_publisher(pa) == a and table.key_of_publisher(12345) is None
    perms = Permissions({x: {"publish": ["MD.>"], "subscribe": ["MD.IBM"]}})
    assert perms.may_publish(x, "MD.NYSE.IBM") and not perms.may_publish(x, "ORDERS.1")
    assert perms.may_publish(x, "_INBOX.whatever") and perms.may_publish(a, "ORDERS.1")
    # aoz's own control subjects (heartbeats, cache queries) are never limited
    assert perms.may_publish(x, "_AOZ.HB") and perms.may_publish(x, "_AOZ.CACHE")
    assert perms.may_subscribe(x, b"_AOZ.HB\0") and perms.may_subscribe(x, b"_AOZ.CACHE\0")
    assert perms.may_subscribe(x, b"MD.IBM\0") and not perms.may_subscribe(x, b"MD.")
    assert not perms.may_subscribe(x, b"") and perms.may_subscribe(a, b"")
    with pytest.raises(ConfigError):
        Permissions({x: {"pub": ["A"]}})
    # the publisher's gate: a (unrestricted) and x (refused) both subscribe ORDERS.
    gate = SubscribeGate(Permissions({x: {"subscribe": ["MD.>"]}}))
    assert gate.event(b"\x01ORDERS.", a) == (True, b"\x01ORDERS.")
    assert gate.event(b"\x01ORDERS.", x) == (False, b"") and gate.refused == 1
    assert gate.event(b"\x01MD.", x) == (True, b"\x01MD.")
    assert gate.event(b"\x01_INBOX.", x) == (True, b"\x01_INBOX.")  # replies always
    # departures come without a key: charged to the refused subscription first, so the
    # filter a still has is never lost (here a leaves first: interest over-reported
    # until the last one goes)
    assert gate.event(b"\x00ORDERS.", None) == (False, b"")
    assert gate.event(b"\x00ORDERS.", None) == (False, b"\x00ORDERS.")
    assert gate.event(b"\x00ORDERS.", None) == (False, b"")  # nothing left: no event
    assert gate.event(b"\x00MD.", x) == (True, b"\x00MD.")  # an explicit unsubscribe


def test_settings_for_identity() -> None:
    (a, a_sec) = keypair()
    with pytest.raises(ConfigError, match="curve_identity needs"):
        aoz.Settings(curve_identity=True, curve_public=a, curve_secret=a_sec)  # no allow-list
    with pytest.raises(ConfigError, match="curve_identity needs"):
        aoz.Settings(curve_identity=True, curve_public=a, curve_secret=a_sec, curve_allow=[a],
                     mode="static", bind=["tcp://127.0.0.1:*"])
    with pytest.raises(ConfigError, match="curve_permissions needs"):
        aoz.Settings(curve_permissions={a: {"publish": []}})
    s = aoz.Settings(curve_identity=True, curve_public=a, curve_secret=a_sec, curve_allow=[a])
    assert s.curve_server_secret is None  # no mesh secret on nodes


@asynccontextmanager
async def _mesh(
    n: int, *, nsd_identity: bool = True, extra_keys: int = 1, **extra: Any
) -> AsyncIterator[tuple[NamingDaemon, list[aoz.Node], list[tuple[str, str]], str]]:
    """An identity nsd and ``n`` identity nodes; ``extra_keys`` more listed keys for
    attackers. Yields (nsd, nodes, every keypair, the nsd's public key)."""
    nsd_pub, nsd_sec = keypair()
    keys = [keypair() for _ in range(n + extra_keys)]
    allow = [pub for pub, _ in keys]
    mesh = {"curve_server_public": nsd_pub, "curve_allow": allow, "naming_curve": True,
            "curve_identity": True, **FAST, **extra}
    async with (
        NamingDaemon(port=0, curve_server_secret=nsd_sec, curve_allow=allow,
                     identity=nsd_identity) as nsd,
        AsyncExitStack() as stack,
    ):
        nodes = [
            await stack.enter_async_context(
                aoz.connect(naming=[nsd.endpoint], curve_public=pub, curve_secret=sec, **mesh)
            )
            for pub, sec in keys[:n]
        ]
        for node in nodes:
            for other in nodes:
                await node.wait_for_peer(other.uuid, timeout=10)
        yield nsd, nodes, keys, nsd_pub


@pytest.mark.parametrize("nsd_identity", [True, False], ids=["checked", "unchecked"])
async def test_a_listed_key_cannot_announce_as_another_node(nsd_identity: bool) -> None:
    """The insider holds a listed key (x): it completes the nsd's handshake, and says it
    is node a (a goodbye, a second address) and node b (a fresh uuid of b's key). The
    nsd that checks identities relays none of it; the unchecked one (the control: what
    happened before) relays it all, and the victim sees forged goodbyes and conflicts."""
    async with _mesh(2, nsd_identity=nsd_identity) as (nsd, (a, b), keys, nsd_pub):
        x_pub, x_sec = keys[2]
        before = dict(b.statistics().discovery)
        ctx = zmq.asyncio.Context.instance()
        evil = ctx.socket(zmq.XPUB)
        evil.setsockopt(zmq.LINGER, 0)
        try:
            evil.setsockopt(zmq.CURVE_SERVERKEY, nsd_pub.encode())
            evil.setsockopt(zmq.CURVE_PUBLICKEY, x_pub.encode())
            evil.setsockopt(zmq.CURVE_SECRETKEY, x_sec.encode())
            evil.connect(nsd.xsub_endpoint)
            with anyio.fail_after(10):
                assert await evil.recv() == b"\x01_NAMING"  # the handshake passed: listed
            b_again = identity_uuid(keys[1][0])  # a new uuid of b's key
            for frame in (
                forged(NamingType.DISCONNECT, a.uuid, a.endpoint),  # a's goodbye
                forged(NamingType.CONNECT, a.uuid, "tcp://127.0.0.1:9"),  # a, elsewhere
                forged(NamingType.BEACON, b_again, "tcp://127.0.0.1:10"),  # b, again
                forged(NamingType.WELCOME, "", "tcp://127.0.0.1:9"),  # only the nsd welcomes
            ):
                await evil.send(frame)
            # x's own identity is relayed: once b heard it, it heard everything before
            own = identity_uuid(x_pub)
            await evil.send(forged(NamingType.CONNECT, own, "tcp://127.0.0.1:11"))
            await b.wait_for_peer(own, timeout=10)
        finally:
            evil.close(linger=0)
        after = b.statistics().discovery
        if nsd_identity:
            assert nsd.identity_refused == 4
            for counter in ("goodbyes_deferred", "naming_conflicts", "welcomes_refused"):
                assert after[counter] == before[counter], counter
            assert b_again not in {p.uuid for p in b.peers}
        else:
            assert nsd.identity_refused == 0
            # a's forged goodbye was judged (deferred on a live link, or believed)
            judged = ("goodbyes_deferred", "peers_left")
            assert sum(after[c] for c in judged) == sum(before[c] for c in judged) + 1
            assert b_again in {p.uuid for p in b.peers}  # a forged b, listed
            return
        peer_a = next(p for p in b.peers if p.uuid == a.uuid)
        assert peer_a.endpoint == a.endpoint


async def test_a_node_refuses_uuids_no_listed_key_owns() -> None:
    """Through an nsd that does not check (the nodes' own rule): an announcement of a
    uuid that no listed key derives is refused by every identity node."""
    async with _mesh(2, nsd_identity=False) as (nsd, (_a, b), keys, nsd_pub):
        x_pub, x_sec = keys[2]
        ctx = zmq.asyncio.Context.instance()
        evil = ctx.socket(zmq.XPUB)
        evil.setsockopt(zmq.LINGER, 0)
        try:
            evil.setsockopt(zmq.CURVE_SERVERKEY, nsd_pub.encode())
            evil.setsockopt(zmq.CURVE_PUBLICKEY, x_pub.encode())
            evil.setsockopt(zmq.CURVE_SECRETKEY, x_sec.encode())
            evil.connect(nsd.xsub_endpoint)
            with anyio.fail_after(10):
                await evil.recv()
            stranger = "3669840e-d043-11ea-adc2-fcaa146e6b01"
            await evil.send(forged(NamingType.CONNECT, stranger, "tcp://127.0.0.1:9"))
            own = identity_uuid(x_pub)
            await evil.send(forged(NamingType.CONNECT, own, "tcp://127.0.0.1:9"))
            await b.wait_for_peer(own, timeout=10)
        finally:
            evil.close(linger=0)
        assert b.statistics().discovery["identity_refused"] == 1
        assert stranger not in {p.uuid for p in b.peers}


async def test_a_listed_key_cannot_publish_as_another_node() -> None:
    """Insider x (a listed key, a node of the mesh) sends a frame whose sequence header
    names a's publisher id: b refuses and counts it; x's own frames still arrive."""
    async with _mesh(3, extra_keys=0) as (_nsd, (a, b, x), _keys, _), b.subscribe("PX.>") as sub:
        for node in (a, x):
            await node.wait_for_interest("PX.a")
        await a.publish("PX.a", b"real")
        first = await sub.next(timeout=5)
        assert first.data == b"real" and first.publisher is not None
        pid = first.publisher
        body = encode_header(0x00, pid, 2) + b"forged"  # a's next number, a's id
        assert await x.publish_frames([encode_publish(b"PX.a", body)]) == 1
        await x.publish("PX.x", b"fence")  # x's own: same connection, after it
        got = await sub.next(timeout=5)
        assert (got.subject, got.data) == ("PX.x", b"fence")
        assert sub.statistics().pending == 0
        assert b.statistics().discovery["identity_refused_frames"] == 1
        await a.publish("PX.a", b"still a")  # a's own stream goes on, no loss
        got = await sub.next(timeout=5)
        assert (got.data, got.gap) == (b"still a", 0)


async def test_a_listed_key_cannot_send_heartbeats_as_another_node() -> None:
    """Insider x sends a publisher heartbeat naming a's publisher id and a number far
    ahead: b refuses it (else b would count a made-up lost tail of a's stream)."""
    async with _mesh(3, extra_keys=0) as (_nsd, (a, b, x), _keys, _), b.subscribe("HX.>") as sub:
        for node in (a, x):
            await node.wait_for_interest("HX.a")
        await a.publish("HX.a", b"real")
        first = await sub.next(timeout=5)
        assert first.publisher is not None
        (forged_beat,) = heartbeat.encode(first.publisher, [(b"HX.a", 1000)])
        assert await x.publish_frames([forged_beat]) == 1
        await x.publish("HX.x", b"fence")  # x's own: same connection, after it
        got = await sub.next(timeout=5)
        assert (got.subject, got.data) == ("HX.x", b"fence")
        stats = b.statistics()
        assert stats.discovery["identity_refused_frames"] == 1
        assert stats.lost_tails == 0 and sub.statistics().lost == 0
        await a.publish("HX.a", b"still a")  # a's own stream goes on, no loss
        got = await sub.next(timeout=5)
        assert (got.data, got.gap) == (b"still a", 0)


async def test_a_key_may_only_publish_permitted_subjects() -> None:
    """curve_permissions at the receiving node: x may publish ``OPEN.>`` only."""
    x_pub, x_sec = keypair()
    nsd_pub, nsd_sec = keypair()
    (b_pub, b_sec) = keypair()
    allow = [x_pub, b_pub]
    mesh: dict[str, Any] = {"curve_server_public": nsd_pub, "curve_allow": allow,
                            "naming_curve": True, "curve_identity": True, **FAST}
    perms = {x_pub: {"publish": ["OPEN.>"]}}
    async with (
        NamingDaemon(port=0, curve_server_secret=nsd_sec, curve_allow=allow,
                     identity=True) as nsd,
        aoz.connect(naming=[nsd.endpoint], curve_public=b_pub, curve_secret=b_sec,
                    curve_permissions=perms, **mesh) as b,
        aoz.connect(naming=[nsd.endpoint], curve_public=x_pub, curve_secret=x_sec,
                    **mesh) as x,
        b.subscribe(">") as sub,
    ):
        await x.wait_for_interest("SECRET.plans")
        await x.publish("SECRET.plans", b"nope")
        await x.publish("OPEN.news", b"yes")
        got = await sub.next(timeout=5)
        assert (got.subject, got.data) == ("OPEN.news", b"yes")
        assert b.statistics().discovery["permission_refused"] == 1


async def test_a_beacon_claiming_another_identity_never_gets_a_link() -> None:
    """UDP mode (no nsd to check): x broadcasts beacons with a new uuid of a's key and
    its own endpoint. b connects there with a's key, the handshake fails, nothing x
    publishes arrives, the claim is expired, and a is untouched."""
    port = free_udp_port()
    keys = [keypair() for _ in range(3)]
    allow = [pub for pub, _ in keys]
    udp: dict[str, Any] = {"mode": "udp", "udp_port": port, "curve_allow": allow,
                           "curve_identity": True, "expire_beacons": 2, **FAST}
    (a_pub, a_sec), (b_pub, b_sec), (_x_pub, x_sec) = keys
    async with (
        aoz.connect(curve_public=a_pub, curve_secret=a_sec, **udp) as a,
        aoz.connect(curve_public=b_pub, curve_secret=b_sec, **udp) as b,
    ):
        await b.wait_for_peer(a.uuid, timeout=10)
        ctx = zmq.asyncio.Context.instance()
        evil = ctx.socket(zmq.XPUB)  # x's publisher: a CURVE server with x's own key
        evil.setsockopt(zmq.LINGER, 0)
        udp_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            evil.setsockopt(zmq.CURVE_SERVER, 1)
            evil.setsockopt(zmq.CURVE_SECRETKEY, x_sec.encode())
            evil_port = evil.bind_to_random_port("tcp://127.0.0.1")
            claimed = identity_uuid(a_pub)
            frame = NamingFrame(NamingType.CONNECT, "mallory", socket.gethostname(), 666,
                                claimed, f"tcp://127.0.0.1:{evil_port}")
            datagram = encode_beacon(frame, uuidlib.UUID(claimed).bytes)
            udp_sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            udp_sock.sendto(datagram, ("127.255.255.255", port))
            await b.wait_for_peer(claimed, timeout=10)  # listed on its word, for now
            stats = b.statistics().discovery
            await eventually(lambda: b.statistics().discovery.get("handshake_failures", 0)
                             > stats.get("handshake_failures", 0), "b's handshake with x fails")
            await eventually(lambda: claimed not in {p.uuid for p in b.peers},
                             "the unproven claim expires")
        finally:
            evil.close(linger=0)
            udp_sock.close()
        peer_a = next(p for p in b.peers if p.uuid == a.uuid)
        assert peer_a.endpoint == a.endpoint


async def test_a_request_cannot_name_another_nodes_inbox() -> None:
    """A raw insider publisher (x's listed key, announced under x's own uuid) sends a
    request whose reply handle names a's inbox, so that a would get the replies: b
    refuses it; x's own publication after it arrives."""
    async with _mesh(2) as (nsd, (a, b), keys, nsd_pub):
        x_pub, x_sec = keys[2]
        ctx = zmq.asyncio.Context.instance()
        data = ctx.socket(zmq.XPUB)  # x's data publisher: a CURVE server with x's key
        naming = ctx.socket(zmq.XPUB)  # x's naming PUB, into the nsd
        for sock in (data, naming):
            sock.setsockopt(zmq.LINGER, 0)
        try:
            data.setsockopt(zmq.CURVE_SERVER, 1)
            data.setsockopt(zmq.CURVE_SECRETKEY, x_sec.encode())
            endpoint = f"tcp://127.0.0.1:{data.bind_to_random_port('tcp://127.0.0.1')}"
            naming.setsockopt(zmq.CURVE_SERVERKEY, nsd_pub.encode())
            naming.setsockopt(zmq.CURVE_PUBLICKEY, x_pub.encode())
            naming.setsockopt(zmq.CURVE_SECRETKEY, x_sec.encode())
            naming.connect(nsd.xsub_endpoint)
            with anyio.fail_after(10):
                await naming.recv()
            await naming.send(forged(NamingType.CONNECT, identity_uuid(x_pub), endpoint))
            async with b.subscribe("RQ.>") as sub:
                with anyio.fail_after(10):  # b connected with x's key: its filter arrives
                    while await data.recv() != b"\x01RQ.":
                        pass
                request = encode_request(b"RQ.work", make_handle(a.uuid, 1), b"\x00job")
                await data.send(request)
                await data.send(encode_publish(b"RQ.fence", b"\x00x"))
                got = await sub.next(timeout=5)
                assert got.subject == "RQ.fence" and got.reply is None
                assert sub.statistics().pending == 0
            assert b.statistics().discovery["identity_refused_frames"] == 1
        finally:
            data.close(linger=0)
            naming.close(linger=0)


def test_the_nsd_needs_keys_to_check_identities(capsys: pytest.CaptureFixture[str]) -> None:
    from aoz._discovery.nsd import main

    assert main(["--port", "0", "--curve-identity"]) == 1
    assert "needs a secured nsd" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="needs a secured nsd"):
        NamingDaemon(port=0, identity=True)


async def test_a_key_may_only_subscribe_permitted_subjects() -> None:
    """curve_permissions at the publishing node: x may subscribe ``OPEN.>`` only. Its
    filter for ``SECRET.plans`` reaches b's publisher with x's key and is not applied,
    so nothing on that subject reaches x; b's interest set never shows it."""
    x_pub, x_sec = keypair()
    nsd_pub, nsd_sec = keypair()
    (b_pub, b_sec) = keypair()
    allow = [x_pub, b_pub]
    mesh: dict[str, Any] = {"curve_server_public": nsd_pub, "curve_allow": allow,
                            "naming_curve": True, "curve_identity": True, **FAST}
    perms = {x_pub: {"subscribe": ["OPEN.>"]}}
    async with (
        NamingDaemon(port=0, curve_server_secret=nsd_sec, curve_allow=allow,
                     identity=True) as nsd,
        aoz.connect(naming=[nsd.endpoint], curve_public=b_pub, curve_secret=b_sec,
                    curve_permissions=perms, **mesh) as b,
        aoz.connect(naming=[nsd.endpoint], curve_public=x_pub, curve_secret=x_sec,
                    **mesh) as x,
        x.subscribe("SECRET.plans") as secret,
        x.subscribe("OPEN.news") as news,
    ):
        await b.wait_for_interest("OPEN.news")
        await eventually(
            lambda: b.statistics().discovery.get("permission_refused_subscriptions", 0) >= 1,
            "b refuses x's filter for SECRET.plans")
        assert not b.has_interest("SECRET.plans")
        await b.publish("SECRET.plans", b"nope")
        await b.publish("OPEN.news", b"yes")
        got = await news.next(timeout=5)
        assert (got.subject, got.data) == ("OPEN.news", b"yes")
        assert secret.statistics().pending == 0
        async with b.subscribe("SECRET.plans") as own:  # b's own (unrestricted) key may
            await b.wait_for_interest("SECRET.plans")
            await b.publish("SECRET.plans", b"mine")
            assert (await own.next(timeout=5)).data == b"mine"
            await b.publish("OPEN.news", b"fence")
            assert (await news.next(timeout=5)).data == b"fence"
            assert secret.statistics().pending == 0
