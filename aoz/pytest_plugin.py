"""pytest fixtures for testing code that uses aoz (loaded through the ``pytest11`` entry point).

Installing aoz makes these fixtures available in every test suite, under either async
test plugin:

- **pytest-asyncio**: ``async def`` tests (``asyncio_mode = "auto"``, or
  ``@pytest.mark.asyncio``); the fixtures run on the test's loop (``loop_scope`` is
  ``"function"``; set ``asyncio_default_fixture_loop_scope = "function"`` in your
  pytest configuration so pytest-asyncio does not warn about the unset default);
- **anyio's plugin**: ``@pytest.mark.anyio`` tests get their nodes on anyio's loop
  (aoz runs on asyncio: keep ``anyio_backend`` at ``"asyncio"``). A project that has
  both plugins must run pytest-asyncio in ``strict`` mode, as anyio documents: in
  ``auto`` mode pytest-asyncio takes every async fixture for its own loop.

``aoz_nsd``
    an embedded naming daemon on a free loopback port (``aoz_nsd.endpoint``).
``aoz_node_factory``
    ``node = await aoz_node_factory(**settings)`` starts a node that joins ``aoz_nsd``
    unless the settings choose another mode (``bind=``/``connect=``, ``mode=``...);
    every node it made is closed at teardown.
``aoz_node``
    one node made by ``aoz_node_factory()``.
``aoz_mesh``
    a :class:`aoz.testing.TestMesh`: an nsd (and services, ``aoz_mesh.serve(...)``) on a
    thread of its own, for tests that block their loop (FastAPI's ``TestClient``) and
    for plain ``def`` tests; ``aoz_mesh.settings()`` joins an app or a node to it.

Example::

    async def test_quote_service(aoz_node_factory):
        service = await aoz_node_factory(program="quotes")
        client = await aoz_node_factory()
        async with service.subscribe("SVC.quote") as requests:
            await client.wait_for_interest("SVC.quote")
            ...

Every fixture is function-scoped, so each test gets fresh ports and a fresh loop.
Each public fixture is a small synchronous dispatcher that picks the implementation
for the test's plugin (anyio when the test uses ``anyio_backend``). Importing this
module must never fail (pytest loads it for every run), so aoz itself is imported
inside the fixtures.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from aoz._discovery.nsd import NamingDaemon
    from aoz._mesh.node import Node
    from aoz.testing import TestMesh

__all__ = ["NodeFactory", "aoz_mesh", "aoz_node", "aoz_node_factory", "aoz_nsd"]

# Settings that choose how a node finds peers; when none is given the node joins aoz_nsd.
_DISCOVERY_KEYS = frozenset(
    {"mode", "naming", "bind", "connect", "broker_pub", "broker_sub", "config"}
)


class NodeFactory(Protocol):
    """``await aoz_node_factory(**settings)`` -> a started :class:`aoz.Node`."""

    async def __call__(self, **settings: Any) -> Node: ...


async def _hold(cm: AbstractAsyncContextManager[Any], *, task_status: Any) -> None:
    async with cm as value:
        task_status.started(value)
        await _sleep_forever()


async def _sleep_forever() -> None:
    import anyio

    await anyio.sleep_forever()


class _Held:
    """Keeps an async context manager open in a :class:`aoz._mesh.tasks.TaskOwner`.

    Fixture setup and teardown may run in different tasks, while anyio cancel scopes
    must be entered and left by the same task: the owner's root task does both.
    """

    def __init__(self, name: str) -> None:
        from aoz._mesh.tasks import TaskOwner

        self._owner = TaskOwner(name)

    async def enter(self, cm: AbstractAsyncContextManager[Any]) -> Any:
        box: list[Any] = []

        async def setup(tg: Any) -> None:
            box.append(await tg.start(_hold, cm))

        await self._owner.start(setup)
        return box[0]

    async def exit(self) -> None:
        await self._owner.aclose()


def _uses_anyio(request: pytest.FixtureRequest) -> bool:
    return "anyio_backend" in request.fixturenames


def _check_backend(backend: Any) -> None:
    name = backend[0] if isinstance(backend, tuple) else backend
    if name != "asyncio":
        pytest.fail(
            f"aoz runs on asyncio, not {name!r}: give the test an anyio_backend fixture "
            "that returns 'asyncio'"
        )


def _asyncio_fixture(fn: Any) -> Any:
    """``pytest_asyncio.fixture`` on the test's loop, or a fixture saying what is missing."""
    try:
        import pytest_asyncio
    except ImportError:  # pragma: no cover - only without pytest-asyncio

        def missing() -> None:
            pytest.fail(
                "aoz's pytest fixtures need pytest-asyncio (pip install pytest-asyncio) "
                "or anyio's plugin with @pytest.mark.anyio"
            )

        return pytest.fixture(name=fn.__name__)(missing)
    return pytest_asyncio.fixture(fn, loop_scope="function")


