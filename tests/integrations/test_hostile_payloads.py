"""Hostile payloads against the consumers of decoded data (issue #11): the CLI's
``sub`` / ``sub --json`` / ``reply --echo`` and the FastAPI relay keep going and show
what they cannot decode as bytes."""

from __future__ import annotations

import asyncio
import base64
import json
import threading

import msgspec
import pytest
from fastapi import FastAPI, WebSocket
from fastapi.testclient import TestClient

import aoz
import aoz.cli
from aoz.fastapi import NodeDep, lifespan, relay

from .conftest import STEP
from .test_cli import Cli

DEEP_MSGPACK = b"\x91" * 1000 + b"\xc0"  # [[[...[nil]...]]], 1,000 deep
DEEP_JSON = b"[" * 1000 + b"]" * 1000
EXT = b"\xd4\x05\x01"  # a msgpack extension type: no JSON for it


async def publish_hostile(node: aoz.Node, subject: str) -> None:
    await node.publish(subject, "before")
    # msgspec.Raw: the bytes go out as the body, as a hostile peer would send them
    await node.publish(subject, msgspec.Raw(DEEP_MSGPACK), codec=aoz.Codec.MSGPACK)
    await node.publish(subject, msgspec.Raw(DEEP_JSON), codec=aoz.Codec.JSON)
    await node.publish(subject, msgspec.Raw(EXT), codec=aoz.Codec.MSGPACK)
    await node.publish(subject, "after")


@pytest.mark.parametrize("json_output", [False, True])
async def test_sub_survives_deeply_nested_and_unjsonable_payloads(
    aoz_cli: Cli, aoz_node: aoz.Node, json_output: bool
) -> None:
    args = ["sub", "HOSTILE.x", "--count", "5", *(["--json"] if json_output else [])]
    sub = await aoz_cli(*args)
    await sub.wait_stderr("Listening on")
    await aoz_node.wait_for_interest("HOSTILE.x", timeout=STEP)
    await publish_hostile(aoz_node, "HOSTILE.x")
    rc, out, err = await sub.finish()
    assert rc == 0, err
    assert "Traceback" not in err
    assert "3 payload(s) could not be decoded" in err
    if json_output:
        rows = [json.loads(line) for line in out.splitlines()]
        assert [r["data"] for r in (rows[0], rows[-1])] == ["before", "after"]
        deep = rows[1]
        raw = base64.b64decode(deep["data"]) if "encoding" in deep else deep["data"].encode()
        assert raw == DEEP_MSGPACK
    else:
        blocks = out.split("\n\n")
        assert blocks[0].endswith("before") and blocks[4].endswith("after")


async def test_reply_echo_survives_a_deeply_nested_request(
    aoz_cli: Cli, aoz_node: aoz.Node
) -> None:
    rep = await aoz_cli("reply", "HOSTILE.echo", "--echo", "--count", "2")
    await rep.wait_stderr("Listening on")
    await aoz_node.wait_for_interest("HOSTILE.echo", timeout=STEP)
    reply = await aoz_node.request(
        "HOSTILE.echo", msgspec.Raw(DEEP_JSON), codec=aoz.Codec.JSON, timeout=STEP
    )
    assert reply.codec is aoz.Codec.RAW and reply.data == DEEP_JSON  # echoed as bytes
    reply = await aoz_node.request("HOSTILE.echo", {"ok": 1}, timeout=STEP)
    assert reply.decode() == {"ok": 1}
    rc, _, err = await rep.finish()
    assert rc == 0 and "Traceback" not in err, err


async def test_fastapi_relay_survives_hostile_payloads(
    aoz_node: aoz.Node, aoz_nsd: aoz.NamingDaemon
) -> None:
    app = FastAPI(lifespan=lifespan(naming=[aoz_nsd.endpoint]))

    @app.websocket("/ws")
    async def ws(websocket: WebSocket, node: NodeDep) -> None:
        await relay(websocket, node, "HOSTILE.ws")

    connected = threading.Event()

    def client_side() -> list[dict[str, object]]:
        # TestClient runs the app (and its node) on a loop of its own, in this thread
        with TestClient(app) as client, client.websocket_connect("/ws") as conn:
            connected.set()
            return [json.loads(conn.receive_text()) for _ in range(5)]

    task = asyncio.get_running_loop().run_in_executor(None, client_side)
    await asyncio.to_thread(connected.wait, STEP)
    await aoz_node.wait_for_interest("HOSTILE.ws", timeout=STEP)
    await publish_hostile(aoz_node, "HOSTILE.ws")
    frames = await asyncio.wait_for(task, STEP)
    assert [f["data"] for f in (frames[0], frames[4])] == ["before", "after"]
    assert all(f["subject"] == "HOSTILE.ws" for f in frames)
    assert base64.b64decode(str(frames[1]["data"])) == DEEP_MSGPACK
