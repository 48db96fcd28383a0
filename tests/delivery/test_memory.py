"""Memory on the mesh (issue #21): the publisher cache, history for late joiners and
recovery of gaps, between real nodes over loopback (static mode, linked both ways: a
cache query travels the subscriber's publisher -> the publisher's SUB, its answer the
other way).

The gaps here are made without root: a publisher on ``send_policy="block"`` publishing
with ``block=False`` while a frozen subscriber (``overflow="block"`` and nobody
consuming: its node stops reading once the queue is full) has filled the link. Each
such publish is numbered, kept in the cache, not sent, and counted in ``dropped_out``:
the exact number the subscriber must recover or report. The same with an nftables
cut is in test_blackhole.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
import zmq
import zmq.asyncio

import aoz
from aoz._protocol.frames import encode_publish
from aoz._protocol.sequence import encode_header
from aoz.config import Overflow

pytestmark = pytest.mark.timeout(60)


@asynccontextmanager
async def linked(pub_settings: dict[str, Any], sub_settings: dict[str, Any]
                 ) -> AsyncIterator[tuple[aoz.Node, aoz.Node]]:
    """A publisher and a subscriber node, each connected to the other's publisher."""
    async with AsyncExitStack() as stack:
        pub = await stack.enter_async_context(
            aoz.connect(bind=["tcp://127.0.0.1:*"], **pub_settings))
        sub = await stack.enter_async_context(
            aoz.connect(bind=["tcp://127.0.0.1:*"], connect=[pub.endpoint], **sub_settings))
        pub.connect_endpoint(sub.endpoint)
        yield pub, sub


async def test_late_joiner_gets_the_last_value_of_1000_subjects_then_live() -> None:
    subjects = [f"MD.S{i:04d}" for i in range(1000)]
    async with linked({"publish_cache": 1}, {}) as (pub, sub):
        published: dict[str, int] = {}
        for rnd in range(3):  # each subject three times before the subscriber comes
            for s in subjects:
                await pub.publish(s, f"{s}:{rnd}".encode())
                published[s] = published.get(s, 0) + 1
        stop = asyncio.Event()

        async def live() -> None:  # live updates while the history is on its way
            i = 0
            while not stop.is_set() and i < 20_000:
                s = subjects[i % len(subjects)]
                await pub.publish(s, f"{s}:live".encode())
                published[s] += 1
                i += 1
                if i % 50 == 0:
                    await asyncio.sleep(0.001)

        seen: dict[str, list[tuple[int, bool]]] = {s: [] for s in subjects}
        history = 0
        async with sub.subscribe("MD.>", history=1) as s:
            task = asyncio.create_task(live())
            try:
                async with asyncio.timeout(30):
                    async for msg in s:
                        if msg.subject == "MD.END":
                            break
                        assert msg.sequence is not None
                        seen[msg.subject].append((msg.sequence, msg.replayed))
                        history += msg.replayed
                        if history == len(subjects) and not stop.is_set():
                            stop.set()
                            await task
                            await pub.publish("MD.END", b"")  # after every live update
            finally:
                stop.set()
                await task
            st = s.statistics()
    for subject, got in seen.items():
        numbers = [n for n, _ in got]
        # the last cached value first, then every live update: nothing twice, no hole
        assert got[0][1], f"{subject}: first message not from the history"
        assert not any(r for _, r in got[1:]), f"{subject}: history after live"
        assert numbers == list(range(numbers[0], published[subject] + 1)), subject
    assert history == st.replayed == len(subjects)
    assert st.lost == st.dropped == 0
    assert sub.statistics().memory["history_unanswered"] == 0


async def _freeze_and_drop(pub: aoz.Node, subject: str, *, payload: int,
                           at_least: int) -> int:
    """Publish with block=False until ``at_least`` publishes were dropped at the full
    link (numbered and cached, not sent); returns how many were published."""
    body = b"x" * payload
    for n in range(1, 200_001):
        await pub.publish(subject, body, block=False)
        if pub.statistics().dropped_out >= at_least:
            return n
    raise AssertionError("the link never filled")


