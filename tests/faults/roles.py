"""Processes the fault tests run: ``python -m tests.faults.roles ROLE JSON``.

Each role prints JSON lines on stdout (``{"event": "ready", ...}`` first) and uses
aoz's public API only.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

import aoz


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


async def widesub(p: dict[str, Any]) -> None:
    """A ``>`` subscriber that answers ``SYNC`` requests (flow control for the test)
    and reports received/lost/dropped and the numbers it saw, until ``SYNC`` says END."""
    async with aoz.connect(bind=["tcp://127.0.0.1:*"], connect=[p["endpoint"]]) as node:
        everything = node.subscribe(">")
        sync = node.subscribe("SYNC")
        emit("ready", endpoint=node.endpoint)
        received = 0
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        async with anyio.create_task_group() as tg:

            async def answer() -> None:
                async for msg in sync:
                    await msg.respond(b"")
                    if msg.data == b"END":
                        tg.cancel_scope.cancel()

            tg.start_soon(answer)
            async for msg in everything:
                if msg.kind is not aoz.Kind.PUBLISH:
                    continue
                received += 1
                seq = msg.sequence or 0
                first.setdefault(msg.subject, seq)
                last[msg.subject] = seq
        st = everything.statistics()
        emit("result", received=received, lost=st.lost, dropped=st.dropped,
             subjects=len(last), first_not_1=sum(1 for v in first.values() if v != 1),
             last_sum=sum(last.values()),
             restarted=getattr(node.statistics(), "streams_restarted", None))


ROLES = {"widesub": widesub}


def main() -> None:
    anyio.run(ROLES[sys.argv[1]], json.loads(sys.argv[2]))


if __name__ == "__main__":
    main()
