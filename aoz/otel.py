"""OpenTelemetry tracing for aoz (the ``aoz[otel]`` extra): W3C trace context carried in
message headers, and spans for publish, receive, request and serve.

    import aoz.otel

    async with aoz.connect() as node:
        tracing = aoz.otel.Tracing(node)              # the global tracer provider's tracer
        await tracing.publish("MD.NYSE.IBM", quote)   # PRODUCER span; traceparent in headers
        reply = await tracing.request("SVC.quote", "IBM")           # CLIENT span
        async with aoz.serve(node, "SVC.quote", tracing.handler(quote_handler)):
            ...                                       # a SERVER span per request, its child
        async for msg in node.subscribe("MD.>"):
            with tracing.receive(msg):                # CONSUMER span, the publisher's child
                ...

The context crosses the mesh as the ``traceparent``/``tracestate`` headers (W3C Trace
Context, through OpenTelemetry's configured propagator), so a trace follows a message
from one process to the next, through aoz nodes only (OZ programs carry no headers).
Spans follow OpenTelemetry's messaging conventions: ``messaging.system = "aoz"``,
``messaging.destination.name`` (the subject), ``messaging.operation.type``. With no SDK
configured the API's tracer records nothing and costs next to nothing.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ._extras import missing_extra

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Span, SpanKind
except ImportError as exc:
    raise missing_extra(exc, "otel", "aoz.otel") from exc

from ._mesh.message import Message
from ._mesh.node import Node

__all__ = ["Tracing"]

_SYSTEM = "aoz"


def _attrs(subject: str, operation: str) -> dict[str, str]:
    return {"messaging.system": _SYSTEM, "messaging.destination.name": subject,
            "messaging.operation.type": operation}


class Tracing:
    """Traced publish, request, receive and serve on one node (see the module docstring).

    ``tracer_provider`` defaults to OpenTelemetry's global one.
    """

    def __init__(self, node: Node, tracer_provider: trace.TracerProvider | None = None) -> None:
        from . import __version__

        self.node = node
        self.tracer = trace.get_tracer("aoz", __version__, tracer_provider=tracer_provider)

    @staticmethod
    def inject(headers: Mapping[str, str] | None = None) -> dict[str, str]:
        """``headers`` plus the current trace context (``traceparent``...)."""
        carrier = dict(headers or {})
        propagate.inject(carrier)
        return carrier

    async def publish(self, subject: str, data: object = b"", *,
                      headers: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        """:meth:`aoz.Node.publish` in a PRODUCER span whose context the message carries."""
        with self.tracer.start_as_current_span(f"publish {subject}", kind=SpanKind.PRODUCER,
                                               attributes=_attrs(subject, "publish")):
            await self.node.publish(subject, data, headers=self.inject(headers), **kwargs)

    async def request(self, subject: str, data: object = b"", *,
                      headers: Mapping[str, str] | None = None, **kwargs: Any) -> Message:
        """:meth:`aoz.Node.request` in a CLIENT span whose context the request carries."""
        with self.tracer.start_as_current_span(f"request {subject}", kind=SpanKind.CLIENT,
                                               attributes=_attrs(subject, "send")):
            return await self.node.request(subject, data, headers=self.inject(headers),
                                           **kwargs)

    @contextmanager
    def receive(self, msg: Message) -> Iterator[Span]:
        """A CONSUMER span for handling ``msg``, child of the context it carries."""
        parent = propagate.extract(msg.headers)
        with self.tracer.start_as_current_span(
            f"receive {msg.subject}", context=parent, kind=SpanKind.CONSUMER,
            attributes=_attrs(msg.subject, "receive"),
        ) as span:
            yield span

    def handler(self, fn: Callable[[Message], Any]) -> Callable[[Message], Any]:
        """A service handler (for :func:`aoz.serve`) that runs ``fn`` in a SERVER span,
        child of the request's context; sync handlers stay sync (serve runs them in a
        worker thread)."""

        def span(msg: Message) -> Any:
            return self.tracer.start_as_current_span(
                f"serve {msg.subject}", context=propagate.extract(msg.headers),
                kind=SpanKind.SERVER, attributes=_attrs(msg.subject, "process"),
            )

        if inspect.iscoroutinefunction(fn):
            async_fn: Callable[[Message], Awaitable[Any]] = fn

            @functools.wraps(fn)
            async def traced_async(msg: Message) -> Any:
                with span(msg):
                    return await async_fn(msg)

            return traced_async

        @functools.wraps(fn)
        def traced(msg: Message) -> Any:
            with span(msg):
                return fn(msg)

        return traced
