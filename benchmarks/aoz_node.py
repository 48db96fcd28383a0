"""aoz roles: static-mode nodes on loopback, the public API only.

Publishers use ``await node.publish`` after ``node.wait_for_interest``; subscribers use
``async for msg in sub`` (``mode="iter"``) or ``sub.batches()`` (``mode="batch"``) and read
``msg.data``; request/reply uses ``node.request`` and ``msg.respond``. ``settings`` are
:class:`aoz.Settings` fields: the harness passes ``send_policy="block"`` and
``overflow="block"`` for a lossless pair, nothing for aoz's (dropping) defaults.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import aoz

from ._common import (
    RR_SUBJECT,
    SUBJECT,
    Receiver,
    emit,
    measure_requests,
    rss,
    run_role,
    wait_release,
    wait_release_sync,
)

ANY = "tcp://127.0.0.1:*"


async def pub(p: dict[str, Any], stall: bool = False) -> None:
    # "bind": another data endpoint (benchmarks.transport compares ipc:// with tcp)
    async with aoz.connect(bind=[p.get("bind", ANY)], **p.get("settings", {})) as node:
        emit("ready", endpoint=node.endpoint)
        await node.wait_for_interest(SUBJECT, timeout=p.get("wait", 10.0))
        payload = b"x" * p["size"]
        n = p["n"]
        publish = node.publish
        rss_before = rss()
        peak = rss_before
        c0, t0 = time.process_time(), time.perf_counter()
        for i in range(n):
            await publish(SUBJECT, payload)
            if stall and not i & 4095:
                peak = max(peak, rss())
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
        blocked = node.statistics().blocked_sends
        result: dict[str, Any] = {"sent": n, "send_s": dt, "send_cpu_s": cpu,
                                  "cpu_s": cpu, "blocked_sends": blocked}
        if stall:
            await asyncio.sleep(p.get("settle", 1.0))
            after = rss()
            result.update(rss_before=rss_before, rss_peak=max(peak, after), rss_after=after)
        emit("result", **result)
        await wait_release(p.get("release", 30.0))


async def sub(p: dict[str, Any], stall: bool = False) -> None:
    async with aoz.connect(connect=[p["endpoint"]], **p.get("settings", {})) as node:
        subscription = node.subscribe(p.get("pattern", SUBJECT))  # exact, or a wildcard
        emit("ready")
        if stall:
            # A stalled process: the event loop itself is blocked, nothing is read.
            wait_release_sync(p.get("release", 30.0))
            emit("result")
            return
        n = p["n"]
        r = Receiver()

        async def consume_iter() -> None:
            got, at = 0, 1
            try:
                async for msg in subscription:
                    _data = msg.data
                    got += 1
                    if got == at:  # the first, every MARK_EVERY-th and the n-th
                        r.mark(got)
                        if got >= n:
                            return
                        at = r.next_mark(got, n)
            finally:
                r.n = got

        async def consume_batch() -> None:
            async for batch in subscription.batches(p.get("batch", 1024)):
                for msg in batch:
                    _data = msg.data
                r.mark(r.n + len(batch))
                if r.n >= n:
                    return

        marks: list[float] = []  # the time of every (n // p["marks"])-th message
        every = n // p["marks"] if p.get("marks") else 0

        async def consume_marked() -> None:
            due = every
            got = 0
            try:
                async for msg in subscription:
                    _data = msg.data
                    got += 1
                    if got == 1 or got == due or got >= n:  # the clock only at marks
                        r.mark(got)
                        if got == due:
                            marks.append(r.last)
                            due += every
                        if got >= n:
                            return
            finally:
                r.n = got

        consumer = (consume_batch if p.get("mode") == "batch" else
                    consume_marked if every else consume_iter)
        task = asyncio.create_task(consumer())
        cpu0 = time.process_time()  # the process's CPU while it receives (and waits)
        await _watch(task, r, p)
        cpu = time.process_time() - cpu0
        stats = subscription.statistics()
        node_stats = node.statistics()
        # Where a shortfall stopped, if there is one: frames read off the SUB, sequence
        # gaps (lost upstream), messages still queued for the consumer.
        emit("result", **r.result(n, dropped_queue=stats.dropped,
                                  messages_in=node_stats.messages_in,
                                  lost_in=node_stats.lost_in, pending=stats.pending,
                                  cpu_s=cpu, **({"marks": marks} if every else {})))


async def _watch(task: asyncio.Task[None], r: Receiver, p: dict[str, Any]) -> None:
    """Let ``task`` run until it finishes, stays idle too long, or the deadline passes."""
    start = time.perf_counter()
    wait, idle, deadline = p.get("wait", 10.0), p.get("idle", 0.5), p.get("deadline", 60.0)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=0.05)
            now = time.perf_counter()
            if now - start > deadline:
                break
            if r.n == 0 and now - start > wait:
                break
            if r.n and now - r.last > idle:
                break
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def rep(p: dict[str, Any]) -> None:
    async with aoz.connect(bind=[ANY], connect=[p["peer"]]) as node:
        served = 0

        async def serve() -> None:
            nonlocal served
            async for msg in node.subscribe(RR_SUBJECT):
                await msg.respond(msg.data)
                served += 1

        task = asyncio.create_task(serve())
        emit("ready", endpoint=node.endpoint)
        await wait_release(p.get("release", 60.0))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        emit("result", served=served)


async def req(p: dict[str, Any]) -> None:
    async with aoz.connect(bind=[p["bind"]], connect=[p["endpoint"]]) as node:
        emit("ready")
        await node.wait_for_interest(RR_SUBJECT, timeout=p.get("wait", 10.0))
        payload = b"x" * p["size"]
        request = node.request
        # The reply path (our SUB -> their PUB) has no signal: retry until one comes back.
        for _ in range(100):
            try:
                await request(RR_SUBJECT, payload, timeout=0.1)
                break
            except aoz.RequestTimeout:
                continue
        else:
            raise SystemExit("replier never answered")
        await measure_requests(request, RR_SUBJECT, payload, p)


async def idle(p: dict[str, Any]) -> None:
    base = rss()
    sizes: list[int] = []
    nodes: list[aoz.Node] = []
    try:
        for _ in range(p["count"]):
            node = aoz.connect(bind=[ANY])
            await node.start()
            nodes.append(node)
            await asyncio.sleep(p.get("settle", 0.3))
            sizes.append(rss())
        emit("result", base=base, rss=sizes)
    finally:
        for node in nodes:
            await node.aclose()


def main(argv: list[str] | None = None) -> int:
    return run_role(argv, {"pub": pub, "sub": sub, "rep": rep, "req": req, "idle": idle})


if __name__ == "__main__":
    sys.exit(main())
