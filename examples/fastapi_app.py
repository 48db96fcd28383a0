"""An HTTP + WebSocket front end to an aoz mesh.

    AOZ_NAMING=tcp://127.0.0.1:5756 uvicorn examples.fastapi_app:app --port 8000

    curl localhost:8000/quote/IBM                  # -> request on SVC.quote, the reply as JSON
    websocat ws://localhost:8000/ws/md             # every message under MD.> as JSON frames

The node's settings come from AOZ_* environment variables (AOZ_NAMING, AOZ_CONFIG...).
A responder for /quote, in another shell: aoz reply SVC.quote '{"bid": 1.0}' --codec json
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, WebSocket

import aoz
from aoz.fastapi import EXCEPTION_HANDLERS, NodeDep, asyncapi_route, lifespan, relay

# EXCEPTION_HANDLERS: no quote service -> 503, a service that does not answer -> 504,
# a service whose handler failed -> 502 (its error is logged, not sent to the client)
app = FastAPI(
    title="aoz example",
    lifespan=lifespan(program="fastapi-example"),
    exception_handlers=EXCEPTION_HANDLERS,
)
asyncapi_route(app)  # GET /asyncapi.json: the node's services and publications

@app.get("/quote/{symbol}")
async def quote(symbol: str, node: NodeDep, timeout: float = 1.0) -> Any:
    """Ask the SVC.quote service for ``symbol`` and return its (decoded) reply."""
    # A service that has just started may not have reached this node yet.
    await aoz.wait_for_service(node, "SVC.quote", timeout=timeout)
    reply = await node.request("SVC.quote", {"symbol": symbol}, timeout=timeout)
    return reply.decode()


@app.websocket("/ws/md")
async def market_data(websocket: WebSocket, node: NodeDep) -> None:
    """Every message under ``MD.>`` as one JSON text frame each."""
    await relay(websocket, node, "MD.>")
