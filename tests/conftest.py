"""Shared test helpers. The aoz pytest plugin (aoz.pytest_plugin) adds nsd/node fixtures."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

import aoz

# autouse: sockets, tasks and descriptors back to baseline after each node test
from .leaks import leak_check, no_leaked_sockets_or_fds

__all__ = ["leak_check", "no_leaked_sockets_or_fds"]


@pytest.fixture
async def static_pair() -> AsyncIterator[tuple[aoz.Node, aoz.Node]]:
    """Two static-mode nodes on loopback, each subscribed to the other's publisher."""
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(aoz.connect(bind=["tcp://127.0.0.1:*"]))
        b = await stack.enter_async_context(
            aoz.connect(bind=["tcp://127.0.0.1:*"], connect=[a.endpoint])
        )
        a.connect_endpoint(b.endpoint)
        yield a, b


def pytest_report_header(config: pytest.Config) -> str:
    # CI runs the suite on each hot path (see the Makefile); say which this run is on
    return f"aoz hot path: {aoz.hot_path()}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "leaks_ok(why): the leak check skips this test")
