"""queues keeps no registry of nodes: each node's queue table lives in its interest set,
so a node that is gone takes its table along."""

from __future__ import annotations

import gc
import weakref

from aoz import connect, queues


async def test_a_closed_node_does_not_stay_alive_in_queues() -> None:
    async with connect(bind=["tcp://127.0.0.1:*"]) as node:
        assert queues.members(node, "Q.subject") == {}
        assert not [v for v in vars(queues).values() if isinstance(v, dict) and node in v]
        ref = weakref.ref(node)
    del node
    gc.collect()
    assert ref() is None
