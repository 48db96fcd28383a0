"""Named services, after disc_zmq: advertise, wait for, and call.

A service is a subject whose requests a handler answers. disc_zmq advertised every
topic together with a service of the same name, so a topic can also be polled; aoz
keeps that convention: the service name *is* the subject, and publications (not
requests) on it are ignored by the service.

Advertising needs no extra protocol: a service subscribes to its subject, and that
subscription reaches every peer's publisher, so ``wait_for_service`` is
:meth:`Node.wait_for_interest` and a call to a service nobody offers fails at once
with :class:`aoz.NoResponders`.

**Errors, one convention.** When a handler raises, or returns something that cannot
be encoded, the caller gets an error reply: the msgpack map
``{"aoz.error": "<type>: <message>"}``. :func:`call` and :func:`check_reply` turn it
into :class:`aoz.ServiceError`; the service logs the failure with its traceback
(logger ``aoz._mesh.services``) and keeps serving. Nothing a handler does ends the service
or the block that runs it.

**Handlers** may be ``async def`` (run on the node's loop) or plain ``def`` (run in a
worker thread, so a blocking handler does not stall the node).

    async def quote(req: aoz.Message) -> dict:
        return {"symbol": req.decode(), "bid": 1.0}

    async with aoz.serve(node, "SVC.quote", quote):
        ...  # answered until the block ends
    result = await aoz.call(node, "SVC.quote", "IBM", timeout=1.0)

With ``queue="workers"`` several services of the same name share the requests: each
request is answered by one member of the group (see :mod:`aoz.queues`).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc

from .._protocol.frames import Kind
from ..asyncapi import reply_type_of
from ..errors import (
    AozError,
    ClosedError,
    EncodeError,
    ServiceError,
    UsageError,
    UsageTypeError,
    WaitTimeout,
)
from .message import ERROR_KEY, Message
from .node import Node
from .tasks import TaskOwner

__all__ = ["Handler", "Service", "call", "check_reply", "serve", "wait_for_service"]

log = logging.getLogger("aoz.services")

Handler = Callable[[Message], Awaitable[Any]] | Callable[[Message], Any]


def _is_async(handler: Any) -> bool:
    while isinstance(handler, functools.partial):
        handler = handler.func
    if inspect.iscoroutinefunction(handler):
        return True
    call_ = getattr(handler, "__call__", None)  # noqa: B004 - an async __call__ counts
    return call_ is not None and inspect.iscoroutinefunction(call_)


class Service:
    """A running service; an async context manager that stops it on exit.

    It can also be started with :meth:`start` in one task and stopped with
    :meth:`aclose` in another (a FastAPI lifespan, a fixture): its tasks live in a
    :class:`aoz._mesh.tasks.TaskOwner`, not in the caller's task.

    Attributes:
        handled: requests answered with the handler's result.
        failed: requests answered with an error reply (the handler raised, or its
            result could not be encoded).
    """

    def __init__(
        self,
        node: Node,
        name: str,
        handler: Handler,
        max_concurrency: int,
        queue: str | None = None,
        request_type: Any = None,
        reply_type: Any = None,
    ) -> None:
        if not callable(handler):
            raise UsageTypeError(
                f"the handler of service {name!r} must be callable (an async or plain "
                f"function), not {handler!r}"
            )
        if max_concurrency < 1:
            raise UsageError(f"max_concurrency must be >= 1, not {max_concurrency!r}")
        self.node = node
        self.name = name
        self.queue = queue
        self._handler = handler
        self._is_async = _is_async(handler)
        self._limit = anyio.Semaphore(max_concurrency)
        self._owner = TaskOwner(f"aoz-service-{name}")
        self._sub: Any = None
        self.handled = 0
        self.failed = 0
        # what aoz.asyncapi documents: the reply type from the handler's annotation
        self._types = (request_type, reply_type or reply_type_of(handler))

    async def start(self) -> Service:
        """Subscribe and start answering; returns once the subscription is in place."""
        request, reply = self._types
        self.node.catalog.add_service(self.name, request=request, reply=reply,
                                      queue=self.queue)
        if self.queue is not None:
            from ..queues import subscribe as queue_subscribe

            self._sub = queue_subscribe(self.node, self.name, self.queue)
        else:
            self._sub = self.node.subscribe(self.name)

        async def setup(tg: anyio.abc.TaskGroup) -> None:
            tg.start_soon(self._serve, tg, name=f"aoz-service-{self.name}")

        await self._owner.start(setup)
        return self

    async def aclose(self) -> None:
        """Stop answering: unsubscribe and cancel calls in progress. From any task; twice too."""
        self.node.catalog.remove_service(self.name)
        if self._sub is not None:
            await self._sub.aclose()
        await self._owner.aclose()

    async def __aenter__(self) -> Service:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def failure(self) -> BaseException | None:
        """What ended the service's own task unexpectedly (e.g. its node failed), else None."""
        return self._owner.failure

    async def _serve(self, tg: anyio.abc.TaskGroup) -> None:
        async for msg in self._sub:
            if msg.kind is not Kind.REQUEST:
                continue  # a publication on the service's topic, not a call
            await self._limit.acquire()
            tg.start_soon(self._answer, msg)

    async def _run_handler(self, msg: Message) -> Any:
        if self._is_async:
            return await self._handler(msg)
        result = await anyio.to_thread.run_sync(self._handler, msg)
        if inspect.isawaitable(result):  # a plain def that returned a coroutine
            result = await result
        return result

    async def _answer(self, msg: Message) -> None:
        try:
            try:
                result = await self._run_handler(msg)
            except Exception as exc:
                self._fail(msg, exc, "raised")
                await self._respond_error(msg, exc)
                return
            try:
                await msg.respond(result)
            except EncodeError as exc:
                self._fail(msg, exc, "returned a value that cannot be encoded")
                await self._respond_error(msg, exc)
                return
            except ClosedError:
                return  # the node is closing: nobody to answer
            self.handled += 1
        finally:
            self._limit.release()

    def _fail(self, msg: Message, exc: BaseException, what: str) -> None:
        self.failed += 1
        log.error(
            "service %s: handler %s for a request on %r; the caller gets a ServiceError",
            self.name, what, msg.subject, exc_info=exc,
        )  # fmt: skip

    async def _respond_error(self, msg: Message, exc: BaseException) -> None:
        try:
            await msg.respond({ERROR_KEY: f"{type(exc).__name__}: {exc}"})
        except AozError as err:  # the node closed, or the requester is gone
            log.debug("service %s: could not send the error reply: %s", self.name, err)


