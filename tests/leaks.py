"""A leak check for node tests, in the spirit of pyzmq's test fixtures.

After each test in :data:`CHECKED` directories:

- **tasks**: every asyncio task of the test's loop has ended. Tasks that are already
  ending (cancelled, finishing their ``finally``) are awaited -- their completion is the
  readiness signal -- for at most :data:`SETTLE` seconds; any still running is a leak.
- **sockets**: no socket is left open in the process-wide ZeroMQ contexts (aoz's naming
  context, pyzmq's two ``instance()`` contexts). Those contexts are then terminated,
  which returns only once libzmq has really closed every socket of theirs: the
  readiness signal for the descriptor check (a node's own data context is terminated
  by the node's close, so a node left open shows up below).
- **file descriptors**: the process has no more open descriptors than before the test.

``tests/conftest.py`` imports :func:`leak_check` (autouse); it checks the tests of those
directories and passes the others through. A test that deliberately keeps something
past its end says so with ``@pytest.mark.leaks_ok("why")``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import zmq
import zmq.asyncio

from aoz._discovery.driver import flush_naming, naming_context

#: test directories (under tests/) whose tests run nodes and are checked
CHECKED = frozenset(
    {"node", "delivery", "discovery", "hotpath", "queues", "edge", "hostile", "omnm"}
)
SETTLE = 2.0  # seconds an ending task may take to finish


def checked(item: pytest.Item) -> bool:
    if item.get_closest_marker("leaks_ok") is not None:
        return False
    parts = item.path.parts
    return "tests" in parts and parts[parts.index("tests") + 1] in CHECKED


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def _fds() -> list[str]:
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            out.append(f"{name} -> {os.readlink(f'/proc/self/fd/{name}')}")
        except OSError:
            continue
    return sorted(out)


def end_shared_contexts() -> list[str]:
    """Terminate the process-wide contexts; the sockets a test had left open in them."""
    left: list[str] = []
    shared: list[tuple[str, zmq.Context[Any]]] = [
        ("aoz naming context", naming_context()),
        ("zmq.Context.instance()", zmq.Context.instance()),
        ("zmq.asyncio.Context.instance()", zmq.asyncio.Context.instance()),
    ]
    for name, ctx in shared:
        left += [f"{name}: {s!r}" for s in list(ctx._sockets) if not s.closed]
    flush_naming(0)
    for _, ctx in shared[1:]:
        ctx.destroy(linger=0)
    return left


_warm = False


def _warm_up() -> None:
    """Start what pyzmq starts once per process, lazily: the garbage collector thread,
    its context and its PUSH socket behind zero-copy sends (one such send does it). Not
    a leak: they live as long as pyzmq."""
    global _warm
    if _warm:
        return
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    try:
        pub.send(b"x" * 100_000, copy=False)  # no subscriber: dropped, the gc is told
    finally:
        pub.close(linger=0)
        ctx.term()
    _warm = True


@pytest.fixture
def no_leaked_sockets_or_fds(request: pytest.FixtureRequest) -> Iterator[None]:
    if not checked(request.node):
        yield
        return
    _warm_up()
    end_shared_contexts()  # start from none, so the baseline holds no lazily made context
    before = fd_count()
    before_fds = _fds()
    yield
    sockets = end_shared_contexts()
    assert not sockets, f"sockets left open by the test: {sockets}"
    after = fd_count()
    if after > before:
        new = sorted(set(_fds()) - set(before_fds))
        pytest.fail(f"{after - before} file descriptors leaked: {new}")


@pytest.fixture(autouse=True)
async def leak_check(
    request: pytest.FixtureRequest, no_leaked_sockets_or_fds: None
) -> AsyncIterator[None]:
    """The whole check (tasks here, sockets and descriptors in the fixture it uses)."""
    yield
    if not checked(request.node):
        return
    me = asyncio.current_task()
    pending = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    if pending:
        _, still = await asyncio.wait(pending, timeout=SETTLE)
        names = sorted(t.get_name() for t in still)
        assert not still, f"tasks still running {SETTLE} s after the test: {names}"
