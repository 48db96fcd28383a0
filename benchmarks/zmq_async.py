"""Raw zmq.asyncio with a batched drain: ``await poll()``, then ``recv(NOBLOCK)`` until
``Again``. Whatever aoz costs on top of this is aoz's own cost.

Same topology as aoz: PUB/SUB both ways (request/reply too), single frames laid out as
on aoz's wire, aoz's high-water marks.

Lossless publisher (``nodrop``): ``XPUB_NODROP``, so a full subscriber pipe makes the
send fail with ``Again`` instead of dropping; the frame is then retried when the socket's
fd fires (a pipe drained), with the same 50 ms backstop aoz's ``send_policy="block"``
uses. pyzmq's own ``await sock.send()`` cannot wait here: an XPUB always reports POLLOUT,
so the awaited send raises ``Again``. Without ``nodrop`` the XPUB drops at the HWM.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from typing import Any

import zmq
import zmq.asyncio

from ._common import (
    RAW_UUID,
    RR_SUBJECT,
    SUBJECT,
    Receiver,
    emit,
    latency_summary,
    raw_handle,
    run_role,
    wait_release,
    wire_publish,
    wire_reply,
    wire_request,
)

_YIELD_EVERY = 256  # same as aoz's publish(): a tight loop yields now and then
_ROOM_BACKSTOP = 0.05  # seconds; as aoz's send path: a missed fd edge costs at most this


def _sync(sock: zmq.asyncio.Socket) -> zmq.Socket[bytes]:
    """The same socket without the future wrapper, for NOBLOCK calls."""
    return zmq.Socket.shadow(sock.underlying)


async def _readable(sock: zmq.asyncio.Socket, timeout_ms: int) -> bool:
    """``await poll()``: true when ``sock`` has a message to read."""
    events = await sock.poll(timeout_ms, zmq.POLLIN)  # type: ignore[call-arg]
    return bool(events)


async def _wait_subscription(xpub: zmq.asyncio.Socket, timeout: float, frame: bytes) -> None:
    """Until a subscription that lets ``frame`` through reaches the XPUB."""
    async with asyncio.timeout(timeout):
        while True:
            msg = await xpub.recv()
            if msg[:1] == b"\x01" and frame.startswith(msg[1:]):
                return


async def _send_nodrop(sock: zmq.asyncio.Socket, frame: bytes, n: int) -> int:
    """Send ``frame`` ``n`` times through an XPUB_NODROP socket, waiting for room when a
    subscriber's pipe is full; returns how many sends had to wait."""
    raw = _sync(sock)
    send = raw.send
    noblock = zmq.NOBLOCK
    loop = asyncio.get_running_loop()
    room = asyncio.Event()
    fd = raw.FD
    # Replaces zmq.asyncio's own reader of this fd while we send (no future is pending).
    loop.add_reader(fd, room.set)
    blocked = 0
    try:
        for i in range(n):
            try:
                send(frame, noblock)
            except zmq.Again:
                blocked += 1
                while True:
                    room.clear()
                    try:
                        send(frame, noblock)
                        break
                    except zmq.Again:
                        pass
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(_ROOM_BACKSTOP):
                            await room.wait()
            if not i % _YIELD_EVERY:
                await asyncio.sleep(0)
    finally:
        loop.remove_reader(fd)
    return blocked


async def pub(p: dict[str, Any]) -> None:
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.XPUB)
    sock.setsockopt(zmq.SNDHWM, p.get("hwm", 100_000))
    sock.setsockopt(zmq.LINGER, 0)
    nodrop = bool(p.get("nodrop", False))
    if nodrop:
        sock.setsockopt(zmq.XPUB_NODROP, 1)
    sock.bind("tcp://127.0.0.1:*")
    try:
        emit("ready", endpoint=sock.getsockopt_string(zmq.LAST_ENDPOINT))
        frame = wire_publish(SUBJECT, b"x" * p["size"])
        await _wait_subscription(sock, p.get("wait", 10.0), frame)
        n = p["n"]
        blocked = 0
        c0, t0 = time.process_time(), time.perf_counter()
        if nodrop:
            blocked = await _send_nodrop(sock, frame, n)
        else:
            send = _sync(sock).send
            noblock = zmq.NOBLOCK
            for i in range(n):
                send(frame, noblock)
                if not i % _YIELD_EVERY:
                    await asyncio.sleep(0)
        emit("result", sent=n, send_s=time.perf_counter() - t0,
             send_cpu_s=time.process_time() - c0, blocked_sends=blocked)
        await wait_release(p.get("release", 30.0))
    finally:
        sock.close(0)
        ctx.term()


