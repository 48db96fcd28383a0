"""An HTTP + WebSocket front end to an aoz mesh.

    AOZ_NAMING=tcp://127.0.0.1:5756 uvicorn examples.fastapi_app:app --port 8000

    curl localhost:8000/quote/IBM                  # -> request on SVC.quote, the reply as JSON
    websocat ws://localhost:8000/ws/md             # every message under MD.> as JSON frames

The node's settings come from AOZ_* environment variables (AOZ_NAMING, AOZ_CONFIG...).
A responder for /quote, in another shell: aoz reply SVC.quote '{"bid": 1.0}' --codec json
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, WebSocket

import aoz
from aoz.fastapi import NodeDep, lifespan, relay

app = FastAPI(title="aoz example", lifespan=lifespan(program="fastapi-example"))


@app.get("/quote/{symbol}")
async def quote(symbol: str, node: NodeDep, timeout: float = 1.0) -> Any:
    """Ask the SVC.quote service for ``symbol`` and return its (decoded) reply."""
    try:
        # A service that has just started may not have reached this node yet.
        if not node.has_interest("SVC.quote"):
            await node.wait_for_interest("SVC.quote", timeout=timeout)
        reply = await node.request("SVC.quote", {"symbol": symbol}, timeout=timeout)
    except (aoz.NoResponders, aoz.WaitTimeout):
        raise HTTPException(503, "no quote service is running") from None
    except aoz.RequestTimeout:
        raise HTTPException(504, f"the quote service did not answer within {timeout} s") from None
    return reply.decode()


@app.websocket("/ws/md")
async def market_data(websocket: WebSocket, node: NodeDep) -> None:
    """Every message under ``MD.>`` as one JSON text frame each."""
    await relay(websocket, node, "MD.>")
