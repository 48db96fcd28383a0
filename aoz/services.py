"""Named services, after disc_zmq: advertise, wait for, and call.

A service is a subject whose requests a handler answers. disc_zmq advertised every
topic together with a service of the same name, so a topic can also be polled; aoz
keeps that convention: the service name *is* the subject, and publications (not
requests) on it are ignored by the service.

Advertising needs no extra protocol: a service subscribes to its subject, and that
subscription reaches every peer's publisher, so ``wait_for_service`` is
:meth:`Node.wait_for_interest` and a call to a service nobody offers fails at once
with :class:`aoz.NoResponders`.

A handler that raises makes the call fail with :class:`aoz.ServiceError` on the
caller's side: the reply then carries ``{"aoz.error": "<type>: <message>"}``
(msgpack), which :func:`call` turns back into the exception.

    async def quote(req: aoz.Message) -> dict:
        return {"symbol": req.decode(), "bid": 1.0}

    async with aoz.serve(node, "SVC.quote", quote):
        ...  # answered until the block ends
    result = await aoz.call(node, "SVC.quote", "IBM", timeout=1.0)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from .errors import ServiceError
from .message import Message
from .node import Node
from .protocol.frames import Kind
from .subscription import Subscription

__all__ = ["Handler", "Service", "call", "serve", "wait_for_service"]

log = logging.getLogger("aoz.services")

Handler = Callable[[Message], Awaitable[Any]]
ERROR_KEY = "aoz.error"


class Service:
    """A running service; an async context manager that stops it on exit."""

    def __init__(self, node: Node, name: str, handler: Handler, max_concurrency: int) -> None:
        self.node = node
        self.name = name
        self._handler = handler
        self._limit = anyio.Semaphore(max_concurrency)
        self._sub: Subscription = node.subscribe(name)
        self._tg: anyio.abc.TaskGroup | None = None
        self._cm = anyio.create_task_group()
        self.handled = 0
        self.failed = 0

    async def __aenter__(self) -> Service:
        self._tg = await self._cm.__aenter__()
        self._tg.start_soon(self._serve)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._sub.aclose()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._cm.__aexit__(None, None, None)

    async def _serve(self) -> None:
        assert self._tg is not None
        async for msg in self._sub:
            if msg.kind is not Kind.REQUEST:
                continue  # a publication on the service's topic, not a call
            await self._limit.acquire()
            self._tg.start_soon(self._answer, msg)

    async def _answer(self, msg: Message) -> None:
        try:
            try:
                result = await self._handler(msg)
            except Exception as exc:
                self.failed += 1
                log.warning("service %s handler failed: %r", self.name, exc)
                result = {ERROR_KEY: f"{type(exc).__name__}: {exc}"}
            else:
                self.handled += 1
            if not self.node.closed:
                await msg.respond(result)
        finally:
            self._limit.release()


def serve(node: Node, name: str, handler: Handler, *, max_concurrency: int = 64) -> Service:
    """Advertise service ``name``: every request on it is answered by ``handler``.

    Use the result as ``async with``; up to ``max_concurrency`` calls run at once.
    """
    return Service(node, name, handler, max_concurrency)


async def wait_for_service(node: Node, name: str, timeout: float = 5.0) -> None:
    """Wait until some node in the mesh offers service ``name``
    (:class:`aoz.WaitTimeout` otherwise)."""
    await node.wait_for_interest(name, timeout=timeout)


async def call(
    node: Node, name: str, data: object = b"", *, timeout: float = 1.0, type: Any = None
) -> Any:
    """Call service ``name`` and return its decoded answer (into ``type`` when given).

    Raises :class:`aoz.NoResponders` if nobody offers it, :class:`aoz.RequestTimeout`
    if no answer comes in time, :class:`aoz.ServiceError` if the handler failed.
    """
    reply = await node.request(name, data, timeout=timeout)
    value = reply.decode()
    if isinstance(value, dict) and set(value) == {ERROR_KEY}:
        raise ServiceError(f"service {name!r} failed: {value[ERROR_KEY]}", service=name)
    return value if type is None else reply.decode(type)
