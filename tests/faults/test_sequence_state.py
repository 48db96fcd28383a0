"""Issue #22, items 2 and 3: loss accounting never forgets silently.

- Closing one subscription used to clear every stream's last number, so a loss on an
  unrelated subject just before it was reported as nothing (gap 0).
- With many subjects the publisher's frame builder dropped its per-subject numbers
  past 8,192 subjects (restarting them at 1) and the subscriber's tracker forgot
  everything past 65,536 streams: with 100,000 subjects most losses went unreported.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
import zmq
import zmq.asyncio

import aoz
from aoz._protocol.builder import FrameBuilder
from aoz._protocol.sequence import SequenceTracker, encode_header, parse_header

from ..delivery.harness import ROOT, Role

pytestmark = pytest.mark.timeout(180)


async def _until(raw: zmq.asyncio.Socket, event: bytes) -> None:
    """Wait for a subscription event on the raw publisher (bounded)."""
    with anyio.fail_after(10):
        while (await raw.recv()) != event:
            pass


async def test_closing_an_unrelated_subscription_keeps_the_loss_count() -> None:
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.XPUB)
    raw.setsockopt(zmq.LINGER, 0)
    port = raw.bind_to_random_port("tcp://127.0.0.1")

    def frame(subject: bytes, seq: int) -> bytes:
        return subject + b"\0\x01\0" + encode_header(0, 7, seq) + b"x"

    try:
        async with aoz.connect(connect=[f"tcp://127.0.0.1:{port}"]) as node:
            a = node.subscribe("A")
            await _until(raw, b"\x01A\x00")
            async with node.subscribe("B"):
                await _until(raw, b"\x01B\x00")
                for seq in (1, 2):
                    await raw.send(frame(b"A", seq))
                    await raw.send(frame(b"B", seq))
                got = [await a.next(timeout=5) for _ in range(2)]
                assert [m.sequence for m in got] == [1, 2]
                # 3..9 are lost upstream; then the unrelated subscription closes
            await _until(raw, b"\x00B\x00")
            await raw.send(frame(b"A", 10))
            msg = await a.next(timeout=5)
            assert (msg.sequence, msg.gap) == (10, 7)
            assert a.statistics().lost == 7 and node.statistics().lost_in == 7

            # closing A itself and subscribing again: the absence is not a loss
            await a.aclose()
            await _until(raw, b"\x00A\x00")
            async with node.subscribe("A") as again:
                await _until(raw, b"\x01A\x00")
                await raw.send(frame(b"A", 20))
                msg = await again.next(timeout=5)
                assert (msg.sequence, msg.gap) == (20, 0)
            assert node.statistics().lost_in == 7
    finally:
        raw.close(linger=0)


async def test_closing_a_wildcard_keeps_the_streams_others_still_receive() -> None:
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.XPUB)
    raw.setsockopt(zmq.LINGER, 0)
    port = raw.bind_to_random_port("tcp://127.0.0.1")

    def frame(subject: bytes, seq: int) -> bytes:
        return subject + b"\0\x01\0" + encode_header(0, 7, seq) + b"x"

    try:
        async with aoz.connect(connect=[f"tcp://127.0.0.1:{port}"]) as node:
            exact = node.subscribe("A.x")
            await _until(raw, b"\x01A.x\x00")
            async with node.subscribe("A.>") as wild:
                await _until(raw, b"\x01A.")
                for seq in (1, 2):
                    await raw.send(frame(b"A.x", seq))
                    await raw.send(frame(b"A.y", seq))
                assert [(await exact.next(timeout=5)).sequence for _ in range(2)] == [1, 2]
                assert len([await wild.next(timeout=5) for _ in range(4)]) == 4
            await _until(raw, b"\x00A.")
            # A.x is still received (by the exact subscription): its loss counts
            await raw.send(frame(b"A.x", 6))
            msg = await exact.next(timeout=5)
            assert (msg.sequence, msg.gap) == (6, 3)
            # A.y is not: its stream was forgotten, a later subscription starts afresh
            async with node.subscribe("A.y") as again:
                await _until(raw, b"\x01A.y\x00")
                await raw.send(frame(b"A.y", 9))
                msg = await again.next(timeout=5)
                assert (msg.sequence, msg.gap) == (9, 0)
            assert node.statistics().lost_in == 3
    finally:
        raw.close(linger=0)


def test_the_publisher_never_restarts_a_subjects_numbers() -> None:
    fb = FrameBuilder(aoz.Codec.MSGPACK, publisher=5, cache_max=8)
    for round_ in (1, 2, 3):
        for i in range(100):  # far more subjects than the header cache holds
            frame = fb.publish(f"S.{i}", b"x")
            nul = frame.index(b"\0")
            header = parse_header(frame, nul + 3)
            assert header is not None and header[2] == round_


def test_the_tracker_evicts_idle_streams_first_and_reports_a_return() -> None:
    t = SequenceTracker(max_streams=4, idle_after=10.0)
    for s in (b"a", b"b", b"c", b"d"):
        assert t.check(s, 1, 1, now=0.0) == 0
    t.check(b"a", 1, 2, now=5.0)  # a moves; b, c, d do not
    t.check(b"a", 1, 3, now=11.0)  # sweep 1: marks everything
    t.check(b"a", 1, 4, now=22.0)  # sweep 2: b, c, d idle for >= 10 s
    assert t.check(b"e", 1, 1, now=23.0) == 0  # at the bound: the idle ones go
    assert set(t.last_seen) == {b"a", b"e"} and t.evictions == 3
    assert t.check(b"a", 1, 5, now=23.0) == 0 and t.restarted == 0  # a was kept
    assert t.check(b"b", 1, 9, now=24.0) == 0  # b comes back: its gap is unknown...
    assert t.restarted == 1  # ...and said so
    assert t.check(b"a", 1, 1, now=25.0) == 0 and t.restarted == 2  # renumbered


def test_the_tracker_bound_holds_without_idle_streams() -> None:
    t = SequenceTracker(max_streams=16)
    for i in range(1000):
        t.check(b"s%d" % i, 1, 1, now=0.0)
        assert t.count <= 16
    for i in range(1000):  # every evicted one that returns is reported
        t.check(b"s%d" % i, 1, 2, now=0.0)
    assert t.restarted >= 1000 - 16


@contextmanager
def spawn(name: str, params: dict[str, Any]) -> Iterator[Role]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    popen = subprocess.Popen(
        [sys.executable, "-m", "tests.faults.roles", name, json.dumps(params)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, cwd=ROOT,
    )
    try:
        yield Role(popen)
    finally:
        if popen.poll() is None:
            popen.send_signal(signal.SIGCONT)
            popen.kill()
        popen.wait(timeout=10)
        for stream in (popen.stdin, popen.stdout, popen.stderr):
            if stream is not None:
                stream.close()


SUBJECTS = 100_000
WINDOW = 5_000  # messages between syncs: under the publisher's send HWM (10,000)


@pytest.mark.slow
async def test_hundred_thousand_subjects_every_loss_is_counted() -> None:
    """One publisher, one ``>`` subscriber (its own process), 100,000 subjects: a round
    while it keeps up, three while it is frozen (SIGSTOP: the publisher's HWM drops),
    a last round after it resumed. received + lost + dropped == sent, exactly."""
    subjects = [f"W.{i}" for i in range(SUBJECTS)]
    body = b"w" * 32
    async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as pub:
        with spawn("widesub", {"endpoint": pub.endpoint}) as sub:
            ready = await sub.event("ready")
            pub.connect_endpoint(ready["endpoint"])
            await pub.wait_for_interest("SYNC", timeout=30, responders=True)

            async def synced_round() -> None:
                for i, s in enumerate(subjects):
                    await pub.publish(s, body)
                    if i % WINDOW == WINDOW - 1:  # the subscriber has all before this
                        await pub.request("SYNC", b"", timeout=60)

            sent = 0
            await synced_round()
            sent += SUBJECTS
            sub.signal(signal.SIGSTOP)
            for _ in range(3):
                for s in subjects:
                    await pub.publish(s, body)
                sent += SUBJECTS
            sub.signal(signal.SIGCONT)
            # the publisher's queue to it is still full: a request sent now may be
            # dropped too; the first one answered has drained it. (A freeze longer than
            # three heartbeats cut the link: it reconnects, and its filters come back.)
            for _ in range(60):
                try:
                    await pub.wait_for_interest("SYNC", timeout=30, responders=True)
                    await pub.request("SYNC", b"", timeout=1)
                    break
                except (aoz.RequestTimeout, aoz.NoResponders):
                    continue
            await synced_round()
            sent += SUBJECTS
            await pub.request("SYNC", b"END", timeout=60)
            result = await sub.event("result", timeout=60)
    print(f"100,000 subjects: sent {sent}, received {result['received']}, lost reported "
          f"{result['lost']}, dropped {result['dropped']}, restarted {result['restarted']}")
    assert result["subjects"] == SUBJECTS and result["first_not_1"] == 0
    assert result["last_sum"] == sent  # every subject's last message arrived
    assert result["received"] + result["lost"] + result["dropped"] == sent
    assert result["lost"] + result["dropped"] > 0  # the freeze did cost messages
    assert result["restarted"] == 0
