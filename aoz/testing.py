"""A test mesh that no test can block: an nsd, nodes and services on a thread of its own.

FastAPI's ``TestClient`` (and any synchronous call in an ``async def`` test) blocks the
test's event loop while it waits for the app; an nsd or a service running on that loop
then cannot answer, and the app sees ``WaitTimeout`` or ``NoResponders``. A
:class:`TestMesh` runs its naming daemon and its services on an event loop in a
background thread (an anyio blocking portal), so it answers whatever the test's loop is
doing. It is FastStream's ``TestBroker`` idea for a brokerless mesh: real sockets, real
nsd, no mocks.

    with aoz.testing.TestMesh() as mesh:
        app = FastAPI(lifespan=aoz.fastapi.lifespan(**mesh.settings()))
        with mesh.serve("SVC.quote", lambda req: {"bid": 1.0}), TestClient(app) as client:
            assert client.get("/quote/IBM").json() == {"bid": 1.0}

It works the same in sync and async tests (``with`` in both; it never touches the
test's loop); the pytest plugin gives one per test as the ``aoz_mesh`` fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal

from ._discovery.nsd import NamingDaemon
from ._mesh.blocking import BlockingNode
from ._mesh.node import Node
from ._mesh.services import Handler, serve
from .errors import ClosedError

__all__ = ["TestMesh"]


class TestMesh:
    """An nsd on loopback with its own loop thread; nodes and services joined to it."""

    __test__ = False  # not a test class, whatever pytest's name rules say

    def __init__(self, *, host: str = "127.0.0.1") -> None:
        self._host = host
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._nsd_cm: AbstractContextManager[NamingDaemon] | None = None
        self._node_cm: AbstractContextManager[Node] | None = None
        self._node: Node | None = None
        self.endpoint = ""

    def __enter__(self) -> TestMesh:
        self._portal_cm = start_blocking_portal("asyncio")
        self._portal = self._portal_cm.__enter__()
        try:
            self._nsd_cm = self._portal.wrap_async_context_manager(
                NamingDaemon(host=self._host, port=0))
            self.endpoint = self._nsd_cm.__enter__().endpoint
        except BaseException:
            self._portal_cm.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._node_cm is not None:
                self._node_cm.__exit__(None, None, None)
            if self._nsd_cm is not None:
                self._nsd_cm.__exit__(None, None, None)
        finally:
            if self._portal_cm is not None:
                self._portal_cm.__exit__(None, None, None)
            self._portal = None

    def settings(self, **settings: Any) -> dict[str, Any]:
        """Keywords for :func:`aoz.connect` (or ``aoz.fastapi.lifespan``) that join this
        mesh: ``naming=[its nsd]`` plus ``settings``."""
        return {"naming": [self.endpoint], **settings}

    def node(self, **settings: Any) -> BlockingNode:
        """A :class:`~aoz.BlockingNode` joined to the mesh (close it, or use ``with``)."""
        return BlockingNode(**self.settings(**settings))

    @contextmanager
    def serve(self, name: str, handler: Handler, *, queue: str | None = None
              ) -> Iterator[None]:
        """Answer service ``name`` with ``handler`` from the mesh's own loop, until the
        block ends; returns once every node of the mesh could see the service."""
        portal = self._require_portal()
        if self._node is None:
            self._node_cm = portal.wrap_async_context_manager(
                Node(**self.settings(program="aoz-test-mesh")))
            self._node = self._node_cm.__enter__()
        with portal.wrap_async_context_manager(serve(self._node, name, handler, queue=queue)):
            yield

    def _require_portal(self) -> BlockingPortal:
        if self._portal is None:
            raise ClosedError("the test mesh is not running: use `with TestMesh() as mesh`")
        return self._portal
