"""aoz.testing.TestMesh: an nsd and services that answer whatever the test's loop does."""

from __future__ import annotations

import pytest

import aoz
from aoz.testing import TestMesh


def test_a_plain_test_gets_a_mesh_with_services() -> None:
    with (
        TestMesh() as mesh,
        mesh.serve("SVC.echo", lambda req: req.decode()),
        mesh.node(program="client") as client,
    ):
        client.wait_for_interest("SVC.echo", timeout=10)
        assert client.request("SVC.echo", "hi", timeout=5).decode() == "hi"
    with pytest.raises(aoz.ClosedError), mesh.serve("SVC.late", lambda req: None):
        pass


async def test_the_mesh_answers_while_the_tests_loop_is_blocked(aoz_mesh: TestMesh) -> None:
    """What TestClient does to an async test: the loop is blocked in a sync call, and
    the mesh's nsd and service still answer a node on another thread."""
    with aoz_mesh.serve("SVC.t", lambda req: "pong"), aoz_mesh.node() as client:
        client.wait_for_interest("SVC.t", timeout=10)
        assert client.request("SVC.t", timeout=5).decode() == "pong"  # blocks this loop
