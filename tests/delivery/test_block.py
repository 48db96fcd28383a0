"""send_policy="block": a publisher waits instead of dropping; with overflow="block" on
the subscriber nothing is lost end to end, whatever the reader's speed."""

from __future__ import annotations

import anyio
import pytest

import aoz

pytestmark = pytest.mark.timeout(90)


async def test_block_mode_loses_nothing_to_a_slow_reader() -> None:
    n = 20_000
    async with (
        aoz.connect(bind=["tcp://127.0.0.1:*"], send_policy="block", send_hwm=100) as pub,
        aoz.connect(connect=[pub.endpoint], recv_hwm=100) as sub_node,
    ):
        sub = sub_node.subscribe("BLK", queue_size=50, overflow="block")
        await pub.wait_for_interest("BLK")
        got: list[int] = []

        async def slow_reader() -> None:
            async for msg in sub:
                got.append(msg.sequence or 0)
                if len(got) % 500 == 0:
                    await anyio.sleep(0.01)  # a reader that keeps falling behind
                if len(got) == n:
                    return

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_reader)
            for i in range(n):
                await pub.publish("BLK", b"%d" % i)
        st = sub.statistics()
        assert got == list(range(1, n + 1))
        assert st.lost == 0 and st.dropped == 0
        assert pub.statistics().blocked_sends > 0  # it did have to wait
        assert pub.statistics().dropped_out == 0


async def test_publish_nowait_raises_instead_of_dropping() -> None:
    async with (
        aoz.connect(bind=["tcp://127.0.0.1:*"], send_policy="block", send_hwm=10) as pub,
        aoz.connect(connect=[pub.endpoint], recv_hwm=10) as sub_node,
    ):
        sub = sub_node.subscribe("FULL", queue_size=10, overflow="block")  # never read
        await pub.wait_for_interest("FULL")
        body = b"z" * 4096
        sent = 0
        with pytest.raises(aoz.WouldBlock) as info:
            for _ in range(200_000):  # bounded: loopback buffers hold a few MB at most
                pub.publish_nowait("FULL", body)
                sent += 1
        assert info.value.subject == "FULL"
        # block=False drops and counts instead
        await pub.publish("FULL", body, block=False)
        assert pub.statistics().dropped_out == 1
        # everything publish_nowait accepted arrives, in order, once the reader reads
        seqs = [(await sub.next(timeout=10)).sequence for _ in range(sent)]
        assert seqs == list(range(1, sent + 1))


async def test_block_true_needs_a_blocking_node() -> None:
    async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
        with pytest.raises(aoz.ConfigError, match="send_policy='block'"):
            await node.publish("X", b"", block=True)