async def sub(p: dict[str, Any]) -> None:
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, p.get("hwm", 100_000))
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, SUBJECT.encode() + b"\0")
    sock.connect(p["endpoint"])
    try:
        emit("ready")
        n = p["n"]
        r = Receiver()
        recv = _sync(sock).recv
        noblock = zmq.NOBLOCK
        clock = time.perf_counter
        deadline = clock() + p.get("deadline", 60.0)
        wait_ms = int(p.get("wait", 10.0) * 1000)
        idle_ms = int(p.get("idle", 0.5) * 1000)
        got = 0
        while got < n and clock() < deadline:
            if not await _readable(sock, idle_ms if got else wait_ms):
                break
            if not got:
                r.mark(1)  # readable: the first message is in
            try:
                while True:
                    frame = recv(noblock)
                    nul = frame.find(b"\0")
                    if frame[nul + 1] == 1:
                        _payload = frame[nul + 4 :]
                    got += 1
            except zmq.Again:
                pass
            r.mark(got)
        emit("result", **r.result(n))
    finally:
        sock.close(0)
        ctx.term()


async def rep(p: dict[str, Any]) -> None:
    """Replier: SUB for requests and PUB for replies, both bound (PUB/SUB as in aoz)."""
    ctx = zmq.asyncio.Context()
    s = ctx.socket(zmq.SUB)
    x = ctx.socket(zmq.XPUB)
    for sock in (s, x):
        sock.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SUBSCRIBE, RR_SUBJECT.encode() + b"\0")
    s.bind("tcp://127.0.0.1:*")
    x.bind("tcp://127.0.0.1:*")
    served = 0

    async def serve() -> None:
        nonlocal served
        recv = _sync(s).recv
        send = _sync(x).send
        noblock = zmq.NOBLOCK
        while True:
            await _readable(s, 1000)
            try:
                while True:
                    frame = recv(noblock)
                    nul = frame.find(b"\0")
                    send(wire_reply(frame[nul + 2 : nul + 62], frame[nul + 64 :]), noblock)
                    served += 1
            except zmq.Again:
                pass

    try:
        emit(
            "ready",
            sub=s.getsockopt_string(zmq.LAST_ENDPOINT),
            pub=x.getsockopt_string(zmq.LAST_ENDPOINT),
        )
        task = asyncio.create_task(serve())
        await wait_release(p.get("release", 60.0))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        emit("result", served=served)
    finally:
        s.close(0)
        x.close(0)
        ctx.term()


async def req(p: dict[str, Any]) -> None:
    ctx = zmq.asyncio.Context()
    x = ctx.socket(zmq.XPUB)  # requests out; XPUB to see the replier's subscription
    s = ctx.socket(zmq.SUB)  # replies in
    for sock in (s, x):
        sock.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SUBSCRIBE, f"_INBOX.{RAW_UUID}".encode())
    x.connect(p["sub"])
    s.connect(p["pub"])
    payload = b"x" * p["size"]
    send = _sync(x).send
    recv = _sync(s).recv
    noblock = zmq.NOBLOCK
    serial = 0

    def request() -> None:
        nonlocal serial
        serial += 1
        send(wire_request(RR_SUBJECT, raw_handle(serial), payload), noblock)

    async def one(timeout_ms: int) -> bool:
        """Send one request, wait for its reply (sequential round trip)."""
        request()
        while True:
            try:
                recv(noblock)
                return True
            except zmq.Again:
                if not await _readable(s, timeout_ms):
                    return False

    try:
        emit("ready")
        await _wait_subscription(
            x, p.get("wait", 10.0), wire_request(RR_SUBJECT, raw_handle(1), payload)
        )
        # The reply path (our SUB -> their PUB) has no signal: retry until one comes back.
        for _ in range(100):
            if await one(100):
                break
        else:
            raise SystemExit("replier never answered")
        for _ in range(p.get("warmup", 200)):
            await one(2000)
        clock = time.perf_counter_ns
        samples: list[int] = []
        t0 = time.perf_counter()
        for _ in range(p["n_seq"]):
            t = clock()
            if not await one(2000):
                break
            samples.append(clock() - t)
        seq = latency_summary(samples, time.perf_counter() - t0)
        n, window = p["n_pipe"], p.get("window", 64)
        done = sent = 0
        t0 = time.perf_counter()
        while sent < min(n, window):
            request()
            sent += 1
        while done < n:
            if not await _readable(s, 2000):
                break
            try:
                while True:
                    recv(noblock)
                    done += 1
                    if sent < n:
                        request()
                        sent += 1
            except zmq.Again:
                pass
        pipe_s = time.perf_counter() - t0
        emit("result", **seq, pipelined=done, pipelined_rps=done / pipe_s)
    finally:
        s.close(0)
        x.close(0)
        ctx.term()


def main(argv: list[str] | None = None) -> int:
    return run_role(argv, {"pub": pub, "sub": sub, "rep": rep, "req": req})


if __name__ == "__main__":
    sys.exit(main())
