"""eclipse-zenoh roles in peer mode on loopback.

Configured explicitly: ``mode=peer``, listen/connect on ``tcp/127.0.0.1:<port>``,
multicast scouting off. Publishers wait for ``matching_status`` before sending.

Two configurations of the publish/subscribe pair (the harness picks one):

- lossless (``congestion="block"``, ``handler="fifo"``): ``CongestionControl.BLOCK``
  on the publisher (a full transmission queue makes ``put`` wait) and the default FIFO
  channel on the subscriber, read with ``recv()`` (a full channel blocks zenoh's
  receiving thread, so the back-pressure reaches the publisher; links are reliable);
- dropping (the defaults): ``CongestionControl.DROP`` and a callback subscriber
  (zenoh-python's fast path), so loss is zenoh's default policy.

Queryables use callbacks.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from typing import Any

import zenoh

from ._common import (
    Receiver,
    emit,
    latency_summary,
    rss,
    run_role,
    wait_release_sync,
)

KEY = "bench/data"
RR_KEY = "bench/rr"


def _session(listen: list[int], connect: list[int]) -> zenoh.Session:
    conf = zenoh.Config()
    conf.insert_json5("mode", '"peer"')
    conf.insert_json5("listen/endpoints", json.dumps([f"tcp/127.0.0.1:{p}" for p in listen]))
    conf.insert_json5("connect/endpoints", json.dumps([f"tcp/127.0.0.1:{p}" for p in connect]))
    conf.insert_json5("scouting/multicast/enabled", "false")
    return zenoh.open(conf)


def _wait(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def pub(p: dict[str, Any], stall: bool = False) -> None:
    session = _session([p["port"]], [])
    try:
        block = p.get("congestion") == "block"
        publisher = session.declare_publisher(
            KEY,
            congestion_control=(
                zenoh.CongestionControl.BLOCK if block else zenoh.CongestionControl.DROP
            ),
        )
        emit("ready")
        matching = lambda: publisher.matching_status.matching  # type: ignore[attr-defined] # noqa: E731
        if not _wait(matching, p.get("wait", 10.0)):
            raise SystemExit("no zenoh subscriber matched in time")
        payload = b"x" * p["size"]
        n = p["n"]
        put = publisher.put
        rss_before = rss()
        peak = rss_before
        t0 = time.perf_counter()
        for i in range(n):
            put(payload)
            if stall and not i & 4095:
                peak = max(peak, rss())
        dt = time.perf_counter() - t0
        result: dict[str, Any] = {"sent": n, "send_s": dt}
        if stall:
            time.sleep(p.get("settle", 1.0))
            after = rss()
            result.update(rss_before=rss_before, rss_peak=max(peak, after), rss_after=after)
        emit("result", **result)
        wait_release_sync(p.get("release", 30.0))
    finally:
        session.close()  # type: ignore[no-untyped-call]


def sub(p: dict[str, Any], stall: bool = False) -> None:
    if p.get("handler") == "fifo" and not stall:
        _sub_fifo(p)
        return
    session = _session([], [p["port"]])
    try:
        n = p["n"]
        r = Receiver()
        unstall = threading.Event()
        release = p.get("release", 30.0)

        got, at = 0, 1

        def cb(sample: zenoh.Sample) -> None:
            nonlocal got, at
            if stall:  # a stalled application: the delivery thread blocks
                unstall.wait(release)
                return
            _data = sample.payload.to_bytes()
            got += 1
            r.n = got
            if got == at:  # the first, every MARK_EVERY-th and the n-th
                r.mark(got)
                at = r.next_mark(got, n)

        session.declare_subscriber(KEY, cb)
        emit("ready")
        if stall:
            wait_release_sync(release)
            unstall.set()
            emit("result")
            return
        _watch(r, n, p, lambda: None)
        emit("result", **r.result(n))
    finally:
        session.close()  # type: ignore[no-untyped-call]


def _watch(r: Receiver, n: int, p: dict[str, Any], stop: Any) -> None:
    """Until ``n`` arrived, the subscriber stays idle too long, or the deadline passes;
    then ``stop()``."""
    clock = time.perf_counter
    start = clock()
    wait, idle, deadline = p.get("wait", 10.0), p.get("idle", 0.5), p.get("deadline", 60.0)
    while r.n < n:
        time.sleep(0.05)
        now = clock()
        if now - start > deadline or (not r.n and now - start > wait):
            break
        if r.n and now - r.last > idle:
            break
    stop()


def _sub_fifo(p: dict[str, Any]) -> None:
    """The lossless subscriber: the default FIFO channel, read with ``recv()`` on this
    thread; a watchdog thread undeclares the subscriber (which ends ``recv``) when the
    count is reached, the subscriber is idle too long or the deadline passes."""
    session = _session([], [p["port"]])
    try:
        n = p["n"]
        r = Receiver()
        subscriber = session.declare_subscriber(KEY)
        handler = subscriber.handler
        emit("ready")
        stopped = threading.Event()

        def stop() -> None:
            if not stopped.is_set():
                stopped.set()
                subscriber.undeclare()  # type: ignore[no-untyped-call]

        watchdog = threading.Thread(target=_watch, args=(r, n, p, stop), daemon=True)
        watchdog.start()
        recv = handler.recv
        got, at = 0, 1
        try:
            while got < n:
                sample = recv()
                _data = sample.payload.to_bytes()
                got += 1
                if got == at:  # the first, every MARK_EVERY-th and the n-th
                    r.mark(got)
                    at = r.next_mark(got, n)
        except zenoh.ZError:
            pass  # undeclared by the watchdog: idle or past the deadline
        r.n = got
        result = r.result(n)
        stopped.set()
        watchdog.join(2.0)
        emit("result", **result)
    finally:
        session.close()  # type: ignore[no-untyped-call]


def rep(p: dict[str, Any]) -> None:
    session = _session([p["port"]], [])
    served = 0
    try:

        def cb(query: zenoh.Query) -> None:
            nonlocal served
            with query:
                query.reply(RR_KEY, query.payload.to_bytes() if query.payload else b"")
            served += 1

        session.declare_queryable(RR_KEY, cb)
        emit("ready")
        wait_release_sync(p.get("release", 60.0))
        emit("result", served=served)
    finally:
        session.close()  # type: ignore[no-untyped-call]


def req(p: dict[str, Any]) -> None:
    session = _session([], [p["port"]])
    try:
        emit("ready")
        payload = b"x" * p["size"]
        get = session.get

        def first_reply(timeout: float) -> bool:
            for reply in get(RR_KEY, payload=payload, timeout=timeout):
                return reply.ok is not None
            return False

        # No readiness signal for queryables across peers: retry until one answers.
        for _ in range(100):
            if first_reply(0.2):
                break
        else:
            raise SystemExit("zenoh queryable never answered")
        for _ in range(p.get("warmup", 200)):
            first_reply(2.0)
        clock = time.perf_counter_ns
        samples: list[int] = []
        t0 = time.perf_counter()
        for _ in range(p["n_seq"]):
            t = clock()
            if not first_reply(2.0):
                break
            samples.append(clock() - t)
        seq = latency_summary(samples, time.perf_counter() - t0)

        n, window = p["n_pipe"], p.get("window", 64)
        inflight: deque[Any] = deque()
        done = sent = 0
        t0 = time.perf_counter()
        while done < n:
            while sent < n and len(inflight) < window:
                inflight.append(get(RR_KEY, payload=payload, timeout=5.0))
                sent += 1
            handler = inflight.popleft()
            for _reply in handler:
                break
            done += 1
        pipe_s = time.perf_counter() - t0
        emit("result", **seq, pipelined=n, pipelined_rps=n / pipe_s)
    finally:
        session.close()  # type: ignore[no-untyped-call]


def idle(p: dict[str, Any]) -> None:
    base = rss()
    sizes: list[int] = []
    sessions: list[zenoh.Session] = []
    try:
        for _ in range(p["count"]):
            sessions.append(_session([0], []))
            time.sleep(p.get("settle", 0.3))
            sizes.append(rss())
        emit("result", base=base, rss=sizes)
    finally:
        for s in sessions:
            s.close()  # type: ignore[no-untyped-call]


def main(argv: list[str] | None = None) -> int:
    return run_role(argv, {"pub": pub, "sub": sub, "rep": rep, "req": req, "idle": idle})


if __name__ == "__main__":
    sys.exit(main())
