"""nats.py roles against a nats-server the harness starts on 127.0.0.1 (random port).

Subscribers use a callback (nats.py's fast path); requests use ``nc.request``; defaults
everywhere (pending limits, flusher), so loss is nats' default slow-consumer policy.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import nats

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


async def _connect(p: dict[str, Any]) -> Any:
    async def quiet(_exc: Exception) -> None:
        return None

    return await nats.connect(p["url"], allow_reconnect=False, connect_timeout=5, error_cb=quiet)


async def pub(p: dict[str, Any], stall: bool = False) -> None:
    nc = await _connect(p)
    try:
        emit("ready")
        payload = b"x" * p["size"]
        n = p["n"]
        publish = nc.publish
        rss_before = rss()
        peak = rss_before
        t0 = time.perf_counter()
        for i in range(n):
            await publish(SUBJECT, payload)
            if stall and not i & 4095:
                peak = max(peak, rss())
        await nc.flush(timeout=30)
        dt = time.perf_counter() - t0
        result: dict[str, Any] = {"sent": n, "send_s": dt}
        if stall:
            await asyncio.sleep(p.get("settle", 1.0))
            after = rss()
            result.update(rss_before=rss_before, rss_peak=max(peak, after), rss_after=after)
        emit("result", **result)
        await wait_release(p.get("release", 30.0))
    finally:
        await nc.close()


async def sub(p: dict[str, Any], stall: bool = False) -> None:
    nc = await _connect(p)
    try:
        n = p["n"]
        r = Receiver()
        clock = time.perf_counter

        got, at = 0, 1

        async def cb(msg: Any) -> None:
            nonlocal got, at
            _data = msg.data
            got += 1
            r.n = got
            if got == at:  # the first, every MARK_EVERY-th and the n-th
                r.mark(got)
                at = r.next_mark(got, n)

        await nc.subscribe(SUBJECT, cb=cb)
        await nc.flush(timeout=10)  # the server has our subscription before we say ready
        emit("ready")
        if stall:
            wait_release_sync(p.get("release", 30.0))
            emit("result")
            return
        start = clock()
        wait, idle, deadline = p.get("wait", 10.0), p.get("idle", 0.5), p.get("deadline", 60.0)
        while r.n < n:
            await asyncio.sleep(0.05)
            now = clock()
            if now - start > deadline or (not r.n and now - start > wait):
                break
            if r.n and now - r.last > idle:
                break
        emit("result", **r.result(n))
    finally:
        await nc.close()


async def rep(p: dict[str, Any]) -> None:
    nc = await _connect(p)
    served = 0
    try:

        async def cb(msg: Any) -> None:
            nonlocal served
            await msg.respond(msg.data)
            served += 1

        await nc.subscribe(RR_SUBJECT, cb=cb)
        await nc.flush(timeout=10)
        emit("ready")
        await wait_release(p.get("release", 60.0))
        emit("result", served=served)
    finally:
        await nc.close()


async def req(p: dict[str, Any]) -> None:
    nc = await _connect(p)
    try:
        emit("ready")
        payload = b"x" * p["size"]
        request = nc.request
        await measure_requests(request, RR_SUBJECT, payload, p)
    finally:
        await nc.close()


async def idle(p: dict[str, Any]) -> None:
    base = rss()
    sizes: list[int] = []
    conns: list[Any] = []
    try:
        for _ in range(p["count"]):
            conns.append(await _connect(p))
            await asyncio.sleep(p.get("settle", 0.3))
            sizes.append(rss())
        emit("result", base=base, rss=sizes)
    finally:
        for nc in conns:
            await nc.close()


def main(argv: list[str] | None = None) -> int:
    return run_role(argv, {"pub": pub, "sub": sub, "rep": rep, "req": req, "idle": idle})


if __name__ == "__main__":
    sys.exit(main())
