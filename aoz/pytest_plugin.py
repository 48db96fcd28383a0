"""pytest fixtures for testing code that uses aoz (loaded through the ``pytest11`` entry point).

Installing aoz makes these fixtures available in every test suite; they need
pytest-asyncio (``asyncio_mode = "auto"``, or mark tests with ``@pytest.mark.asyncio``):

``aoz_nsd``
    an embedded naming daemon on a free loopback port (``aoz_nsd.endpoint``).
``aoz_node_factory``
    ``node = await aoz_node_factory(**settings)`` starts a node that joins ``aoz_nsd``
    unless the settings choose another mode (``bind=``/``connect=``, ``mode=``...);
    every node it made is closed at teardown.
``aoz_node``
    one node made by ``aoz_node_factory()``.

Example::

    async def test_quote_service(aoz_node_factory):
        service = await aoz_node_factory(program="quotes")
        client = await aoz_node_factory()
        async with service.subscribe("SVC.quote") as requests:
            await client.wait_for_interest("SVC.quote")
            ...

Every fixture is function-scoped, so each test gets fresh ports and a fresh loop.
Importing this module must never fail (pytest loads it for every run), so aoz itself
is imported inside the fixtures.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from aoz.discovery.nsd import NamingDaemon
    from aoz.node import Node

__all__ = ["NodeFactory", "aoz_node", "aoz_node_factory", "aoz_nsd"]

# Settings that choose how a node finds peers; when none is given the node joins aoz_nsd.
_DISCOVERY_KEYS = frozenset(
    {"mode", "naming", "bind", "connect", "broker_pub", "broker_sub", "config"}
)


class NodeFactory(Protocol):
    """``await aoz_node_factory(**settings)`` -> a started :class:`aoz.Node`."""

    async def __call__(self, **settings: Any) -> Node: ...


class _Held:
    """Keeps an async context manager open inside a task of its own.

    pytest-asyncio runs a fixture's setup and teardown in different tasks, while anyio
    cancel scopes must be entered and left by the same task; a dedicated task that
    enters the context, waits, and leaves it satisfies both.
    """

    def __init__(self) -> None:
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def enter(self, cm: AbstractAsyncContextManager[Any]) -> Any:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Any] = loop.create_future()

        async def hold() -> None:
            async with cm as value:
                ready.set_result(value)
                await self._stop.wait()

        self._task = loop.create_task(hold(), name="aoz-fixture")
        await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if ready.done():
            return ready.result()
        self._task.result()  # raises what the context manager raised on entry
        raise RuntimeError("context manager exited without yielding")  # pragma: no cover

    async def exit(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task


def _async_fixture(fn: Any) -> Any:
    """``pytest_asyncio.fixture``, or a fixture that explains what is missing."""
    try:
        import pytest_asyncio
    except ImportError:  # pragma: no cover - only without pytest-asyncio

        def missing() -> None:
            pytest.fail("aoz's pytest fixtures need pytest-asyncio: pip install pytest-asyncio")

        return pytest.fixture(name=fn.__name__)(missing)
    return pytest_asyncio.fixture(fn)


@_async_fixture
async def aoz_nsd() -> AsyncIterator[NamingDaemon]:
    """An embedded naming daemon on a free loopback port; ``.endpoint`` is its address."""
    from aoz.discovery.nsd import NamingDaemon

    held = _Held()
    nsd: NamingDaemon = await held.enter(NamingDaemon(host="127.0.0.1", port=0))
    try:
        yield nsd
    finally:
        await held.exit()


@_async_fixture
async def aoz_node_factory(aoz_nsd: NamingDaemon) -> AsyncIterator[NodeFactory]:
    """Start nodes with ``await aoz_node_factory(**settings)``; all are closed at teardown.

    Nodes join ``aoz_nsd`` unless the settings pick their own discovery
    (``naming=``, ``bind=``/``connect=``, ``broker_pub=``/``broker_sub=``, ``mode=``).
    """
    import aoz

    nodes: list[Node] = []

    async def make(**settings: Any) -> Node:
        if not _DISCOVERY_KEYS.intersection(settings):
            settings["naming"] = [aoz_nsd.endpoint]
        node = aoz.connect(**settings)
        await node.start()
        nodes.append(node)
        return node

    try:
        yield make
    finally:
        errors: list[Exception] = []
        for node in reversed(nodes):
            try:
                await node.aclose()
            except Exception as exc:  # close them all, then report
                errors.append(exc)
        if errors:
            raise errors[0]


@_async_fixture
async def aoz_node(aoz_node_factory: NodeFactory) -> Node:
    """One node joined to ``aoz_nsd`` (closed at teardown by ``aoz_node_factory``)."""
    return await aoz_node_factory()
