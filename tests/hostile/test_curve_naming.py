"""The authenticated naming plane (issue #11): CURVE on the nsd and the nodes' naming
sockets, with the data plane's key model (``curve_allow``)."""

from __future__ import annotations

import os
import stat
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

import aoz
import aoz.cli
from aoz._discovery.nsd import NamingDaemon
from aoz._mesh.sockopts import HANDSHAKE_FAILED
from aoz._protocol.naming import NamingType
from aoz.errors import ConfigError
from aoz.security import keypair, public_key, read_key, write_keypair

from .helpers import forged, naming_attacker, new_uuid

FAST: dict[str, Any] = {"beacon_interval": 0.5, "connect_interval": 0.05, "connect_retries": 200}


async def _refused(mon: zmq.asyncio.Socket) -> int:
    """Wait for the attacker's own handshake to be refused; return the event."""
    with anyio.fail_after(10):
        while True:
            ev = await recv_monitor_message(mon)
            if ev["event"] in HANDSHAKE_FAILED:
                return int(ev["event"])


async def test_unlisted_keys_cannot_announce_leave_or_welcome() -> None:
    server_public, server_secret = keypair()
    (a_pub, a_sec), (b_pub, b_sec), (x_pub, x_sec) = keypair(), keypair(), keypair()
    allow = [a_pub, b_pub]
    mesh = {
        "curve_server_public": server_public,
        "curve_server_secret": server_secret,
        "curve_allow": allow,
        "naming_curve": True,
        **FAST,
    }
    async with (
        NamingDaemon(port=0, curve_server_secret=server_secret, curve_allow=allow) as nsd,
        AsyncExitStack() as stack,
    ):
        assert nsd.curve_server_public == server_public
        a = await stack.enter_async_context(
            aoz.connect(naming=[nsd.endpoint], curve_public=a_pub, curve_secret=a_sec, **mesh)
        )
        b = await stack.enter_async_context(
            aoz.connect(naming=[nsd.endpoint], curve_public=b_pub, curve_secret=b_sec, **mesh)
        )
        await b.wait_for_peer(a.uuid)
        await a.wait_for_peer(b.uuid)
        before = dict(b.statistics().discovery)

        monitors: list[zmq.asyncio.Socket] = []

        def unlisted(sock: zmq.Socket[bytes]) -> None:  # right server key, unlisted client
            sock.setsockopt(zmq.CURVE_SERVERKEY, server_public.encode())
            sock.setsockopt(zmq.CURVE_PUBLICKEY, x_pub.encode())
            sock.setsockopt(zmq.CURVE_SECRETKEY, x_sec.encode())
            plaintext(sock)

        def plaintext(sock: zmq.Socket[bytes]) -> None:  # an OZ-style, unsecured client
            # watch before connecting: a refused key is not retried, one event only
            monitors.append(cast(zmq.asyncio.Socket, sock.get_monitor_socket()))

        for setup in (unlisted, plaintext):
            async with naming_attacker(nsd.xsub_endpoint, setup=setup) as evil:
                for frame in (
                    forged(NamingType.CONNECT, new_uuid(), a.endpoint),  # impostor
                    forged(NamingType.CONNECT, new_uuid(), "tcp://127.0.0.1:9"),  # fake peer
                    forged(NamingType.DISCONNECT, a.uuid, a.endpoint),  # forged goodbye
                    forged(NamingType.WELCOME, "", "tcp://127.0.0.1:9"),  # forged welcome
                ):
                    await evil.send(frame)
                mon = monitors.pop()
                try:
                    await _refused(mon)
                finally:
                    evil.disable_monitor()
                    mon.close(linger=0)
        assert nsd.refused >= 1  # the unlisted key reached the nsd's ZAP and was refused
        # frames queued on a connection whose handshake was refused are never delivered
        assert {p.uuid for p in b.peers} == {a.uuid, b.uuid}
        after = b.statistics().discovery
        for counter in (
            "naming_conflicts",
            "goodbyes_deferred",
            "welcomes_refused",
            "peers_left",
            "peers_expired",
            "naming_malformed",
        ):
            assert after[counter] == before[counter], counter
        assert after["peers_joined"] == before["peers_joined"]
        async with b.subscribe("SECURE.x") as sub:  # and the data plane still works
            await a.wait_for_interest("SECURE.x")
            await a.publish("SECURE.x", b"ok")
            assert (await sub.next(timeout=5)).data == b"ok"


async def test_a_node_with_an_unlisted_key_cannot_join_a_secured_nsd() -> None:
    server_public, server_secret = keypair()
    (a_pub, _), (x_pub, x_sec) = keypair(), keypair()
    async with NamingDaemon(port=0, curve_server_secret=server_secret, curve_allow=[a_pub]) as nsd:
        with pytest.raises(aoz.NamingTimeout):
            async with aoz.connect(
                naming=[nsd.endpoint],
                curve_server_public=server_public,
                curve_server_secret=server_secret,
                curve_public=x_pub,
                curve_secret=x_sec,
                naming_curve=True,
                connect_interval=0.05,
                connect_retries=20,
            ):
                pass
        assert nsd.refused >= 1


def test_naming_curve_needs_keys() -> None:
    with pytest.raises(ConfigError, match="naming_curve"):
        aoz.Settings(naming_curve=True)
    with pytest.raises(ConfigError, match="curve_allow"):
        NamingDaemon(port=0, curve_server_secret=keypair()[1])


def test_keygen_writes_0600_files_and_never_prints_the_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = tmp_path / "mesh"
    assert aoz.cli.main(["keygen", str(prefix)]) == 0
    out, err = capsys.readouterr()
    secret_path, public_path = Path(f"{prefix}.key"), Path(f"{prefix}.pub")
    for path in (secret_path, public_path):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    secret, public = read_key(secret_path), read_key(public_path)
    assert public_key(secret) == public
    assert out.strip() == public
    assert secret not in out + err
    # never overwritten by accident
    assert aoz.cli.main(["keygen", str(prefix)]) == 1
    assert read_key(secret_path) == secret
    _, _, again = write_keypair(prefix, force=True)
    assert read_key(public_path) == again != public


def test_nsd_command_line_takes_the_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from aoz._discovery.nsd import main as nsd_main

    write_keypair(tmp_path / "mesh")
    (tmp_path / "allow.txt").write_text("# nodes\nnot a key\n")
    argv = ["--port", "0", "--curve-secret-file", str(tmp_path / "mesh.key")]
    # a malformed key list is refused before anything starts, without echoing it
    assert nsd_main([*argv, "--curve-allow-file", str(tmp_path / "allow.txt")]) == 1
    assert "line 2 of" in capsys.readouterr().err
    # KEY=form: a Z85 key may start with "-", which a separate argument would not survive
    assert nsd_main(["--port", "0", f"--curve-allow={keypair()[0]}"]) == 1
    assert "--curve-secret-file" in capsys.readouterr().err
