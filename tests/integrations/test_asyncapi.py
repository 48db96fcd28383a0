"""AsyncAPI documents (issue #25 item 5): from a node's services and declared typed
publications, served by the FastAPI integration (real uvicorn) and printed by the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import msgspec

import aoz
from aoz.asyncapi import document

from .conftest import REPO


class Quote(msgspec.Struct):
    symbol: str
    bid: float


def quote(req: aoz.Message) -> Quote:
    return Quote(req.decode(), 1.5)


async def test_a_nodes_document_lists_its_services_and_publications(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, _ = static_pair
    a.catalog.publishes("MD.*.IBM", Quote, summary="quotes")
    async with aoz.serve(a, "SVC.quote", quote, request_type=str):
        doc = document(a.catalog, title="quotes", version="2.0.0")
    assert "SVC.quote" not in a.catalog.services  # a stopped service leaves the catalog
    assert doc["asyncapi"] == "3.0.0" and doc["info"] == {"title": "quotes", "version": "2.0.0"}
    assert doc["channels"]["MD._.IBM"]["address"] == "MD.*.IBM"
    assert doc["operations"]["publish.MD._.IBM"] == {
        "action": "send", "channel": {"$ref": "#/channels/MD._.IBM"}, "summary": "quotes"}
    serve = doc["operations"]["serve.SVC.quote"]
    assert serve["action"] == "receive" and serve["reply"] == {
        "channel": {"$ref": "#/channels/SVC.quote.reply"}}
    messages = doc["components"]["messages"]
    assert messages["SVC.quote.reply"]["payload"] == {"$ref": "#/components/schemas/Quote"}
    assert messages["SVC.quote.request"]["payload"] == {"type": "string"}
    quote_schema = doc["components"]["schemas"]["Quote"]
    assert quote_schema["properties"] == {"symbol": {"type": "string"},
                                          "bid": {"type": "number"}}
    json.dumps(doc)  # JSON-ready


def test_the_cli_prints_a_catalogs_document() -> None:
    proc = subprocess.run([sys.executable, "-m", "aoz", "asyncapi", "examples.catalog:catalog",
                           "--title", "quotes"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["info"]["title"] == "quotes"
    assert set(doc["operations"]) == {"publish.MD._.IBM", "serve.SVC.quote"}
    bad = subprocess.run([sys.executable, "-m", "aoz", "asyncapi", "nope"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "MODULE:ATTRIBUTE" in bad.stderr
