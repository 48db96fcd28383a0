"""CURVE encryption and key-based authentication on the data plane."""

from __future__ import annotations

import asyncio

import pytest
import zmq
import zmq.asyncio

import aoz
from aoz._mesh.security import keypair, zap_reply

pytestmark = pytest.mark.timeout(30)


def test_zap_reply_is_pure_and_strict() -> None:
    public, _ = keypair()
    raw_key = zmq.utils.z85.decode(public)
    ok, allowed = zap_reply([b"1.0", b"7", b"aoz", b"127.0.0.1", b"", b"CURVE", raw_key], {public})
    assert allowed and ok[:3] == [b"1.0", b"7", b"200"]
    other, _ = keypair()
    no, allowed = zap_reply([b"1.0", b"8", b"aoz", b"", b"", b"CURVE", raw_key], {other})
    assert not allowed and no[2] == b"400"
    assert zap_reply([b"1.0", b"9", b"aoz", b"", b"", b"NULL"], {public})[0][2] == b"400"
    assert zap_reply([b"garbage"], {public})[0][2] == b"500"


async def test_allowed_subscriber_gets_data_others_get_nothing() -> None:
    server_public, server_secret = keypair()
    alice_public, alice_secret = keypair()
    bob_public, bob_secret = keypair()
    mesh = {"curve_server_public": server_public, "curve_server_secret": server_secret}
    async with aoz.connect(
        bind=["tcp://127.0.0.1:*"], curve_public=alice_public, curve_secret=alice_secret,
        curve_allow=[bob_public], **mesh,
    ) as alice:
        intruder_public, intruder_secret = keypair()  # knows the mesh key, not on the list
        raw = zmq.asyncio.Context.instance().socket(zmq.SUB)  # no CURVE at all
        raw.setsockopt(zmq.SUBSCRIBE, b"")
        raw.connect(alice.endpoint)
        try:
            async with (
                aoz.connect(connect=[alice.endpoint], bind=["tcp://127.0.0.1:*"],
                            curve_public=bob_public, curve_secret=bob_secret, **mesh) as bob,
                aoz.connect(connect=[alice.endpoint], bind=["tcp://127.0.0.1:*"],
                            curve_public=intruder_public, curve_secret=intruder_secret,
                            **mesh) as intruder,
                bob.subscribe("secret.>") as bob_sub,
                intruder.subscribe("secret.>") as intruder_sub,
            ):
                await alice.wait_for_interest("secret.x")  # bob's subscription arrived
                # The intruder's handshake is refused by the ZAP handler; no event is
                # exposed for that, so poll the counter (bounded: 250 x 20 ms).
                for _ in range(250):
                    if alice.statistics().discovery.get("auth_denied", 0) >= 1:
                        break
                    await asyncio.sleep(0.02)
                assert alice.statistics().discovery.get("auth_denied", 0) >= 1
                await alice.publish("secret.plan", b"attack at dawn")
                msg = await bob_sub.next(timeout=5)
                assert msg.data == b"attack at dawn"
                # the frame reached bob; an encrypted-but-refused or plain socket got none
                assert intruder_sub.pending == 0
                assert await raw.poll(200) == 0
        finally:
            raw.close(linger=0)


def test_curve_settings_are_checked() -> None:
    public, secret = keypair()
    with pytest.raises(aoz.ConfigError, match="mesh keypair"):
        aoz.connect(bind=["tcp://127.0.0.1:*"], curve_public=public, curve_secret=secret)
    with pytest.raises(aoz.ConfigError, match="40-character"):
        aoz.connect(bind=["tcp://127.0.0.1:*"], curve_server_public="short",
                    curve_server_secret=secret)