async def _gap_run(cache: int, overflow: Overflow = "block"
                   ) -> tuple[list[int], aoz.SubscriptionStatistics, int, int, dict[str, int]]:
    """A frozen subscriber misses publishes, then consumes with recover=True."""
    async with linked(
        {"publish_cache": cache, "send_policy": "block", "send_hwm": 20},
        {"recv_hwm": 20},
    ) as (pub, sub):
        s = sub.subscribe("GAP", queue_size=2048, overflow=overflow, recover=True)
        await pub.wait_for_interest("GAP")
        frozen = await _freeze_and_drop(pub, "GAP", payload=4096, at_least=300)
        dropped = pub.statistics().dropped_out
        seqs: list[int] = []

        async def consume() -> None:
            async for msg in s:
                assert msg.sequence is not None
                seqs.append(msg.sequence)
                if msg.data == b"END":
                    return

        task = asyncio.create_task(consume())
        for _ in range(100):  # waits for room: these are never dropped
            await pub.publish("GAP", b"y" * 100)
        await pub.publish("GAP", b"END")
        async with asyncio.timeout(30):
            await task
        total = frozen + 101
        st = s.statistics()
        memory = sub.statistics().memory
        await s.aclose()
    return seqs, st, total, dropped, memory


@pytest.mark.parametrize("overflow", ["block", "drop_newest"])
async def test_recovery_with_a_big_enough_cache_delivers_everything_in_order(
        overflow: Overflow) -> None:
    # several gaps often come in one drain: what arrived between two of them is
    # queued (or held) before the second is reported, whatever the overflow policy
    seqs, st, total, dropped, memory = await _gap_run(cache=1_000_000, overflow=overflow)
    assert dropped >= 300
    assert seqs == list(range(1, total + 1))  # every number once, in order
    assert st.lost == 0 and st.dropped == 0
    assert st.recovered == dropped == memory["recovered"]
    assert st.received == total
    assert memory["recover_requests"] >= 1 and memory["unrecovered"] == 0


async def test_recovery_with_a_small_cache_reports_exactly_what_it_cannot_give() -> None:
    # the cache keeps the last 250 of a subject: 101 more are published after the
    # gap, so part of the 300+ dropped is still there and part is gone
    seqs, st, total, dropped, memory = await _gap_run(cache=250)
    assert dropped >= 300
    assert st.lost > 0 and st.recovered > 0
    assert st.recovered + st.lost == dropped
    assert len(seqs) == st.received and len(set(seqs)) == len(seqs)
    assert seqs == sorted(seqs) and seqs[-1] == total
    assert st.received + st.lost + st.dropped == total
    assert memory["recovered"] == st.recovered and memory["unrecovered"] == st.lost


async def test_a_gap_nobody_answers_is_reported_lost_within_the_bound() -> None:
    """A publisher that keeps no cache and does not answer (a raw PUB: what an OZ
    program or a gone node looks like): the gap is lost after recover_timeout and what
    followed it is delivered, in order."""
    ctx = zmq.asyncio.Context()
    raw = ctx.socket(zmq.PUB)
    try:
        port = raw.bind_to_random_port("tcp://127.0.0.1")
        async with aoz.connect(bind=["tcp://127.0.0.1:*"],
                               connect=[f"tcp://127.0.0.1:{port}"],
                               recover_timeout=0.3) as sub:
            s = sub.subscribe("RAW", recover=True)
            pid = 0xABCDEF

            def frame(seq: int) -> bytes:
                return encode_publish(b"RAW", encode_header(0, pid, seq) + str(seq).encode())

            got: list[tuple[int | None, int]] = []
            async with asyncio.timeout(20):
                for _ in range(400):  # until the subscription reached the raw PUB
                    await raw.send(frame(1))
                    try:
                        m = await s.next(timeout=0.05)
                        got.append((m.sequence, m.gap))
                        break
                    except aoz.WaitTimeout:
                        continue
                for seq in (2, 5, 6):  # 3 and 4 never sent
                    await raw.send(frame(seq))
                for _ in range(3):
                    m = await s.next(timeout=10)
                    got.append((m.sequence, m.gap))
            st = s.statistics()
            memory = sub.statistics().memory
            node_lost = sub.statistics().lost_in
    finally:
        raw.close(0)
        ctx.term()
    assert [q for q, _ in got] == [1, 2, 5, 6]
    assert st.lost == 2 and st.recovered == 0 and node_lost == 2
    assert memory["recover_timeouts"] == 1 and memory["unrecovered"] == 2


