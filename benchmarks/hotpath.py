"""``python -m benchmarks.hotpath``: the compiled hot path against its pure-Python twin.

Both implementations live in one process (``aoz._mesh._speedups`` and the twins in
``aoz._mesh._hotpath``), so they are measured side by side in interleaved rounds, in CPU
time of this thread (``time.thread_time``), which a shared machine disturbs far less
than end-to-end rates:

- receive: the data plane's drain on ready-made 100 B sequenced frames (a stand-in
  socket; routing, the sequence check, one Message per frame, the hand-over to the
  subscription), then ``async for`` with ``msg.data`` over what was queued;
- send: ``Sender.publish`` of a 100 B payload into a real XPUB whose inproc subscriber
  reads afterwards (building the sequenced frame and libzmq's send);
- ``await node.publish`` per message on a node (whichever path this process runs),
  against a bare ``sock.send`` of the same frame: the floor of what a publish costs.

The end-to-end figures (aoz against raw zmq.asyncio and zenoh, each path) are in
``python -m benchmarks`` (systems ``aoz`` and ``aoz-py``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import zmq

import aoz
from aoz._mesh import hotpath
from aoz._mesh._hotpath import Sender as _SenderPy
from aoz._mesh._hotpath import drain_sub as _drain_sub_py
from aoz._mesh.receive import Receiver
from aoz._mesh.routing import RoutingTable
from aoz._mesh.subscription import Subscription
from aoz._protocol.builder import FrameBuilder
from aoz._protocol.codecs import Codec
from aoz._protocol.sequence import encode_header
from aoz._protocol.subjects import compile_pattern

from .drain import _Feed

try:
    from aoz._mesh import _speedups
except ImportError:
    _speedups = None  # type: ignore[assignment]

SUBJECT = "BENCH.DATA"
BODY = b"x" * 100


def receive(drain: Callable[[Any, Any], int], n: int) -> tuple[float, float]:
    """(drain ns per frame, async-for + msg.data ns per message)."""
    routes: RoutingTable[Subscription] = RoutingTable()
    sub = Subscription(compile_pattern(SUBJECT), n + 1, "drop_newest", lambda: None)
    routes.add(sub.pattern, sub)
    plane = Receiver(routes, None, lambda *a: None)  # type: ignore[arg-type]
    head = SUBJECT.encode() + b"\0\x01\0"
    feed = _Feed([head + encode_header(0, 7, i + 1) + BODY for i in range(n)])
    t0 = time.thread_time()
    while feed.i < n:
        drain(plane, feed)
    t1 = time.thread_time()

    async def consume() -> None:
        k = 0
        async for msg in sub:
            _ = msg.data
            k += 1
            if k == n:
                return

    asyncio.run(consume())
    t2 = time.thread_time()
    assert plane.messages_in == n and plane.lost == 0
    return (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9


def send(sender_type: Callable[[FrameBuilder], Any], entry: Any, n: int) -> float:
    """ns per Sender.publish of a 100 B payload into a real XPUB."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    pub = ctx.socket(zmq.XPUB)
    pub.setsockopt(zmq.SNDHWM, n + 10)
    pub.bind("inproc://hotpath")
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, n + 10)
    sub.connect("inproc://hotpath")
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    pub.recv()  # the subscription arrived
    try:
        sender = sender_type(FrameBuilder(Codec.MSGPACK, publisher=7, entry_type=entry))
        sender.pub = pub
        publish = sender.publish
        publish(SUBJECT, BODY, None)  # the subject's header is built once, as on a node
        t0 = time.thread_time()
        for _ in range(n):
            publish(SUBJECT, BODY, None)
        t1 = time.thread_time()
        assert sender.messages_out == n + 1
        return (t1 - t0) / n * 1e9
    finally:
        pub.close(0)
        sub.close(0)
        ctx.term()


async def node_publish(n: int) -> tuple[float, float]:
    """(ns per ``await node.publish``, ns per bare ``sock.send`` of the same frame)."""
    async with aoz.connect(bind=["tcp://127.0.0.1:*"], send_hwm=n + 10) as node:
        await node.publish(SUBJECT, BODY)
        publish = node.publish
        t0 = time.thread_time()
        for _ in range(n):
            await publish(SUBJECT, BODY)
        t1 = time.thread_time()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.XPUB)
    sock.bind("tcp://127.0.0.1:*")
    frame = SUBJECT.encode() + b"\0\x01\0" + encode_header(0, 7, 1) + BODY
    t2 = time.thread_time()
    for _ in range(n):
        sock.send(frame, zmq.NOBLOCK)
    t3 = time.thread_time()
    sock.close(0)
    ctx.term()
    return (t1 - t0) / n * 1e9, (t3 - t2) / n * 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=100_000)
    args = ap.parse_args(argv)
    if _speedups is None:
        print("aoz._mesh._speedups is not built: nothing to compare (pip install -e .)")
        return 1
    figures: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        figures.setdefault(key, []).append(value)

    for _ in range(args.rounds):
        for name, drain in (("compiled", _speedups.drain_sub), ("python", _drain_sub_py)):
            d, c = receive(drain, args.n)
            add(f"drain {name}", d)
            add(f"async for + msg.data ({name} drain)", c)
        for name, sender, entry in (("compiled", _speedups.Sender, _speedups.Entry),
                                    ("python", _SenderPy, None)):
            add(f"Sender.publish {name}", send(sender, entry, args.n))
        p, raw = asyncio.run(node_publish(args.n))
        add(f"await node.publish ({hotpath.HOT_PATH})", p)
        add("raw sock.send", raw)
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(f"{'CPU per message (this thread)':42s} {'median ns':>10s} {'min-max':>14s}")
    for k, v in figures.items():
        print(f"{k:42s} {med[k]:10.0f} {min(v):7.0f}-{max(v):<7.0f}")
    print()
    print(f"receive drain, compiled / python CPU: "
          f"{med['drain compiled'] / med['drain python']:.2f}")
    print(f"Sender.publish, compiled / python CPU: "
          f"{med['Sender.publish compiled'] / med['Sender.publish python']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
