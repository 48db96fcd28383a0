"""The FastAPI example app served by a real uvicorn, with real HTTP and WebSocket clients."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import msgspec
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from websockets.asyncio.client import connect as ws_connect

import aoz
from aoz.fastapi import EXCEPTION_HANDLERS, NodeDep, app_node, install_exception_handlers, lifespan
from aoz.pytest_plugin import NodeFactory

from ..ports import free_port
from .conftest import STEP, Spawn, clean_env


class Quote(msgspec.Struct):
    symbol: str
    bid: float


@pytest.fixture
async def app_url(spawn: Spawn, aoz_nsd: aoz.NamingDaemon) -> AsyncIterator[str]:
    """examples/fastapi_app.py under uvicorn, its node joined to the test's nsd."""
    env = clean_env(AOZ_NAMING=aoz_nsd.endpoint)
    for _ in range(5):  # the free port may be taken by someone else before uvicorn binds it
        port = free_port()
        server = await spawn(
            [sys.executable, "-m", "uvicorn", "examples.fastapi_app:app",
             "--host", "127.0.0.1", "--port", str(port)],
            env=env,
        )  # fmt: skip
        try:
            # printed after the lifespan (our node joined the mesh) and the bind
            await server.wait_stderr("Uvicorn running on")
        except AssertionError:
            if "address already in use" in "".join(server.stderr_lines).lower():
                continue
            raise
        yield f"127.0.0.1:{port}"
        # a graceful shutdown runs the lifespan's exit (the node closes); uvicorn then
        # re-raises SIGTERM, so the status is -SIGTERM rather than 0
        await server.terminate()
        rc, _, err = await server.finish()
        assert rc in (0, -signal.SIGTERM), err
        assert "Application shutdown complete" in err
        assert "Traceback" not in err
        return
    pytest.fail("no free port for uvicorn after 5 tries")


async def answer_quotes(node: aoz.Node, prices: dict[str, float]) -> None:
    async with node.subscribe("SVC.quote") as requests:
        async for req in requests:
            symbol = req.decode()["symbol"]
            assert req.reply is not None  # the app's inbox may not have reached us yet
            await node.wait_for_interest(req.reply, timeout=STEP)
            await req.respond(Quote(symbol, prices[symbol]))


async def test_http_endpoint_requests_through_the_node(
    app_url: str, aoz_node_factory: NodeFactory
) -> None:
    service = await aoz_node_factory(program="quote-service")
    async with anyio.create_task_group() as tg, httpx.AsyncClient(timeout=STEP) as http:
        tg.start_soon(answer_quotes, service, {"IBM": 141.5, "AAPL": 190.25})
        for symbol, bid in (("IBM", 141.5), ("AAPL", 190.25)):
            response = await http.get(f"http://{app_url}/quote/{symbol}", params={"timeout": 10})
            assert response.status_code == 200, response.text
            assert response.json() == {"symbol": symbol, "bid": bid}
        tg.cancel_scope.cancel()


async def test_http_endpoint_without_a_service_is_503(app_url: str) -> None:
    async with httpx.AsyncClient(timeout=STEP) as http:
        response = await http.get(f"http://{app_url}/quote/IBM", params={"timeout": 0.2})
    assert response.status_code == 503
    body = response.json()
    assert body["error"] == "WaitTimeout" and "SVC.quote" in body["detail"]


async def test_http_endpoint_with_a_silent_service_is_504(
    app_url: str, aoz_node_factory: NodeFactory
) -> None:
    service = await aoz_node_factory(program="silent-service")
    async with service.subscribe("SVC.quote") as requests, httpx.AsyncClient(timeout=STEP) as http:
        response = await http.get(f"http://{app_url}/quote/IBM", params={"timeout": 2})
        assert (await requests.next(timeout=STEP)).reply is not None  # it was asked
    assert response.status_code == 504
    assert response.json()["error"] == "RequestTimeout"