async def test_recovery_and_plain_subscriptions_side_by_side_count_exactly() -> None:
    async with linked({"publish_cache": 1_000_000, "send_policy": "block",
                       "send_hwm": 20}, {"recv_hwm": 20}) as (pub, sub):
        rec = sub.subscribe("MIX", queue_size=2048, overflow="block", recover=True)
        plain = sub.subscribe("MIX")
        await pub.wait_for_interest("MIX")
        frozen = await _freeze_and_drop(pub, "MIX", payload=4096, at_least=100)
        dropped = pub.statistics().dropped_out
        got: list[int] = []

        async def consume() -> None:
            async for msg in rec:
                assert msg.sequence is not None
                got.append(msg.sequence)
                if msg.data == b"END":
                    return

        task = asyncio.create_task(consume())
        await pub.publish("MIX", b"END")
        async with asyncio.timeout(30):
            await task
        rs, ps = rec.statistics(), plain.statistics()
    assert got == list(range(1, frozen + 2))
    assert rs.recovered == dropped and rs.lost == 0
    assert ps.lost == dropped and ps.recovered == 0  # not asked for: counted lost
    assert ps.received + ps.lost + ps.dropped == frozen + 1


async def test_history_of_a_wildcard_takes_the_last_n_of_each_subject() -> None:
    async with linked({"publish_cache": 3}, {}) as (pub, sub):
        for i in range(5):
            await pub.publish("Q.A", i)
        await pub.publish("Q.B", b"b")
        await pub.wait_for_subscribers(None, timeout=5)
        # history of everything under Q.: the node's own and the publisher's answers
        async with sub.subscribe("Q.>", history=2) as s:
            got = [await s.next(timeout=5) for _ in range(3)]
        assert [(m.subject, m.decode() if m.subject == "Q.A" else m.data) for m in got] == [
            ("Q.A", 3), ("Q.A", 4), ("Q.B", b"b")]
        assert all(m.replayed for m in got)
        assert pub.statistics().memory["cache_queries"] >= 1
        assert pub.statistics().memory["cache_frames"] == 4
        assert sub.statistics().subscriptions == []  # the query inbox is not listed


async def test_history_with_no_cache_anywhere_delivers_live_at_once() -> None:
    async with linked({}, {}) as (pub, sub):
        await pub.publish("NC", b"before")
        async with sub.subscribe("NC", history=5) as s:
            await pub.wait_for_interest("NC")
            await pub.publish("NC", b"after")
            m = await s.next(timeout=5)
        assert m.data == b"after" and not m.replayed
        assert s.statistics().replayed == 0
        assert sub.statistics().memory["history_unanswered"] == 0  # "no cache" answers


def test_bad_history_argument_is_a_usage_error() -> None:
    async def run() -> None:
        async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
            with pytest.raises(aoz.UsageError, match="history"):
                node.subscribe("A", history=-1)
    asyncio.run(run())


def test_cache_settings_are_checked() -> None:
    with pytest.raises(aoz.ConfigError, match="sequence"):
        aoz.Settings(publish_cache=1, sequence=False)
    with pytest.raises(aoz.ConfigError, match="publish_cache"):
        aoz.Settings(publish_cache=-1)



async def test_a_node_joining_a_running_naming_mesh_gets_history_from_every_publisher(
    aoz_node_factory: Any,
) -> None:
    """Naming mode: two publishers with caches, a node without; a fourth node joins and
    gets each subject's last value from each publisher (publisher order per subject)."""
    pubs = [await aoz_node_factory(publish_cache=1) for _ in range(2)]
    await aoz_node_factory()  # a peer that keeps no cache: answers "no cache"
    for i, pub in enumerate(pubs):
        for rnd in range(2):
            await pub.publish("J.A", f"p{i} a{rnd}")
            await pub.publish(f"J.B{i}", f"p{i} b{rnd}")
    joiner = await aoz_node_factory()
    for p in pubs:
        await joiner.wait_for_peer(p.uuid, timeout=10)
    async with joiner.subscribe("J.>", history=1) as s:
        got = [await s.next(timeout=10) for _ in range(4)]
    by_subject: dict[str, list[str]] = {}
    for m in got:
        assert m.replayed
        by_subject.setdefault(m.subject, []).append(m.decode())
    assert sorted(by_subject["J.A"]) == ["p0 a1", "p1 a1"]
    assert by_subject["J.B0"] == ["p0 b1"] and by_subject["J.B1"] == ["p1 b1"]
    # every peer answered (the publishers, the cacheless one, the joiner itself)
    assert joiner.statistics().memory["history_unanswered"] == 0
