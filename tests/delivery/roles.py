"""Processes the delivery tests run: ``python -m tests.delivery.roles ROLE JSON``.

Each role prints JSON lines on stdout: ``{"event": "ready", ...}`` once usable, then
its results. They use aoz's public API only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio

import aoz
from aoz import PeerEvent


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


async def stdin_closed() -> None:
    """Returns when the test closes our stdin (the stop signal)."""
    await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)


async def peer_events(events: AsyncIterator[PeerEvent]) -> None:
    """Report a node's peer events (link events included) with their times."""
    async for ev in events:
        emit("peer", kind=ev.kind, uuid=ev.peer.uuid, t=time.monotonic())


async def sub(p: dict[str, Any]) -> None:
    """Count messages on a subject until one whose body is b"END"; report sequences.
    With ``nsd`` it joins that nsd's mesh (and reports its peer events), otherwise it
    connects to ``endpoint``; ``recover`` subscribes with ``recover=True``."""
    where = {"naming": [p["nsd"]]} if "nsd" in p else {"connect": [p["endpoint"]]}
    async with aoz.connect(**where, **p.get("settings", {})) as node:
        # opened first: the events of peers found from now on (the first link_up too)
        events = node.peer_events(links=True) if "nsd" in p else None
        sub = node.subscribe(p["subject"], recover=p.get("recover", False))
        received, first, last, gaps, in_order = 0, None, None, 0, True
        async with anyio.create_task_group() as tg:
            if events is not None:
                tg.start_soon(peer_events, events)
            emit("ready", uuid=node.uuid, endpoint=node.endpoint)
            if events is not None:  # who was known already (events before are not seen)
                emit("peers", uuids=[peer.uuid for peer in node.peers])
            async for msg in sub:
                received += 1
                if first is None:
                    first = msg.sequence
                elif last is not None and msg.sequence is not None and msg.sequence <= last:
                    in_order = False
                last = msg.sequence
                if msg.gap:
                    gaps += msg.gap
                    emit("gap", gap=msg.gap, t=time.monotonic(), sequence=msg.sequence)
                if msg.data == b"END":
                    break
            tg.cancel_scope.cancel()
        st = sub.statistics()
        emit("result", received=received, lost=st.lost, dropped=st.dropped, first=first,
             last=last, recovered=st.recovered, gaps=gaps, in_order=in_order,
             discovery=node.statistics().discovery if "nsd" in p else {})


async def pub(p: dict[str, Any]) -> None:
    """Publish ``payload_size`` bytes at ``rate`` msg/s until stdin closes, then END
    (repeated until the subscriber says it has it, by closing... see the test). With
    ``nsd`` it joins that nsd's mesh, otherwise it binds a loopback port (``settings``
    may name another)."""
    kwargs: dict[str, Any] = (
        {"naming": [p["nsd"]]} if "nsd" in p else {"bind": ["tcp://127.0.0.1:*"]}
    )
    kwargs.update(p.get("settings", {}))
    async with aoz.connect(**kwargs) as node:
        emit("ready", endpoint=node.endpoint, uuid=node.uuid)
        await node.wait_for_interest(p["subject"], timeout=30)
        emit("subscribed")
        body = b"x" * p.get("payload_size", 100)
        interval = 1.0 / p["rate"]
        sent = 0
        async with anyio.create_task_group() as tg:

            async def publish() -> None:
                nonlocal sent
                nxt = time.monotonic()
                while True:
                    await node.publish(p["subject"], body)
                    sent += 1
                    nxt += interval
                    await anyio.sleep(max(0.0, nxt - time.monotonic()))

            tg.start_soon(publish)
            await stdin_closed()
            tg.cancel_scope.cancel()
        for _ in range(50):  # until the subscriber has one (it exits then)
            await node.publish(p["subject"], b"END")
            sent += 1
            if not node.has_interest(p["subject"]):
                break
            await anyio.sleep(0.1)
        emit("result", sent=sent)


async def pubexit(p: dict[str, Any]) -> None:
    """Publish ``n`` messages as fast as allowed and exit at once (close flushes)."""
    settings = {"bind": ["tcp://127.0.0.1:*"], **p.get("settings", {})}
    async with aoz.connect(**settings) as node:
        emit("ready", endpoint=node.endpoint)
        await node.wait_for_interest(p["subject"], timeout=30)
        body = b"y" * p.get("payload_size", 100)
        for _ in range(p["n"]):
            await node.publish(p["subject"], body)
        emit("published", n=p["n"])


async def member(p: dict[str, Any]) -> None:
    """A naming-mode node that announces its uuid and idles until stdin closes."""
    async with aoz.connect(naming=[p["nsd"]], **p.get("settings", {})) as node:
        emit("ready", uuid=node.uuid, endpoint=node.endpoint, pid=os.getpid())
        await stdin_closed()


ROLES = {"sub": sub, "pub": pub, "pubexit": pubexit, "member": member}


def main() -> None:
    role, raw = sys.argv[1], sys.argv[2]
    anyio.run(ROLES[role], json.loads(raw))


if __name__ == "__main__":
    main()