# ------------------------------------------------------------------ implementations
async def _nsd() -> AsyncIterator[NamingDaemon]:
    from aoz._discovery.nsd import NamingDaemon

    held = _Held("aoz-fixture-nsd")
    nsd: NamingDaemon = await held.enter(NamingDaemon(host="127.0.0.1", port=0))
    try:
        yield nsd
    finally:
        await held.exit()


async def _factory(nsd: NamingDaemon) -> AsyncIterator[NodeFactory]:
    import aoz

    nodes: list[Node] = []

    async def make(**settings: Any) -> Node:
        if not _DISCOVERY_KEYS.intersection(settings):
            settings["naming"] = [nsd.endpoint]
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


@_asyncio_fixture
async def _aoz_nsd_asyncio() -> AsyncIterator[NamingDaemon]:
    async for nsd in _nsd():
        yield nsd


@pytest.fixture
async def _aoz_nsd_anyio(anyio_backend: Any) -> AsyncIterator[NamingDaemon]:
    _check_backend(anyio_backend)
    async for nsd in _nsd():
        yield nsd


@_asyncio_fixture
async def _aoz_factory_asyncio(aoz_nsd: NamingDaemon) -> AsyncIterator[NodeFactory]:
    async for make in _factory(aoz_nsd):
        yield make


@pytest.fixture
async def _aoz_factory_anyio(
    anyio_backend: Any, aoz_nsd: NamingDaemon
) -> AsyncIterator[NodeFactory]:
    _check_backend(anyio_backend)
    async for make in _factory(aoz_nsd):
        yield make


@_asyncio_fixture
async def _aoz_node_asyncio(aoz_node_factory: NodeFactory) -> Node:
    return await aoz_node_factory()


@pytest.fixture
async def _aoz_node_anyio(anyio_backend: Any, aoz_node_factory: NodeFactory) -> Node:
    return await aoz_node_factory()


# ------------------------------------------------------------------ public fixtures
@pytest.fixture
def aoz_nsd(request: pytest.FixtureRequest) -> NamingDaemon:
    """An embedded naming daemon on a free loopback port; ``.endpoint`` is its address."""
    name = "_aoz_nsd_anyio" if _uses_anyio(request) else "_aoz_nsd_asyncio"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


@pytest.fixture
def aoz_node_factory(request: pytest.FixtureRequest, aoz_nsd: NamingDaemon) -> NodeFactory:
    """Start nodes with ``await aoz_node_factory(**settings)``; all are closed at teardown.

    Nodes join ``aoz_nsd`` unless the settings pick their own discovery
    (``naming=``, ``bind=``/``connect=``, ``broker_pub=``/``broker_sub=``, ``mode=``).
    """
    name = "_aoz_factory_anyio" if _uses_anyio(request) else "_aoz_factory_asyncio"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


@pytest.fixture
def aoz_node(request: pytest.FixtureRequest, aoz_node_factory: NodeFactory) -> Node:
    """One node joined to ``aoz_nsd`` (closed at teardown by ``aoz_node_factory``)."""
    name = "_aoz_node_anyio" if _uses_anyio(request) else "_aoz_node_asyncio"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


@pytest.fixture
def aoz_mesh() -> Iterator[TestMesh]:
    """A :class:`aoz.testing.TestMesh` (an nsd and services on their own thread)."""
    from aoz.testing import TestMesh

    with TestMesh() as mesh:
        yield mesh
