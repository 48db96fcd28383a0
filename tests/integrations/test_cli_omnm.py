"""The ``aoz`` console script with OpenMAMA omnm payloads (real processes, real nsd)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import aoz
from aoz import omnm
from aoz.omnm import FieldType

from .conftest import STEP, Proc

Cli = Callable[..., Awaitable[Proc]]

QUOTE = omnm.Message([
    omnm.Field("wIssueSymbol", 305, FieldType.STRING, "IBM"),
    omnm.Field("wBidPrice", 237, FieldType.F64, 135.25),
    omnm.Field("wBidSize", 238, FieldType.U32, 300),
    omnm.Field("book", 400, FieldType.MSG, omnm.Message({"level": 1})),
])


async def test_sub_prints_omnm_fields_by_name_and_type(aoz_cli: Cli, aoz_node: aoz.Node) -> None:
    sub = await aoz_cli("sub", "OM.*", "--count", "1")
    await sub.wait_stderr("Listening on")
    await aoz_node.wait_for_interest("OM.IBM", timeout=STEP)
    await aoz_node.publish("OM.IBM", QUOTE)
    rc, out, err = await sub.finish()
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == '[#1] Received on "OM.IBM"'
    assert lines[1:7] == [
        "wIssueSymbol         |   305 | STRING        | IBM",
        "wBidPrice            |   237 | F64           | 135.25",
        "wBidSize             |   238 | U32           | 300",
        "book                 |   400 | MSG           | {",
        "    level                |     0 | U8            | 1",
        "}",
    ]


async def test_sub_json_gives_typed_fields(aoz_cli: Cli, aoz_node: aoz.Node) -> None:
    sub = await aoz_cli("sub", "OMJ.x", "--json", "--count", "1")
    await sub.wait_stderr("Listening on")
    await aoz_node.wait_for_interest("OMJ.x", timeout=STEP)
    await aoz_node.publish("OMJ.x", QUOTE)
    rc, out, err = await sub.finish()
    assert rc == 0, err
    shown = json.loads(out)
    assert shown["codec"] == "omnm"
    assert shown["data"] == omnm.to_json(QUOTE)
    assert omnm.from_json(shown["data"]) == QUOTE  # the JSON form is lossless


async def test_pub_sends_omnm_from_json_with_type_hints(aoz_cli: Cli, aoz_node: aoz.Node) -> None:
    async with aoz_node.subscribe("OMP.x") as sub:
        pub = await aoz_cli(
            "pub", "OMP.x", '{"sym": "IBM", "qty:U32": 300, "px": 1.5, "n": {{Count}}}',
            "--codec", "omnm", "--wait", str(STEP),
        )
        rc, _, err = await pub.finish()
        assert rc == 0, err
        msg = await sub.next(timeout=STEP)
    assert msg.codec is aoz.Codec.OMNM
    got = msg.decode()
    assert [(f.name, f.type, f.value) for f in got] == [
        ("sym", FieldType.STRING, "IBM"), ("qty", FieldType.U32, 300),
        ("px", FieldType.F64, 1.5), ("n", FieldType.U8, 1),
    ]


async def test_req_and_echo_reply_with_omnm(aoz_cli: Cli, aoz_node: aoz.Node) -> None:
    # an aoz requester to `aoz reply --echo`: the omnm payload comes back byte for byte
    rep = await aoz_cli("reply", "SVC.omecho", "--echo", "--count", "1")
    await rep.wait_stderr("Listening on")
    await aoz_node.wait_for_interest("SVC.omecho", timeout=STEP)
    reply = await aoz_node.request("SVC.omecho", QUOTE, timeout=STEP)
    assert reply.payload == omnm.encode(QUOTE)
    rc, _, err = await rep.finish()
    assert rc == 0, err

    # `aoz req --codec omnm` with a FIELD list, answered with omnm, printed as fields
    async def answer() -> omnm.Message:
        async with aoz_node.subscribe("SVC.omq") as requests:
            ready.set()
            req = await requests.next(timeout=STEP)
            await req.respond(omnm.Message({"echo": req.decode()["q"]}))
            return req.decode()  # type: ignore[no-any-return]

    ready = asyncio.Event()
    task = asyncio.create_task(answer())
    await ready.wait()
    req = await aoz_cli(
        "req", "SVC.omq", '[{"name": "q", "fid": 7, "type": "STRING", "value": "ping"}]',
        "--codec", "omnm", "--timeout", str(STEP),
    )
    rc, out, err = await req.finish()
    assert rc == 0, err
    assert out.splitlines() == ["echo                 |     0 | STRING        | ping"]
    asked = await task
    assert asked.fields == [omnm.Field("q", 7, FieldType.STRING, "ping")]
