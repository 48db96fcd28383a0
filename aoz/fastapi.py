"""FastAPI integration (needs the ``aoz[fastapi]`` extra): a lifespan, a dependency, a relay.

The node starts with the app and closes with it, through FastAPI's own lifespan
mechanism; handlers reach it through the lifespan state with the ``NodeDep``
dependency; :func:`relay` streams a subscription to a WebSocket::

    from fastapi import FastAPI, WebSocket
    from aoz.fastapi import NodeDep, lifespan, relay

    app = FastAPI(lifespan=lifespan())          # settings from AOZ_* env vars / keywords

    @app.get("/quote/{symbol}")
    async def quote(symbol: str, node: NodeDep):
        reply = await node.request("SVC.quote", {"symbol": symbol}, timeout=1.0)
        return reply.decode()

    @app.websocket("/ws/md")
    async def market_data(websocket: WebSocket, node: NodeDep):
        await relay(websocket, node, "MD.>")

An application with a lifespan of its own passes it in: ``lifespan(my_lifespan)``; its
state is merged with aoz's, and it runs while the node is open.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any, Literal

import anyio
import msgspec
from fastapi import Depends, FastAPI
from starlette.requests import HTTPConnection
from starlette.websockets import (
    WebSocket,
    WebSocketDisconnect,
    WebSocketDisconnected,
    WebSocketState,
)

from .config import Overflow
from .errors import AozError
from .message import Message
from .node import Node, connect
from .render import message_text, message_to_dict

__all__ = ["STATE_KEY", "NodeDep", "get_node", "lifespan", "message_to_dict", "relay"]

#: the lifespan-state key the node is stored under (``request.state.aoz_node``)
STATE_KEY = "aoz_node"

AppLifespan = Callable[[FastAPI], AbstractAsyncContextManager[Mapping[str, Any] | None]]


def lifespan(
    app_lifespan: AppLifespan | None = None,
    *,
    config: str | None = None,
    **settings: Any,
) -> Callable[[FastAPI], AbstractAsyncContextManager[dict[str, Any]]]:
    """A FastAPI lifespan that opens an aoz node at startup and closes it at shutdown.

    ``settings`` are :class:`aoz.Settings` fields (as for :func:`aoz.connect`); the
    ``AOZ_*`` environment variables and ``config`` (a TOML/JSON file) apply as usual.
    ``app_lifespan``, the application's own lifespan, runs inside, with the node open.

    >>> app = FastAPI(lifespan=lifespan(naming=["tcp://127.0.0.1:5756"]))  # doctest: +SKIP
    """

    @asynccontextmanager
    async def _lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        async with connect(config=config, **settings) as node:
            state: dict[str, Any] = {STATE_KEY: node}
            if app_lifespan is None:
                yield state
                return
            async with app_lifespan(app) as inner:
                if inner:
                    state.update(inner)
                yield state

    return _lifespan


def get_node(connection: HTTPConnection) -> Node:
    """The app's node (FastAPI dependency for HTTP and WebSocket handlers)."""
    node = getattr(connection.state, STATE_KEY, None)
    if not isinstance(node, Node):
        raise AozError(
            "no aoz node in the app's lifespan state: create the app with "
            "FastAPI(lifespan=aoz.fastapi.lifespan())"
        )
    return node


#: ``node: NodeDep`` in a handler's signature gives it the app's node
NodeDep = Annotated[Node, Depends(get_node)]


def _json_frame(msg: Message) -> str:
    return msgspec.json.encode(message_to_dict(msg)).decode()


_GONE = (WebSocketDisconnect, WebSocketDisconnected, OSError)


async def relay(
    websocket: WebSocket,
    node: Node,
    pattern: str,
    *,
    frames: Literal["json", "text"] = "json",
    queue_size: int = 1024,
    overflow: Overflow = "drop_oldest",
) -> None:
    """Stream every message matching ``pattern`` to ``websocket`` until either side ends.

    ``frames="json"`` sends one JSON object per message (:func:`message_to_dict`);
    ``frames="text"`` sends the payload alone as text. The WebSocket is accepted if the
    handler has not done so. Returns when the client disconnects (the subscription is
    removed) or when the node closes (the WebSocket is closed with code 1001). A slow
    client does not hold the node back: its queue keeps the newest ``queue_size``
    messages by default (``overflow="drop_oldest"``) and counts what it drops.
    """
    if websocket.application_state == WebSocketState.CONNECTING:
        await websocket.accept()
    node_ended = False
    sub = node.subscribe(pattern, queue_size=queue_size, overflow=overflow)
    async with sub, anyio.create_task_group() as tg:

        async def watch_client() -> None:
            # The client may send anything; we only care that it has gone.
            with contextlib.suppress(*_GONE):
                while (await websocket.receive())["type"] != "websocket.disconnect":
                    pass
            tg.cancel_scope.cancel()

        tg.start_soon(watch_client)
        encode = _json_frame if frames == "json" else message_text
        try:
            async for msg in sub:
                await websocket.send_text(encode(msg))
            node_ended = True
        except _GONE:
            pass  # the client went away while we were sending
        tg.cancel_scope.cancel()
    if node_ended and websocket.application_state == WebSocketState.CONNECTED:
        with contextlib.suppress(*_GONE, RuntimeError):
            await websocket.close(code=1001, reason="aoz node closed")
