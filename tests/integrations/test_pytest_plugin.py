"""How a user of aoz tests a service with the fixtures of aoz's pytest plugin.

Nothing is imported for the fixtures: installing aoz registers them (``aoz_nsd``,
``aoz_node_factory``, ``aoz_node``).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import msgspec

import aoz
from aoz.pytest_plugin import NodeFactory

from .conftest import STEP, clean_pytest_env


class Quote(msgspec.Struct):
    symbol: str
    bid: float


async def quote_service(node: aoz.Node, prices: dict[str, float]) -> None:
    """The service under test: answers SVC.quote requests from a price table."""
    async with node.subscribe("SVC.quote") as requests:
        async for req in requests:
            symbol = req.decode()
            # a client that has just joined may not yet subscribe to its inbox here
            assert req.reply is not None
            await node.wait_for_interest(req.reply, timeout=STEP)
            await req.respond(Quote(symbol, prices[symbol]))


async def test_quote_service(aoz_node_factory: NodeFactory) -> None:
    import anyio

    service = await aoz_node_factory(program="quotes")
    client = await aoz_node_factory(program="client")
    async with anyio.create_task_group() as tg:
        tg.start_soon(quote_service, service, {"IBM": 141.5})
        await client.wait_for_interest("SVC.quote", timeout=STEP)
        reply = await client.request("SVC.quote", "IBM", timeout=STEP)
        assert reply.decode(Quote) == Quote("IBM", 141.5)
        tg.cancel_scope.cancel()


async def test_nodes_meet_through_the_fixture_nsd(
    aoz_nsd: aoz.NamingDaemon, aoz_node: aoz.Node, aoz_node_factory: NodeFactory
) -> None:
    assert aoz_node.settings.naming == [aoz_nsd.endpoint]
    other = await aoz_node_factory(program="other")
    peer = await aoz_node.wait_for_peer(other.uuid, timeout=STEP)
    assert peer.program == "other"


async def test_factory_settings_choose_static_mode(aoz_node_factory: NodeFactory) -> None:
    a = await aoz_node_factory(bind=["tcp://127.0.0.1:*"])
    b = await aoz_node_factory(connect=[a.endpoint])
    assert (a.settings.mode, b.settings.mode) == ("static", "static")
    async with b.subscribe("greet") as sub:
        await a.wait_for_interest("greet", timeout=STEP)
        await a.publish("greet", "hi")
        assert (await sub.next(timeout=STEP)).decode() == "hi"


_USER_TESTS = """
import aoz

made = []

async def test_uses_the_fixtures(aoz_node, aoz_node_factory):
    made.append(aoz_node)
    made.append(await aoz_node_factory(program="second"))
    assert not any(node.closed for node in made)

def test_then_they_are_closed():
    assert len(made) == 2 and all(node.closed for node in made)
"""


async def test_plugin_loads_in_a_fresh_project_and_closes_nodes(tmp_path: Path) -> None:
    """A project that only installed aoz gets the fixtures through the entry point."""
    (tmp_path / "test_user.py").write_text(_USER_TESTS)
    env = clean_pytest_env()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
        "-o", "asyncio_mode=auto", "test_user.py",
        cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with asyncio.timeout(60):
            out, _ = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, out.decode()
    assert b"2 passed" in out


_ROUND_TRIP = """
import pytest

import aoz


async def _round_trip(aoz_node, aoz_node_factory):
    other = await aoz_node_factory(program="peer")
    async with other.subscribe("PLUG.x") as sub:
        await aoz_node.wait_for_interest("PLUG.x", timeout=20)
        await aoz_node.publish("PLUG.x", "hi")
        assert (await sub.next(timeout=20)).decode() == "hi"  # fails across loops
"""

_ANYIO_TESTS = (
    _ROUND_TRIP
    + """

@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_anyio(aoz_node, aoz_node_factory):
    await _round_trip(aoz_node, aoz_node_factory)


@pytest.mark.anyio
async def test_anyio_again(aoz_node, aoz_node_factory):  # a fresh loop, fresh fixtures
    await _round_trip(aoz_node, aoz_node_factory)
"""
)

_ASYNCIO_TESTS = (
    _ROUND_TRIP
    + """

@pytest.mark.asyncio
async def test_asyncio(aoz_node, aoz_node_factory):
    await _round_trip(aoz_node, aoz_node_factory)
"""
)

_INI = """[pytest]
asyncio_default_fixture_loop_scope = function
"""


async def _pytest_in(project: Path, *args: str) -> tuple[int, str]:
    env = clean_pytest_env()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
        "-W", "error::pytest.PytestDeprecationWarning", *args,
        cwd=project, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with asyncio.timeout(90):
            out, _ = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_plugin_under_anyio_alone(tmp_path: Path) -> None:
    """anyio's plugin only (pytest-asyncio disabled): @pytest.mark.anyio tests."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_user.py").write_text(_ANYIO_TESTS)
    rc, out = await _pytest_in(tmp_path, "-p", "no:asyncio")
    assert rc == 0, out
    assert "2 passed" in out and "warning" not in out.lower()


async def test_plugin_under_pytest_asyncio_alone(tmp_path: Path) -> None:
    """pytest-asyncio only (anyio's plugin disabled), strict mode and its marker."""
    (tmp_path / "pytest.ini").write_text(_INI + "asyncio_mode = strict\n")
    (tmp_path / "test_user.py").write_text(_ASYNCIO_TESTS)
    rc, out = await _pytest_in(tmp_path, "-p", "no:anyio")
    assert rc == 0, out
    assert "1 passed" in out and "warning" not in out.lower()


async def test_plugin_under_both_plugins_in_strict_mode(tmp_path: Path) -> None:
    """Both plugins in one project (pytest-asyncio strict, as anyio documents)."""
    (tmp_path / "pytest.ini").write_text(_INI + "asyncio_mode = strict\n")
    (tmp_path / "test_anyio.py").write_text(_ANYIO_TESTS)
    (tmp_path / "test_asyncio.py").write_text(_ASYNCIO_TESTS)
    rc, out = await _pytest_in(tmp_path)
    assert rc == 0, out
    assert "3 passed" in out and "warning" not in out.lower()
