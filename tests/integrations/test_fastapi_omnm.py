"""The FastAPI relay renders OpenMAMA omnm payloads as JSON fields."""

from __future__ import annotations

import asyncio
import json

from websockets.asyncio.client import connect as ws_connect

from aoz import omnm
from aoz.omnm import FieldType, Price
from aoz.pytest_plugin import NodeFactory

from .conftest import STEP
from .test_fastapi import app_url  # noqa: F401  (the uvicorn-served example app)


async def test_websocket_relays_omnm_as_json_fields(
    app_url: str,  # noqa: F811
    aoz_node_factory: NodeFactory,
) -> None:
    quote = omnm.Message([
        omnm.Field("wIssueSymbol", 305, FieldType.STRING, "IBM"),
        omnm.Field("wBidPrice", 237, FieldType.PRICE, Price(141.5, 2)),
        omnm.Field("wBidSize", 238, FieldType.U32, 300),
        omnm.Field("wNaN", 239, FieldType.F64, float("nan")),
    ])
    feed = await aoz_node_factory(program="oz-feed")
    async with ws_connect(f"ws://{app_url}/ws/md", open_timeout=STEP) as ws:
        await feed.wait_for_interest("MD.NYSE.IBM", timeout=STEP)
        await feed.publish("MD.NYSE.IBM", quote)
        frame = json.loads(await asyncio.wait_for(ws.recv(), STEP))
    assert (frame["subject"], frame["codec"]) == ("MD.NYSE.IBM", "omnm")
    assert frame["data"] == [
        {"name": "wIssueSymbol", "fid": 305, "type": "STRING", "value": "IBM"},
        {"name": "wBidPrice", "fid": 237, "type": "PRICE",
         "value": {"value": 141.5, "hints": 2, "precision": 2}},
        {"name": "wBidSize", "fid": 238, "type": "U32", "value": 300},
        {"name": "wNaN", "fid": 239, "type": "F64", "value": "NaN"},
    ]
