"""Shared test helpers, and how `make test` splits the suite (see the Makefile).

The aoz pytest plugin (aoz.pytest_plugin) adds the nsd/node fixtures.

Markers given here, by where a test lives or what it uses, so a new test lands in the
right set without anyone listing it:

- ``twin``: every test under one of ``TWIN_DIRS``, or in a module that says
  ``pytestmark = pytest.mark.twin``. These run what exists twice, compiled and pure
  Python, chosen by ``AOZ_PURE_PYTHON``: a node's data plane in this process (the
  receive drain, the sender and the publish entries: ``aoz/_mesh/_speedups.pyx`` and
  ``aoz/_mesh/_hotpath.py``) and the omnm codec (``aoz/omnm/_fast.pyx`` and
  ``aoz/omnm/_codec.py``). `make test` runs them a second time with
  ``AOZ_PURE_PYTHON=1``; every other test runs the same Python code on either path
  (``aoz/_protocol/``, ``aoz/_mesh/message.py`` and ``aoz/_mesh/subscription.py`` are one source for
  both; only what the data plane feeds them differs), so running it twice would measure
  nothing new.
- ``spark``: every test using the ``spark`` or ``spark_cluster`` fixture
  (tests/pipeline/conftest.py), besides the modules marked by hand. `make test` runs
  these in a pytest process of their own, one after another, beside the rest of the
  suite on pytest-xdist workers. Their JVMs (a SparkSession, a standalone cluster, the
  demo's own) then never compete with each other for the two cores (measured on a
  loaded machine: run side by side, the cluster test's drivers time out and the demo
  gets no bar back), and the session fixtures start once. The tests that start JVMs of
  their own run first, so the shared SparkSession starts only when they are done.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from hypothesis import settings

import aoz

# autouse: sockets, tasks and descriptors back to baseline after each node test
from .leaks import leak_check, no_leaked_sockets_or_fds

__all__ = ["leak_check", "no_leaked_sockets_or_fds"]

TESTS = Path(__file__).resolve().parent

# Hypothesis's per-example deadline (200 ms) is a speed limit: tests check behaviour, and
# beside the parallel suite on a loaded machine one example took 277 ms (make test).
settings.register_profile("aoz", deadline=None)
settings.load_profile("aoz")

#: the directories whose tests all exercise the data plane's hot path (see above)
# the data plane's twins (aoz/_mesh/_hotpath.py, aoz/_mesh/_speedups.pyx) and omnm's
# (aoz/omnm/_codec.py, aoz/omnm/_fast.pyx) both switch with AOZ_PURE_PYTHON: tests of
# either run on both
TWIN_DIRS = frozenset({"hotpath", "node", "delivery", "queues", "faults", "omnm"})


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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "twin: runs the data plane's hot path; `make test` runs it on both twins "
        "(set by tests/conftest.py for TWIN_DIRS)",
    )
    config.addinivalue_line("markers", "leaks_ok(why): the leak check skips this test")


SPARK_FIXTURES = frozenset({"spark", "spark_cluster"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank: dict[pytest.Item, int] = {}
    for item in items:
        try:
            top = item.path.resolve().relative_to(TESTS).parts[0]
        except ValueError:  # a test outside tests/ (a nested pytest run's own project)
            continue
        if top in TWIN_DIRS:
            item.add_marker(pytest.mark.twin)
        fixtures = getattr(item, "fixturenames", ())
        if not SPARK_FIXTURES.isdisjoint(fixtures):
            item.add_marker(pytest.mark.spark)
        if item.get_closest_marker("spark") is not None:
            rank[item] = 1 if "spark" in fixtures else 0  # the shared session last
    items.sort(key=lambda item: rank.get(item, 2))  # stable: collection order within each


def pytest_report_header(config: pytest.Config) -> str:
    # CI runs the suite on each hot path (see the Makefile); say which this run is on
    return f"aoz hot path: {aoz.hot_path()}; omnm codec: {aoz.omnm.implementation()}"

