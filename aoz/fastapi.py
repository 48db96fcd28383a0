"""FastAPI integration (needs the ``aoz[fastapi]`` extra): a lifespan, a dependency,
error mapping, a relay.

The node starts with the app and closes with it, through FastAPI's own lifespan
mechanism; handlers reach it through the lifespan state with the ``NodeDep``
dependency; aoz's errors become HTTP answers through :data:`EXCEPTION_HANDLERS`;
:func:`relay` streams a subscription to a WebSocket::

    from fastapi import FastAPI, WebSocket
    from aoz.fastapi import EXCEPTION_HANDLERS, NodeDep, lifespan, relay

    app = FastAPI(lifespan=lifespan(), exception_handlers=EXCEPTION_HANDLERS)

    @app.get("/quote/{symbol}")
    async def quote(symbol: str, node: NodeDep):
        reply = await node.request("SVC.quote", {"symbol": symbol}, timeout=1.0)
        return reply.decode()

    @app.websocket("/ws/md")
    async def market_data(websocket: WebSocket, node: NodeDep):
        await relay(websocket, node, "MD.>")

A handler that lets :class:`aoz.NoResponders` escape answers 503, and
:class:`aoz.RequestTimeout` 504 (see :data:`EXCEPTION_HANDLERS` for all of them).

An application with a lifespan of its own passes it in: ``lifespan(my_lifespan)``; it
runs while the node is open, reaches it as ``app.state.aoz_node`` (or
:func:`app_node`), and its state is merged with aoz's.

WebSocket close codes of :func:`relay`: 1000 never (the client ends a relay by
leaving), **1001** when the node closes while the server runs, **1011** when the node
failed (an aoz error ended the subscription). When the *server* shuts down, uvicorn
closes every WebSocket itself, with **1012** (service restart), before the app's
lifespan closes the node: clients see 1012 then, and should reconnect.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any, Literal

import anyio
import msgspec

from ._extras import missing_extra

try:
    from fastapi import Depends, FastAPI
    from fastapi.responses import JSONResponse
    from starlette.requests import HTTPConnection, Request
    from starlette.websockets import (
        WebSocket,
        WebSocketDisconnect,
        WebSocketDisconnected,
        WebSocketState,
    )
except ImportError as exc:
    raise missing_extra(exc, "fastapi", "aoz.fastapi") from exc

from ._mesh.message import Message
from ._mesh.node import Node, connect
from ._render import message_text, message_to_dict
from .asyncapi import document
from .config import Overflow
from .errors import (
    AozError,
    ClosedError,
    NoResponders,
    RequestTimeout,
    ServiceError,
    UsageError,
    WaitTimeout,
)

log = logging.getLogger("aoz.fastapi")

__all__ = [
    "EXCEPTION_HANDLERS",
    "STATE_KEY",
    "NodeDep",
    "app_node",
    "get_node",
    "asyncapi_route",
    "install_exception_handlers",
    "lifespan",
    "message_to_dict",
    "relay",
]

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
            setattr(app.state, STATE_KEY, node)  # for the app's own lifespan
            try:
                if app_lifespan is None:
                    yield state
                    return
                async with app_lifespan(app) as inner:
                    if inner:
                        state.update(inner)
                    yield state
            finally:
                setattr(app.state, STATE_KEY, None)

    return _lifespan


def app_node(app: FastAPI) -> Node:
    """The node of an app whose lifespan is running (for the app's own lifespan,
    startup work, metrics)::

        @asynccontextmanager
        async def mine(app: FastAPI):
            node = aoz.fastapi.app_node(app)
            async with aoz.serve(node, "SVC.health", health):
                yield

        app = FastAPI(lifespan=aoz.fastapi.lifespan(mine))
    """
    node = getattr(app.state, STATE_KEY, None)
    if not isinstance(node, Node):
        raise UsageError(
            "the app has no running aoz node: create it with "
            "FastAPI(lifespan=aoz.fastapi.lifespan()) and call this while the lifespan runs"
        )
    return node


# ------------------------------------------------------------------ errors -> HTTP
_STATUS: tuple[tuple[type[AozError], int], ...] = (
    (NoResponders, 503),  # nobody offers the service: Service Unavailable
    (WaitTimeout, 503),  # no responder reached us in time
    (ClosedError, 503),  # the node is closing (shutdown)
    (RequestTimeout, 504),  # a responder exists but did not answer: Gateway Timeout
    (ServiceError, 502),  # the service answered with an error: Bad Gateway
)


async def _aoz_error(request: Request, exc: Exception) -> JSONResponse:
    status = next((code for cls, code in _STATUS if isinstance(exc, cls)), 500)
    if isinstance(exc, ServiceError):
        # the remote error's text is the service's business, not the HTTP client's:
        # logged here, summarised there (`exc.remote_type`/`remote_message` for handlers
        # that want to map it themselves)
        log.warning("%s %s: %s", request.method, request.url.path, exc)
        detail = f"the service {exc.service!r} failed"
        return JSONResponse({"detail": detail, "error": "ServiceError"}, status_code=status)
    return JSONResponse({"detail": str(exc), "error": type(exc).__name__}, status_code=status)


#: ``FastAPI(exception_handlers=EXCEPTION_HANDLERS)``: aoz errors become HTTP answers —
#: NoResponders/WaitTimeout/ClosedError 503, RequestTimeout 504, ServiceError 502, any
#: other AozError 500 — with ``{"detail": message, "error": class name}`` as the body.
EXCEPTION_HANDLERS: dict[Any, Callable[[Request, Exception], Any]] = {AozError: _aoz_error}


def install_exception_handlers(app: FastAPI) -> FastAPI:
    """Add :data:`EXCEPTION_HANDLERS` to an existing app; returns it."""
    for exc_type, handler in EXCEPTION_HANDLERS.items():
        app.add_exception_handler(exc_type, handler)
    return app


def asyncapi_route(app: FastAPI, path: str = "/asyncapi.json", *, title: str | None = None,
                   version: str = "1.0.0") -> None:
    """Serve the AsyncAPI document of the app's node (its services and declared
    publications, :mod:`aoz.asyncapi`) at ``path``."""

    async def asyncapi(request: Request) -> JSONResponse:
        node = get_node(request)
        return JSONResponse(document(node.catalog, title=title or app.title,
                                     version=version))

    app.add_api_route(path, asyncapi, methods=["GET"], include_in_schema=False)


def get_node(connection: HTTPConnection) -> Node:
    """The app's node (FastAPI dependency for HTTP and WebSocket handlers): from the
    request's lifespan state, or the app's (``app.state.aoz_node``, which the lifespan
    also sets: what a test transport that does not copy lifespan state sees)."""
    node = getattr(connection.state, STATE_KEY, None)
    if not isinstance(node, Node):
        node = getattr(connection.app.state, STATE_KEY, None)
    if not isinstance(node, Node):
        raise UsageError(
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
    removed), when the node closes (the WebSocket is closed with code 1001) or when
    the node fails (code 1011). A slow
    client does not hold the node back: its queue keeps the newest ``queue_size``
    messages by default (``overflow="drop_oldest"``) and counts what it drops.
    """
    if websocket.application_state == WebSocketState.CONNECTING:
        await websocket.accept()
    close: tuple[int, str] | None = None
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
            close = (1001, "aoz node closed")
        except _GONE:
            pass  # the client went away while we were sending
        except AozError as exc:  # the node failed: say so, do not crash the app
            close = (1011, f"aoz node failed: {type(exc).__name__}"[:120])
        tg.cancel_scope.cancel()
    if close is not None and websocket.application_state == WebSocketState.CONNECTED:
        with contextlib.suppress(*_GONE, RuntimeError):
            await websocket.close(code=close[0], reason=close[1])
