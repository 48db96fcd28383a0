"""OpenTelemetry tracing (aoz[otel]): the trace context crosses the mesh in headers, and
publish/receive and request/serve spans of two nodes join one trace."""

from __future__ import annotations

import pytest

import aoz

pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is not installed")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind

import aoz.otel


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def test_publish_and_receive_spans_share_a_trace(
    static_pair: tuple[aoz.Node, aoz.Node],
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    a, b = static_pair
    ta, tb = aoz.otel.Tracing(a, provider), aoz.otel.Tracing(b, provider)
    async with b.subscribe("T.x") as sub:
        await a.wait_for_interest("T.x")
        await ta.publish("T.x", b"tick", headers={"k": "v"})
        msg = await sub.next(timeout=5)
        with tb.receive(msg):
            pass
    assert msg.headers["k"] == "v" and msg.headers["traceparent"].startswith("00-")
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    pub, rec = by_name["publish T.x"], by_name["receive T.x"]
    assert (pub.kind, rec.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)
    assert rec.context.trace_id == pub.context.trace_id
    assert rec.parent is not None and rec.parent.span_id == pub.context.span_id
    assert pub.attributes is not None and pub.attributes["messaging.system"] == "aoz"


@pytest.mark.parametrize("asynchronous", [True, False])
async def test_request_and_serve_spans_share_a_trace(
    static_pair: tuple[aoz.Node, aoz.Node],
    spans: tuple[TracerProvider, InMemorySpanExporter],
    asynchronous: bool,
) -> None:
    provider, exporter = spans
    a, b = static_pair
    ta, tb = aoz.otel.Tracing(a, provider), aoz.otel.Tracing(b, provider)

    async def handle_async(req: aoz.Message) -> str:
        return "pong"

    def handle_sync(req: aoz.Message) -> str:
        return "pong"

    handler = tb.handler(handle_async if asynchronous else handle_sync)
    async with aoz.serve(b, "T.svc", handler):
        await aoz.wait_for_service(a, "T.svc")
        assert (await ta.request("T.svc", b"ping", timeout=5)).decode() == "pong"
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    req, srv = by_name["request T.svc"], by_name["serve T.svc"]
    assert (req.kind, srv.kind) == (SpanKind.CLIENT, SpanKind.SERVER)
    assert srv.context.trace_id == req.context.trace_id
    assert srv.parent is not None and srv.parent.span_id == req.context.span_id
