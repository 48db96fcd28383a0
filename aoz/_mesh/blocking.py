"""A blocking facade for code that does not run on an event loop.

:class:`BlockingNode` runs a :class:`~aoz._mesh.node.Node` on its own event loop in a
background thread (an anyio blocking portal) and offers the same operations as
plain blocking calls. Every method is safe to call from any thread at the same
time: calls are handed to the node's loop, which is the only place the sockets are
touched.

    with aoz.BlockingNode(bind=["tcp://127.0.0.1:*"]) as node:
        node.publish("greeting", b"hello")
        reply = node.request("SVC.time", timeout=1.0)
        with node.subscribe("MD.>") as sub:
            for msg in sub:
                ...
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from .._discovery.peers import Peer
from .._protocol.codecs import Codec
from ..config import Overflow, Settings, load_settings
from ..errors import ClosedError
from .message import Message
from .node import Node, NodeStatistics
from .subscription import Subscription

__all__ = ["BlockingNode", "BlockingSubscription"]

T = TypeVar("T")


class BlockingNode:
    """A node usable from threads, scripts and Spark executors (see module docstring).

    Takes the same keywords as :func:`aoz.connect`. Close it with :meth:`close` or use it
    as a context manager.
    """

    def __init__(
        self, settings: Settings | None = None, *, config: str | None = None, **overrides: Any
    ) -> None:
        if settings is None:
            settings = load_settings(overrides, config=config)
        elif overrides:
            settings = settings.replace(**overrides)
        self._lock = threading.Lock()
        self._portal_cm: AbstractContextManager[BlockingPortal] = start_blocking_portal("asyncio")
        self._portal = self._portal_cm.__enter__()
        self._closed = False
        try:
            self._node_cm = self._portal.wrap_async_context_manager(Node(settings))
            self.node: Node = self._node_cm.__enter__()
        except BaseException:
            self._portal_cm.__exit__(None, None, None)
            raise

    # -- plumbing -------------------------------------------------------------------------------
    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise ClosedError("this BlockingNode is closed; create a new one")
        return self._portal.call(functools.partial(fn, *args, **kwargs))

    @property
    def uuid(self) -> str:
        return self.node.uuid

    @property
    def endpoint(self) -> str:
        return self.node.endpoint

    # -- the node's operations ---------------------------------------------------------------------
    def publish(self, subject: str, data: object = b"", *, codec: Codec | None = None,
                headers: Mapping[str, str] | None = None) -> None:
        """Publish one message (see :meth:`aoz.Node.publish`)."""
        self._call(self.node.publish_nowait, subject, data, codec=codec, headers=headers)

    def publish_many(
        self, messages: Iterable[tuple[str, object]], *, codec: Codec | None = None
    ) -> int:
        """Publish many ``(subject, data)`` pairs with one hand-over to the node's loop."""
        items = list(messages)

        def send_all() -> int:
            for subject, data in items:
                self.node.publish_nowait(subject, data, codec=codec)
            return len(items)

        return int(self._call(send_all))

    def request(
        self, subject: str, data: object = b"", *, timeout: float = 1.0,
        codec: Codec | None = None, headers: Mapping[str, str] | None = None,
    ) -> Message:
        """Send a request and block for the first reply (see :meth:`aoz.Node.request`)."""
        msg: Message = self._call(self.node.request, subject, data, timeout=timeout,
                                  codec=codec, headers=headers)
        return msg

    def request_many(
        self,
        subject: str,
        data: object = b"",
        *,
        timeout: float = 1.0,
        max_replies: int | None = None,
        codec: Codec | None = None,
    ) -> list[Message]:
        """Collect every reply until ``timeout`` or ``max_replies``."""

        async def collect() -> list[Message]:
            out: list[Message] = []
            async with self.node.request_many(
                subject, data, timeout=timeout, max_replies=max_replies, codec=codec
            ) as replies:
                async for r in replies:
                    out.append(r)
            return out

        result: list[Message] = self._call(collect)
        return result

    def respond(self, msg: Message, data: object = b"", *, codec: Codec | None = None) -> None:
        """Answer a request received through a :class:`BlockingSubscription`."""
        self._call(msg.respond, data, codec=codec)

    def subscribe(
        self,
        pattern: str,
        *,
        regex: bool = False,
        queue_size: int | None = None,
        overflow: Overflow | None = None,
        history: int = 0,
        recover: bool = False,
    ) -> BlockingSubscription:
        """Subscribe; iterate the result with a plain ``for`` loop (``history`` and
        ``recover`` as :meth:`aoz.Node.subscribe`)."""
        sub: Subscription = self._call(
            lambda: self.node.subscribe(pattern, regex=regex, queue_size=queue_size,
                                        overflow=overflow, history=history, recover=recover)
        )
        return BlockingSubscription(self, sub)

    def wait_for_interest(self, subject: str, timeout: float = 5.0) -> None:
        self._call(self.node.wait_for_interest, subject, timeout)

    def has_interest(self, subject: str) -> bool:
        return bool(self._call(self.node.has_interest, subject))

    @property
    def peers(self) -> list[Peer]:
        peers: list[Peer] = self._call(lambda: self.node.peers)
        return peers

    @property
    def links(self) -> dict[str, bool]:
        links: dict[str, bool] = self._call(lambda: self.node.links)
        return links

    def statistics(self) -> NodeStatistics:
        stats: NodeStatistics = self._call(self.node.statistics)
        return stats

    def close(self) -> None:
        """Close the node and stop its thread (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._node_cm.__exit__(None, None, None)
        finally:
            self._portal_cm.__exit__(None, None, None)

    def __enter__(self) -> BlockingNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BlockingSubscription:
    """A subscription read with a plain ``for`` loop or :meth:`next`."""

    def __init__(self, owner: BlockingNode, sub: Subscription) -> None:
        self._owner = owner
        self.subscription = sub

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        try:
            msg: Message = self._owner._call(self.subscription.__anext__)
        except (StopAsyncIteration, ClosedError):
            raise StopIteration from None
        return msg

    def next(self, timeout: float | None = None) -> Message:
        """The next message; :class:`aoz.WaitTimeout` after ``timeout`` seconds."""
        msg: Message = self._owner._call(self.subscription.next, timeout)
        return msg

    def close(self) -> None:
        if not self._owner._closed:
            self._owner._call(self.subscription.close)

    def __enter__(self) -> BlockingSubscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
