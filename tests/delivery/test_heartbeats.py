"""Publisher heartbeats (issue #21): a lost tail is noticed without a later message.

A publisher that published on a subject and then stays quiet announces the subject's
last sequence number once a ``publisher_heartbeat`` interval; a subscriber behind it
reports the missing tail exactly like a sequence gap, once.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
import zmq
import zmq.asyncio

import aoz
from aoz._protocol import heartbeat as hb
from aoz._protocol.sequence import encode_header

pytestmark = pytest.mark.timeout(60)

INTERVAL = 0.2  # seconds between heartbeats in these tests


@asynccontextmanager
async def _raw_publisher() -> AsyncIterator[tuple[zmq.asyncio.Socket, int]]:
    """A bare XPUB standing in for a publisher whose frames the test writes by hand."""
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.XPUB)
    port = raw.bind_to_random_port("tcp://127.0.0.1")
    try:
        yield raw, port
    finally:
        raw.close(linger=0)


async def _wait_filters(raw: zmq.asyncio.Socket, *filters: bytes) -> None:
    """Until every one of ``filters`` has reached the raw XPUB (bounded)."""
    want = {b"\x01" + f for f in filters}
    with anyio.fail_after(10):
        while want:
            want.discard(await raw.recv())


def _data(subject: bytes, publisher: int, seq: int) -> bytes:
    return subject + b"\0\x01\0" + encode_header(0, publisher, seq) + struct.pack("<I", seq)


async def test_a_heartbeat_ahead_reports_the_tail_once_and_ignores_other_subjects() -> None:
    """A: 1..3 received, heartbeat says 5 -> 2 lost (4, 5) at once, no later message.
    B is not subscribed: its entry is ignored and starts no stream. Then A's next real
    message (6) is not a gap, and a repeated heartbeat counts nothing again."""
    lost_events: list[aoz.MessagesLost] = []
    got_loss = anyio.Event()

    def on_error(err: aoz.AozError) -> None:
        if isinstance(err, aoz.MessagesLost):
            lost_events.append(err)
            got_loss.set()

    async with (
        _raw_publisher() as (raw, port),
        aoz.connect(connect=[f"tcp://127.0.0.1:{port}"], error_cb=on_error) as node,
        node.subscribe("HB.A") as sub,
    ):
        await _wait_filters(raw, b"HB.A\0", hb.FILTER)
        for seq in (1, 2, 3):
            await raw.send(_data(b"HB.A", 42, seq))
        got = [await sub.next(timeout=5) for _ in range(3)]
        assert [m.sequence for m in got] == [1, 2, 3] and sub.statistics().lost == 0
        for frame in hb.encode(42, [(b"HB.A", 5), (b"HB.B", 9)]):
            await raw.send(frame)
        with anyio.fail_after(5):
            await got_loss.wait()
        st = node.statistics()
        assert sub.statistics().lost == 2 and st.lost_in == 2 and st.lost_tails == 2
        assert lost_events[0].lost == 2 and lost_events[0].pattern == "HB.A"
        assert st.heartbeats_in == 1 and st.malformed_in == 0
        assert node._plane.receive.sequences.last_seen.get(b"HB.B") is None
        # the same heartbeat again, then the next real message: nothing counted twice
        for frame in hb.encode(42, [(b"HB.A", 5)]):
            await raw.send(frame)
        await raw.send(_data(b"HB.A", 42, 6))
        nxt = await sub.next(timeout=5)
        assert nxt.sequence == 6 and nxt.gap == 0
        st = node.statistics()
        assert st.heartbeats_in == 2 and sub.statistics().lost == 2 and st.lost_in == 2
        received = sub.statistics().received
        assert received + sub.statistics().lost == 6  # exact: 6 sent
        assert st.messages_in == 4  # heartbeats are control traffic, not messages


async def test_malformed_heartbeats_are_counted_and_dropped() -> None:
    good = hb.encode(7, [(b"HB.M", 3)])[0]
    body = good[len(hb.SUBJECT_HEADER):]
    bad = [
        body[:5],  # shorter than its head
        bytes((0x1E,)) + body[1:],  # wrong first byte
        body[:1] + b"\x02" + body[2:],  # unknown version
        body + b"x",  # trailing bytes
        body[:-1],  # cut inside the entry
        body[:10] + b"\x00\x00",  # announces no subject
        body[:12] + b"\x00\x00" + body[14:],  # zero-length subject
        body[:14] + b"H\0" + body[16:],  # NUL in the subject
        body[:14] + b"\xff\xfe" + body[16:],  # not UTF-8
    ]
    async with (
        _raw_publisher() as (raw, port),
        aoz.connect(connect=[f"tcp://127.0.0.1:{port}"], publisher_heartbeat=0) as node,
        node.subscribe("HB.M") as sub,
    ):
        await _wait_filters(raw, b"HB.M\0", hb.FILTER)
        await raw.send(_data(b"HB.M", 7, 1))
        assert (await sub.next(timeout=5)).sequence == 1
        for payload in bad:
            await raw.send(hb.SUBJECT_HEADER + payload)
        await raw.send(good)  # still heard after all that: 2 lost (2, 3)
        await raw.send(_data(b"HB.M", 7, 4))  # frames arrive in order: it comes after
        nxt = await sub.next(timeout=5)
        assert nxt.sequence == 4 and nxt.gap == 0
        st = node.statistics()
        assert st.malformed_in == len(bad) and st.heartbeats_in == 1
        assert st.lost_in == 2 and sub.statistics().lost == 2


async def test_a_lost_tail_at_a_high_water_mark_is_reported_within_an_interval() -> None:
    """The acceptance case: a subscriber frozen (a full ``overflow="block"`` queue stops
    its node reading) while an aoz publisher sends 30 rounds of 100 messages of 16 KiB
    into small high-water marks, then resumed. The last rounds are dropped at the
    publisher's HWM (everything between is full) and nothing else is ever published on
    that subject: the loss is still reported, from a heartbeat, and exactly (received +
    lost == sent); a later message does not count it again."""
    rounds, per_round = 30, 100
    n = rounds * per_round
    body = b"x" * 16384  # 48 MiB in all; the link holds ~4.5 MiB (measured: ~14 rounds)
    async with (
        aoz.connect(bind=["tcp://127.0.0.1:*"], send_hwm=50,
                    publisher_heartbeat=INTERVAL) as pub,
        aoz.connect(bind=["tcp://127.0.0.1:*"], recv_hwm=50) as node,
        node.subscribe("TAIL.X", queue_size=10, overflow="block") as sub,
    ):
        # a small receive buffer on this one link (no autotuning up to 32 MiB); the
        # sender's kernel buffer still grows to tcp_wmem's maximum (4 MiB here)
        node._plane._sub.setsockopt(zmq.RCVBUF, 65536)
        node.connect_endpoint(pub.endpoint)
        await pub.wait_for_interest("TAIL.X", timeout=10)
        for _ in range(rounds):
            for _ in range(per_round):
                await pub.publish("TAIL.X", body)
            # pacing, not synchronisation: ZeroMQ's I/O thread moves what it can
            # until the link is full end to end; the later rounds are dropped whole
            await anyio.sleep(0.02)
        received = 0
        last = 0
        with anyio.fail_after(30):
            # resume: consume what got through until the heartbeat says what did not
            # (bounded: each wait is at most one interval, the whole at most 30 s)
            while received + sub.statistics().lost < n:
                try:
                    msg = await sub.next(timeout=INTERVAL)
                except aoz.WaitTimeout:
                    continue
                received += 1
                last = msg.sequence or 0
        lost = sub.statistics().lost
        st = node.statistics()
        assert received < n and last < n  # the tail really was dropped
        assert received + lost == n and st.lost_in == lost
        assert st.lost_tails == n - last  # the tail: from a heartbeat, no later message
        assert st.heartbeats_in >= 1 and sub.statistics().pending == 0
        # a real message after the tail: its gap is 0, the loss stays as it was
        await pub.publish("TAIL.X", body)
        nxt = await sub.next(timeout=5)
        assert nxt.sequence == n + 1 and nxt.gap == 0
        assert sub.statistics().lost == lost and node.statistics().lost_in == lost
        assert sub.statistics().received + lost == n + 1


async def test_heartbeats_off_sends_none() -> None:
    """Two publishers, one with heartbeats off: a raw SUB linked to both (each has seen
    its filter) hears the other one's heartbeats several times and never the silent
    one's."""
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.SUB)
    raw.setsockopt(zmq.SUBSCRIBE, hb.FILTER)
    raw.setsockopt(zmq.SUBSCRIBE, b"HB.OFF\0")  # only raw subscribes to it
    try:
        async with (
            aoz.connect(bind=["tcp://127.0.0.1:*"], publisher_heartbeat=INTERVAL) as on,
            aoz.connect(bind=["tcp://127.0.0.1:*"], publisher_heartbeat=0) as off,
        ):
            raw.connect(on.endpoint)
            raw.connect(off.endpoint)
            for node in (on, off):
                await node.wait_for_interest("HB.OFF", timeout=10)  # raw's link is up
                await node.publish("HB.OFF", b"x")
            heard: list[int] = []
            data = 0
            with anyio.fail_after(10):
                while len(heard) < 5:
                    frame = await raw.recv()
                    if frame.startswith(hb.FILTER):
                        heard.append(hb.decode(frame[len(hb.SUBJECT_HEADER):])[0])
                    else:
                        data += 1
            assert data == 2  # both links carried their publication
            assert set(heard) == {on._frames.publisher}
            assert off.statistics().heartbeats_out == 0
            assert on.statistics().heartbeats_out >= 5
    finally:
        raw.close(linger=0)
