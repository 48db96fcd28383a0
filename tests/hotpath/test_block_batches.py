"""A subscription with ``overflow="block"`` takes a drain's messages as one batch, up to
its ``room()``: the drain stops at the frame that fills it, nothing is dropped, and what
may be packed is still queued whole. Runs on the twin the node uses (both, in
``make test``)."""

from __future__ import annotations

from typing import Any

import zmq

from aoz._mesh.hotpath import drain_sub
from aoz._mesh.message import Message, data_start
from aoz._mesh.receive import Receiver
from aoz._mesh.routing import RoutingTable
from aoz._mesh.subscription import Subscription
from aoz._protocol.frames import Kind, encode_publish
from aoz._protocol.packed import pack_rows
from aoz._protocol.sequence import encode_header
from aoz._protocol.subjects import compile_pattern


class Feed:
    """Stands in for the data SUB: hands out the frames, then raises Again."""

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = frames
        self.i = 0

    def recv(self, flags: int = 0) -> bytes:
        if self.i >= len(self.frames):
            raise zmq.Again()
        self.i += 1
        return self.frames[self.i - 1]


def plane_with(*specs: tuple[str, int, Any]) -> tuple[Receiver, list[Subscription]]:
    routes: RoutingTable[Subscription] = RoutingTable()
    plane = Receiver(routes, None, lambda *a: None)  # type: ignore[arg-type]
    subs = []
    for pattern, limit, overflow in specs:
        sub = Subscription(compile_pattern(pattern), limit, overflow, lambda: None)
        if overflow == "block":
            sub.backpressure(plane.hold, plane.release)
        routes.add(sub.pattern, sub)
        subs.append(sub)
    return plane, subs


def numbered(n: int, first: int = 1) -> list[bytes]:
    return [encode_publish(b"A", encode_header(0, 7, k) + b"%d" % k)
            for k in range(first, first + n)]


def test_a_blocking_subscription_stops_the_drain_at_the_frame_that_fills_it() -> None:
    plane, (sub,) = plane_with(("A", 4, "block"))
    feed = Feed(numbered(10))
    assert sub.room() == 4
    assert drain_sub(plane, feed) == 4  # read exactly what fits
    assert sub.pending == 4 and sub.room() == 0 and plane.holds == 1
    assert drain_sub(plane, feed) == 0  # held: nothing read
    for _ in range(2):  # the consumer takes half: the hold ends
        sub.get_nowait()
    assert plane.holds == 0 and sub.room() == 2
    assert drain_sub(plane, feed) == 2
    while sub.get_nowait() is not None:
        pass
    assert drain_sub(plane, feed) == 4 and plane.holds == 1
    st = sub.statistics()
    assert (st.received, st.dropped, st.lost) == (10, 0, 0)
    assert [m.sequence for m in sub._queue] == [7, 8, 9, 10]


def test_beside_a_dropping_subscription_each_gets_its_own_count() -> None:
    plane, (block, drop) = plane_with(("A", 3, "block"), (">", 2, "drop_newest"))
    feed = Feed(numbered(5))
    assert drain_sub(plane, feed) == 3
    assert block.pending == 3 and block.statistics().dropped == 0
    assert drop.pending == 2 and drop.statistics().dropped == 1  # its own policy
    assert [m.sequence for m in block._queue] == [1, 2, 3]


def test_a_packed_frame_is_queued_whole_between_batched_messages() -> None:
    plane, (sub,) = plane_with(("A", 4, "block"))
    packed = encode_publish(b"A", pack_rows(0, [b"r1", b"r2", b"r3"]))
    feed = Feed([numbered(1)[0], packed, numbered(1, 2)[0], numbered(1, 3)[0]])
    # 1 batched, then the packed frame's 3 rows whole (the queue is full: held)
    assert drain_sub(plane, feed) == 2
    assert sub.pending == 4 and plane.holds == 1
    assert [m.data for m in sub._queue] == [b"1", b"r1", b"r2", b"r3"]
    while sub.get_nowait() is not None:
        pass
    assert drain_sub(plane, feed) == 2
    assert [m.data for m in sub._queue] == [b"2", b"3"]
    assert sub.statistics().dropped == 0


def test_push_many_on_a_blocking_mailbox_holds_once_full_and_drops_nothing() -> None:
    held: list[str] = []
    sub = Subscription(compile_pattern("A"), 3, "block", lambda: None)
    sub.backpressure(lambda: held.append("full"), lambda: held.append("room"))
    msgs = [Message(f, 1, 4, data_start(f, 4), Kind.PUBLISH, None, 0.0, None)
            for f in numbered(4)]
    sub.push_many(msgs[:2])
    assert held == [] and sub.room() == 1
    sub.push_many(msgs[2:])  # past its room: queued all the same, and held
    assert held == ["full"] and sub.pending == 4 and sub.room() == 0
    assert sub.statistics().dropped == 0
    for _ in range(3):
        sub.get_nowait()
    assert held == ["full", "room"]

