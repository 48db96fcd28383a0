"""The compiled hot path calls libzmq directly (the libzmq pyzmq loaded, found through
pyzmq's own extension) for plain pyzmq sockets, and through pyzmq otherwise; both ways
read and write the same frames. A publish ZeroMQ refuses (built straight in a libzmq
message when compiled) leaves the frame, numbered, in ``Sender.unsent`` on both twins."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import zmq

from aoz._mesh._hotpath import Sender as _SenderPy
from aoz._mesh._hotpath import drain_sub as _drain_sub_py
from aoz._mesh.receive import Receiver
from aoz._mesh.routing import RoutingTable
from aoz._mesh.subscription import Subscription
from aoz._protocol.builder import FrameBuilder
from aoz._protocol.codecs import Codec
from aoz._protocol.frames import encode_publish, encode_request, make_handle
from aoz._protocol.sequence import encode_header
from aoz._protocol.subjects import compile_pattern
from aoz.errors import WouldBlock

try:
    from aoz._mesh import _speedups
except ImportError:  # pragma: no cover - the build could not compile it
    _speedups = None  # type: ignore[assignment]

compiled = pytest.mark.skipif(_speedups is None, reason="aoz._mesh._speedups is not built")


class Pair:
    """A PUB and a SUB on inproc (XPUB_NODROP with a small HWM, to be refused)."""

    def __init__(self, hwm: int = 100_000) -> None:
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.pub = self.ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.SNDHWM, hwm)
        self.pub.setsockopt(zmq.XPUB_NODROP, 1)
        self.pub.bind("inproc://direct")
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.RCVHWM, hwm)
        self.sub.connect("inproc://direct")
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        assert self.pub.poll(2000) and self.pub.recv() == b"\x01"

    def close(self) -> None:
        self.pub.close(0)
        self.sub.close(0)
        self.ctx.term()


class ThroughPyzmq:
    """The same SUB seen through a wrapper: the drain must call its ``recv``."""

    def __init__(self, sock: zmq.Socket[bytes]) -> None:
        self.sock = sock
        self.calls = 0

    def recv(self, flags: int = 0) -> bytes:
        self.calls += 1
        return self.sock.recv(flags)


def test_the_compiled_path_says_how_it_calls_libzmq() -> None:
    if _speedups is None:
        pytest.skip("aoz._mesh._speedups is not built")
    assert isinstance(_speedups.LIBZMQ_DIRECT, bool)
    # where pyzmq's Cython backend and dlopen are there (this machine, CI), it is found
    if sys.platform.startswith("linux") and zmq.backend.__name__.endswith("cython"):
        assert _speedups.LIBZMQ_DIRECT, _speedups.LIBZMQ_FALLBACK
    assert (_speedups.LIBZMQ_FALLBACK == "") == _speedups.LIBZMQ_DIRECT


def test_with_direct_calls_turned_off_a_node_works_through_pyzmq() -> None:
    code = """
import asyncio
import aoz
from aoz._mesh import _speedups
assert not _speedups.LIBZMQ_DIRECT and _speedups.LIBZMQ_FALLBACK == "AOZ_LIBZMQ_DIRECT=0"
async def main():
    async with aoz.connect(bind=["tcp://127.0.0.1:*"], send_policy="block") as node:
        async with node.subscribe("T") as sub:
            await node.wait_for_interest("T")
            for x in (b"a", b"b"):
                await node.publish("T", x)
            got = [(await sub.next(timeout=5)).data for _ in range(2)]
            assert got == [b"a", b"b"], got
