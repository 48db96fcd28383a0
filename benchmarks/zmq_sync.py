"""Raw synchronous pyzmq: the practical limit for Python on ZeroMQ.

PUB/SUB uses an XPUB (to see the subscription arrive before sending) and a SUB, with
aoz's high-water marks; with ``nodrop`` (the lossless runs) the XPUB has
``XPUB_NODROP`` and the blocking ``send`` waits for room instead of dropping at the HWM.
Request/reply is DEALER/ROUTER.
Frames are laid out as on aoz's wire.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any

import zmq

from ._common import (
    RR_SUBJECT,
    SUBJECT,
    Receiver,
    emit,
    latency_summary,
    raw_handle,
    rss,
    run_role,
    wait_release_sync,
    wire_publish,
    wire_reply,
    wire_request,
)


def _xpub(ctx: zmq.Context[zmq.Socket[bytes]], p: dict[str, Any]) -> tuple[zmq.Socket[bytes], str]:
    pub = ctx.socket(zmq.XPUB)
    pub.setsockopt(zmq.SNDHWM, p.get("hwm", 100_000))
    pub.setsockopt(zmq.LINGER, 0)
    if p.get("nodrop", False):
        pub.setsockopt(zmq.XPUB_NODROP, 1)  # a blocking send then waits for room
    pub.bind("tcp://127.0.0.1:*")
    return pub, pub.getsockopt_string(zmq.LAST_ENDPOINT)


def _wait_subscription(pub: zmq.Socket[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pub.poll(100, zmq.POLLIN) and pub.recv()[:1] == b"\x01":
            return
    raise SystemExit("no subscriber reached the publisher in time")


def pub(p: dict[str, Any], stall: bool = False) -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock, endpoint = _xpub(ctx, p)
    try:
        emit("ready", endpoint=endpoint)
        _wait_subscription(sock, p.get("wait", 10.0))
        frame = wire_publish(SUBJECT, b"x" * p["size"])
        n = p["n"]
        send = sock.send
        rss_before = rss()
        peak = rss_before
        t0 = time.perf_counter()
        for i in range(n):
            send(frame)
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
        sock.close(0)
        ctx.term()


def sub(p: dict[str, Any], stall: bool = False) -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, p.get("hwm", 100_000))
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, SUBJECT.encode() + b"\0")
    sock.connect(p["endpoint"])
    try:
        emit("ready")
        if stall:
            wait_release_sync(p.get("release", 30.0))
            emit("result")
            return
        n = p["n"]
        r = Receiver()
        sock.setsockopt(zmq.RCVTIMEO, int(p.get("wait", 10.0) * 1000))
        recv = sock.recv
        clock = time.perf_counter
        deadline = clock() + p.get("deadline", 60.0)
        try:
            frame = recv()
            got = 1
            r.mark(got)
            at = r.next_mark(got, n)
            sock.setsockopt(zmq.RCVTIMEO, int(p.get("idle", 0.5) * 1000))
            while got < n:
                frame = recv()
                nul = frame.find(b"\0")
                _payload = frame[nul + 3 :]
                got += 1
                if got == at:  # every MARK_EVERY-th and the n-th
                    r.mark(got)
                    at = r.next_mark(got, n)
                    if r.last > deadline:
                        break
        except zmq.Again:
            r.n = got
        emit("result", **r.result(n))
    finally:
        sock.close(0)
        ctx.term()


def rep(p: dict[str, Any]) -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind("tcp://127.0.0.1:*")
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    stdin = sys.stdin.fileno()
    poller.register(stdin, zmq.POLLIN)
    try:
        emit("ready", endpoint=sock.getsockopt_string(zmq.LAST_ENDPOINT))
        deadline = time.monotonic() + p.get("release", 60.0)
        served = 0
        while time.monotonic() < deadline:
            events = dict(poller.poll(200))
            if stdin in events:
                break  # harness closed stdin: done
            if sock in events:
                while True:
                    try:
                        ident, frame = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    nul = frame.find(b"\0")
                    sock.send_multipart(
                        [ident, wire_reply(frame[nul + 2 : nul + 62], frame[nul + 64 :])]
                    )
                    served += 1
        emit("result", served=served)
    finally:
        sock.close(0)
        ctx.term()


def req(p: dict[str, Any]) -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 2000)
    sock.connect(p["endpoint"])
    payload = b"x" * p["size"]
    serial = 0

    def frame() -> bytes:
        nonlocal serial
        serial += 1
        return wire_request(RR_SUBJECT, raw_handle(serial), payload)

    try:
        emit("ready")
        for _ in range(p.get("warmup", 200)):
            sock.send(frame())
            sock.recv()
        clock = time.perf_counter_ns
        samples: list[int] = []
        t0 = time.perf_counter()
        for _ in range(p["n_seq"]):
            t = clock()
            sock.send(frame())
            sock.recv()
            samples.append(clock() - t)
        seq = latency_summary(samples, time.perf_counter() - t0)
        n, window = p["n_pipe"], p.get("window", 64)
        inflight: deque[int] = deque()
        done = sent = 0
        t0 = time.perf_counter()
        while done < n:
            while sent < n and len(inflight) < window:
                sock.send(frame())
                inflight.append(sent)
                sent += 1
            sock.recv()
            inflight.popleft()
            done += 1
        pipe_s = time.perf_counter() - t0
        emit("result", **seq, pipelined=n, pipelined_rps=n / pipe_s)
    finally:
        sock.close(0)
        ctx.term()


def idle(p: dict[str, Any]) -> None:
    """RSS of a process holding ``count`` idle "nodes" (an XPUB and a SUB each)."""
    base = rss()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    socks: list[zmq.Socket[bytes]] = []
    sizes: list[int] = []
    try:
        for _ in range(p["count"]):
            x = ctx.socket(zmq.XPUB)
            x.bind("tcp://127.0.0.1:*")
            s = ctx.socket(zmq.SUB)
            s.connect(x.getsockopt_string(zmq.LAST_ENDPOINT))
            socks += [x, s]
            time.sleep(p.get("settle", 0.3))
            sizes.append(rss())
        emit("result", base=base, rss=sizes)
    finally:
        for s in socks:
            s.close(0)
        ctx.term()


def main(argv: list[str] | None = None) -> int:
    return run_role(argv, {"pub": pub, "sub": sub, "rep": rep, "req": req, "idle": idle})


if __name__ == "__main__":
    sys.exit(main())