def serve(
    node: Node,
    name: str,
    handler: Handler,
    *,
    max_concurrency: int = 64,
    queue: str | None = None,
    request_type: Any = None,
    reply_type: Any = None,
) -> Service:
    """Advertise service ``name``: every request on it is answered by ``handler``.

    ``request_type``/``reply_type`` describe the service in the node's AsyncAPI
    document (:mod:`aoz.asyncapi`); the reply type defaults to the handler's return
    annotation.

    ``handler`` is ``async def handler(msg) -> result`` or a plain function (run in a
    worker thread). Use the result as ``async with`` (or ``await svc.start()`` /
    ``await svc.aclose()``); up to ``max_concurrency`` calls run at once. With
    ``queue``, services sharing the name and the group split the requests.

    >>> async with aoz.serve(node, "SVC.echo", lambda m: m.decode()):  # doctest: +SKIP
    ...     ...
    """
    return Service(node, name, handler, max_concurrency, queue, request_type, reply_type)


async def wait_for_service(node: Node, name: str, timeout: float = 5.0) -> None:
    """Wait until some node in the mesh offers service ``name``, on its own or in a
    queue group (:class:`aoz.WaitTimeout` otherwise)."""
    from ..queues import wait_for_receivers

    if not await wait_for_receivers(node, name, timeout, responders=True):
        raise WaitTimeout(
            f"no service {name!r} (nor a queue group serving it) reached this node within "
            f"{timeout} s", timeout=timeout,
        )


def check_reply(reply: Message, name: str) -> Message:
    """Raise :class:`aoz.ServiceError` if ``reply`` is a service's error reply.

    The same convention :func:`call` uses; for code that calls ``node.request``:

    >>> reply = aoz.check_reply(await node.request("SVC.add", [1, 2]), "SVC.add")  # doctest: +SKIP
    """
    remote = reply.error
    if remote is not None:
        raise ServiceError.from_reply(name, remote)
    return reply


async def call(
    node: Node,
    name: str,
    data: object = b"",
    *,
    timeout: float = 1.0,
    type: Any = None,
    queue_aware: bool = True,
) -> Any:
    """Call service ``name`` and return its decoded answer (into ``type`` when given).

    Raises :class:`aoz.NoResponders` if nobody offers it, :class:`aoz.RequestTimeout`
    if no answer comes in time, :class:`aoz.ServiceError` if the handler failed.
    Services offered by queue groups are reached too (one member per group answers).
    """
    if queue_aware:
        from ..queues import request as queue_request

        reply = await queue_request(node, name, data, timeout=timeout)
    else:
        reply = await node.request(name, data, timeout=timeout)
    check_reply(reply, name)
    return reply.decode() if type is None else reply.decode(type)
