"""Named services (disc_zmq), settings sources, and brokered mode."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

import aoz
from aoz.config import load_settings

pytestmark = pytest.mark.timeout(30)


class Sum(msgspec.Struct):
    total: int


async def test_service_advertise_wait_call(static_pair: tuple[aoz.Node, aoz.Node]) -> None:
    a, b = static_pair

    async def add(req: aoz.Message) -> dict[str, int]:
        x, y = req.decode()
        if y < 0:
            raise ValueError("negative numbers are not allowed")
        return {"total": x + y}

    with pytest.raises(aoz.WaitTimeout):
        await aoz.wait_for_service(a, "SVC.add", timeout=0.2)
    with pytest.raises(aoz.NoResponders):
        await aoz.call(a, "SVC.add", [1, 2])
    async with aoz.serve(b, "SVC.add", add) as svc:
        await aoz.wait_for_service(a, "SVC.add", timeout=5)
        assert await aoz.call(a, "SVC.add", [1, 2], timeout=5) == {"total": 3}
        assert await aoz.call(a, "SVC.add", [2, 2], timeout=5, type=Sum) == Sum(4)
        with pytest.raises(aoz.ServiceError, match="negative"):
            await aoz.call(a, "SVC.add", [1, -1], timeout=5)
        await a.publish("SVC.add", b"a publication is not a call")  # ignored by the service
        assert await aoz.call(a, "SVC.add", [5, 5], timeout=5) == {"total": 10}
    assert (svc.handled, svc.failed) == (3, 1)


def test_settings_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "aoz.toml"
    cfg.write_text('naming = ["tcp://10.0.0.1:5756"]\nbeacon_interval = 2.0\nqueue_size = 10\n')
    env = {"AOZ_BEACON_INTERVAL": "0.5", "AOZ_NAMING": "tcp://h1:1,tcp://h2:2"}
    s = load_settings({"queue_size": 99}, config=cfg, environ=env)
    assert s.mode == "naming"
    assert s.naming == ["tcp://h1:1", "tcp://h2:2"]  # environment beats the file
    assert s.beacon_interval == 0.5
    assert s.queue_size == 99  # keywords beat everything
    static = load_settings({"bind": "tcp://127.0.0.1:*"}, environ={})
    assert static.mode == "static" and static.bind == ["tcp://127.0.0.1:*"]
    oz = aoz.Settings.oz_defaults()
    assert (oz.reconnect_interval, oz.heartbeat_interval) == (10.0, 10.0)


def test_bad_settings_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(aoz.ConfigError, match="unknown setting"):
        load_settings({"nmaing": ["x"]}, environ={})
    with pytest.raises(aoz.ConfigError, match="tcp://"):
        load_settings({"naming": ["udp://x:1"]}, environ={})
    with pytest.raises(aoz.ConfigError, match="beacon_interval"):
        load_settings({}, environ={"AOZ_BEACON_INTERVAL": "-1"})
    with pytest.raises(aoz.ConfigError, match="invalid setting"):
        load_settings({}, environ={"AOZ_QUEUE_SIZE": "lots"})
    bad = tmp_path / "bad.toml"
    bad.write_text("naming = [")
    with pytest.raises(aoz.ConfigError, match="not valid"):
        load_settings(config=bad, environ={})
    with pytest.raises(aoz.ConfigError, match="cannot read"):
        load_settings(config=tmp_path / "missing.toml", environ={})


async def test_brokered_mode_through_a_forwarder() -> None:
    async with aoz.Broker(host="127.0.0.1") as broker:
        opts = {"broker_pub": broker.pub_endpoint, "broker_sub": broker.sub_endpoint}
        async with aoz.connect(**opts) as a, aoz.connect(**opts) as b:
            async with b.subscribe("via.broker") as sub:
                await a.wait_for_interest("via.broker")
                await a.publish("via.broker", b"two hops")
                msg = await sub.next(timeout=5)
            assert msg.data == b"two hops"
            async with b.subscribe("svc.b") as reqs:
                await a.wait_for_interest("svc.b")
                task = asyncio.ensure_future(a.request("svc.b", b"?", timeout=5))
                req = await reqs.next(timeout=5)
                await req.respond(b"!")
                assert (await task).data == b"!"


def test_a_bad_environment_variable_is_named() -> None:
    """Issue #25 item 7: the error named the setting, not where it came from."""
    with pytest.raises(aoz.ConfigError, match="environment variable AOZ_BEACON_INTERVAL"):
        load_settings(environ={"AOZ_BEACON_INTERVAL": "soon"})
    with pytest.raises(aoz.ConfigError, match="environment variable AOZ_LINGER"):
        load_settings(environ={"AOZ_LINGER": "-1"})
    with pytest.raises(aoz.ConfigError, match="keyword linger="):
        load_settings({"linger": -1}, environ={})


async def test_curve_keys_from_keygen_files(tmp_path: Path) -> None:
    """The curve_*_file settings read `aoz keygen`'s files: two nodes of a mesh whose
    keys all come from files talk, and the settings hold the keys the files do."""
    from aoz._mesh.security import read_key, write_keypair

    _, _, mesh_public = write_keypair(tmp_path / "mesh")
    _, _, a_public = write_keypair(tmp_path / "a")
    _, _, b_public = write_keypair(tmp_path / "b")
    (tmp_path / "nodes.txt").write_text(f"{a_public}\n{b_public}\n")
    files = {"curve_server_secret_file": str(tmp_path / "mesh.key"),
             "curve_allow_file": str(tmp_path / "nodes.txt")}
    sa = load_settings({**files, "curve_secret_file": str(tmp_path / "a.key")},
                       environ={})
    assert (sa.curve_server_public, sa.curve_public) == (mesh_public, a_public)
    assert sa.curve_secret == read_key(tmp_path / "a.key")
    assert sa.curve_allow == [a_public, b_public]
    sb = load_settings(environ={"AOZ_CURVE_SERVER_SECRET_FILE": files["curve_server_secret_file"],
                                "AOZ_CURVE_SECRET_FILE": str(tmp_path / "b.key")})
    assert sb.curve_public == b_public
    a = aoz.connect(bind=["tcp://127.0.0.1:*"], **files,
                    curve_secret_file=str(tmp_path / "a.key"))
    async with a:
        b = aoz.connect(bind=["tcp://127.0.0.1:*"], connect=[a.endpoint],
                        curve_server_secret_file=files["curve_server_secret_file"],
                        curve_secret_file=str(tmp_path / "b.key"))
        async with b, b.subscribe("K") as sub:
            await a.wait_for_interest("K", timeout=10)
            await a.publish("K", b"keyed")
            assert (await sub.next(timeout=5)).data == b"keyed"