async def test_http_endpoint_with_a_failing_service_is_502_without_its_error(
    app_url: str, aoz_node_factory: NodeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue #25 item 1: a responder that raises was answered as HTTP 200 with the
    error reply as the body. Now: 502, the remote error's text stays out of the body,
    and the service logged the failure where it happened."""
    service = await aoz_node_factory(program="failing-service")

    def quote(req: aoz.Message) -> Quote:
        raise ValueError("feed down: secret internals")

    async with aoz.serve(service, "SVC.quote", quote), httpx.AsyncClient(timeout=STEP) as http:
        response = await http.get(f"http://{app_url}/quote/IBM", params={"timeout": 5})
    assert response.status_code == 502, response.text
    assert response.json() == {"detail": "the service 'SVC.quote' failed",
                               "error": "ServiceError"}
    assert "secret" not in response.text
    assert any(r.name == "aoz.services" and r.exc_info and "feed down" in str(r.exc_info[1])
               for r in caplog.records)


async def test_the_fastapi_app_serves_its_document(app_url: str) -> None:
    async with httpx.AsyncClient(timeout=STEP) as http:
        response = await http.get(f"http://{app_url}/asyncapi.json")
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["asyncapi"] == "3.0.0" and doc["info"]["title"] == "aoz example"
    assert set(doc) >= {"channels", "operations", "components"}


async def test_websocket_relays_market_data_and_stops_on_disconnect(
    app_url: str, aoz_node_factory: NodeFactory
) -> None:
    feed = await aoz_node_factory(program="md-feed")
    async with ws_connect(f"ws://{app_url}/ws/md", open_timeout=STEP) as ws:
        # the relay's subscription has reached the feed: from now on nothing is lost
        await feed.wait_for_interest("MD.NYSE.IBM", timeout=STEP)
        await feed.publish("NEWS.IBM", "not market data")
        await feed.publish("MD.NYSE.IBM", {"bid": 141.5, "ask": 141.6})
        await feed.publish("MD.NASDAQ.AAPL", "text tick")
        frames = [json.loads(await asyncio.wait_for(ws.recv(), STEP)) for _ in range(2)]
    assert [(f["subject"], f["codec"], f["data"]) for f in frames] == [
        ("MD.NYSE.IBM", "msgpack", {"bid": 141.5, "ask": 141.6}),
        ("MD.NASDAQ.AAPL", "text", "text tick"),
    ]
    assert all(f["kind"] == "publish" and f["reply"] is None for f in frames)
    # the client left: the relay ends and its subscription goes away (bounded poll;
    # ZeroMQ gives no event for a vanished subscription other than the XPUB state)
    for _ in range(200):
        if not feed.has_interest("MD.NYSE.IBM"):
            break
        await asyncio.sleep(0.05)
    assert not feed.has_interest("MD.NYSE.IBM")


def test_node_dependency_without_the_lifespan_is_a_clear_error() -> None:

    app = FastAPI()  # no aoz lifespan

    @app.get("/")
    async def handler(node: NodeDep) -> str:
        return node.uuid

    with TestClient(app) as client, pytest.raises(aoz.AozError, match="lifespan"):
        client.get("/")


def test_lifespan_runs_the_apps_own_lifespan_with_the_node_open() -> None:

    seen: list[bool] = []

    @asynccontextmanager
    async def mine(app: FastAPI) -> AsyncIterator[dict[str, str]]:
        yield {"greeting": "hello"}

    app = FastAPI(lifespan=lifespan(mine, bind=["tcp://127.0.0.1:*"]))

    @app.get("/")
    async def handler(node: NodeDep) -> dict[str, str]:
        seen.append(node.closed)
        return {"mode": node.settings.mode}

    with TestClient(app) as client:
        assert client.get("/").json() == {"mode": "static"}
    assert seen == [False]


def test_exception_handlers_map_every_aoz_error() -> None:
    app = FastAPI(exception_handlers=EXCEPTION_HANDLERS)
    errors = {
        "none": aoz.NoResponders("nobody", subject="S"),
        "slow": aoz.RequestTimeout("slow", subject="S", timeout=1.0),
        "failed": aoz.ServiceError("boom", service="S"),
        "closed": aoz.ClosedError("closing"),
        "other": aoz.AozError("other"),
    }

    @app.get("/{what}")
    async def handler(what: str) -> None:
        raise errors[what]

    with TestClient(app) as client:
        got = {w: client.get(f"/{w}") for w in errors}
    assert {w: r.status_code for w, r in got.items()} == {
        "none": 503,
        "slow": 504,
        "failed": 502,
        "closed": 503,
        "other": 500,
    }
    assert got["slow"].json() == {"detail": "slow", "error": "RequestTimeout"}
    plain = install_exception_handlers(FastAPI())
    assert plain.exception_handlers[aoz.AozError] is EXCEPTION_HANDLERS[aoz.AozError]


def test_the_apps_own_lifespan_reaches_the_node() -> None:
    """The testing recipe of docs/USAGE.md: TestClient runs the lifespan (static mode:
    no nsd needed), and the app's own lifespan starts a service on the node."""
    started: list[str] = []

    @asynccontextmanager
    async def mine(app: FastAPI) -> AsyncIterator[None]:
        node = app_node(app)
        started.append(node.uuid)
        async with aoz.serve(node, "SVC.health", lambda msg: "ok"):
            yield

    app = FastAPI(lifespan=lifespan(mine, bind=["tcp://127.0.0.1:*"]))

    @app.get("/health")
    async def health(node: NodeDep) -> object:
        await aoz.wait_for_service(node, "SVC.health")
        return await aoz.call(node, "SVC.health", timeout=5)

    with TestClient(app) as client:
        assert client.get("/health").json() == "ok"
    assert len(started) == 1
    with pytest.raises(aoz.AozError, match="no running aoz node"):
        app_node(app)  # the lifespan is over