asyncio.run(main())
print("ok")
"""
    if _speedups is None:
        pytest.skip("aoz._mesh._speedups is not built")
    env = {**os.environ, "AOZ_LIBZMQ_DIRECT": "0"}
    env.pop("AOZ_PURE_PYTHON", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def _plane() -> tuple[Receiver, list[Subscription]]:
    routes: RoutingTable[Subscription] = RoutingTable()
    replies: list[Any] = []
    plane = Receiver(routes, None, lambda *a: replies.append(a))  # type: ignore[arg-type]
    subs = [Subscription(compile_pattern(p), 1000, "drop_newest", lambda: None)
            for p in ("A", ">")]
    for s in subs:
        routes.add(s.pattern, s)
    return plane, subs


FRAMES = [
    *(encode_publish(b"A", encode_header(0, 5, k) + b"v%d" % k) for k in range(1, 40)),
    encode_publish(b"B", b"\x00" + b"x" * 5000),
    encode_request(b"A", make_handle("00000000-0000-4000-8000-000000000000", 3), b"\x00q"),
    b"junk without a subject end",
    encode_publish(b"A", encode_header(0, 5, 41) + b"after a gap"),
]


def _drained(drain: Any, wrap: bool) -> tuple[Any, ...]:
    pair = Pair()
    try:
        for f in FRAMES:
            pair.pub.send(f)
        plane, subs = _plane()
        sock: Any = ThroughPyzmq(pair.sub) if wrap else pair.sub
        got = 0
        for _ in range(200):  # bounded: inproc delivers them all at once, or nearly
            got += drain(plane, sock)
            if got >= len(FRAMES):
                break
            pair.sub.poll(100)
        if wrap:
            assert sock.calls >= len(FRAMES)  # the wrapper's recv was used
        return (got, [[(m.frame, m.subject, m.sequence, m.gap, m.reply) for m in s._queue]
                      for s in subs],
                plane.messages_in, plane.bytes_in, plane.malformed, plane.lost)
    finally:
        pair.close()


@compiled
def test_direct_reads_leave_what_pyzmq_reads_leave() -> None:
    direct = _drained(_speedups.drain_sub, wrap=False)
    assert direct[0] == len(FRAMES) and direct[4] == 1 and direct[5] == 1
    assert direct == _drained(_speedups.drain_sub, wrap=True)
    assert direct == _drained(_drain_sub_py, wrap=False)


def _refusals(sender_type: Any, entry: Any) -> tuple[Any, ...]:
    pair = Pair(hwm=4)
    try:
        builder = FrameBuilder(Codec.MSGPACK, publisher=9, entry_type=entry)
        sender = sender_type(builder)
        sender.pub = pair.pub
        outcomes: list[Any] = []
        refused = None
        for i in range(10_000):  # bounded: inproc holds a few HWMs at most
            try:
                outcomes.append(sender.publish("A", b"m%d" % i, None))
            except WouldBlock:
                refused, sender.unsent = sender.unsent, None
                break
        assert refused is not None
        received = []
        while pair.sub.poll(0):
            received.append(pair.sub.recv())
        pair.pub.getsockopt(zmq.EVENTS)  # the pub reads the news of room (as its fd says)
        sender.send(refused)  # room again: the refused frame goes as it was numbered
        received.append(pair.sub.recv())
        after = sender.publish("A", {"k": 1}, None)  # the builder's path: same outcome
        received.append(pair.sub.recv())
        return (outcomes, refused, received, after, sender.messages_out, sender.bytes_out)
    finally:
        pair.close()


@compiled
def test_a_refused_publish_leaves_its_frame_numbered_on_both_twins() -> None:
    a = _refusals(_speedups.Sender, _speedups.Entry)
    assert a == _refusals(_SenderPy, None)
    outcomes, refused, received, after, messages, _ = a
    assert set(outcomes) == {False} and after is False
    numbers = [int.from_bytes(f[13:17], "little") for f in received]  # A\0\x01\0 flags pid
    assert numbers == list(range(1, len(received) + 1))  # no number lost or reused
    assert received[-2] == refused and messages == len(received)


def test_the_selected_twin_sends_and_counts_on_a_real_socket() -> None:
    from aoz._mesh.hotpath import Sender

    pair = Pair()
    try:
        sender = Sender(FrameBuilder(Codec.MSGPACK, publisher=1))
        sender.pub = pair.pub
        assert [sender.publish("A", b"x", None) for _ in range(3)] == [False] * 3
        assert [pair.sub.recv()[-1:] for _ in range(3)] == [b"x"] * 3
        assert sender.messages_out == 3
    finally:
        pair.close()
