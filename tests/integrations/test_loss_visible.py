"""Losses are visible to operators (issue #25 item 4): every delivery counter is
exported, an application's error_cb hears about losses, and the warning reaches stderr
when the application configured no logging."""

from __future__ import annotations

import subprocess
import sys

import anyio
import httpx
import zmq
import zmq.asyncio
from prometheus_client import CollectorRegistry

import aoz
import aoz.metrics
from aoz._protocol.frames import encode_publish
from aoz._protocol.sequence import encode_header

from .test_metrics import value

GAPPED = [1, 2, 5, 6, 10]  # 2 + 3 = 5 messages lost upstream


async def _feed_gaps(node: aoz.Node, subject: str) -> zmq.asyncio.Socket:
    """A raw publisher whose numbering jumps: the node counts what is missing."""
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.XPUB)
    port = raw.bind_to_random_port("tcp://127.0.0.1")
    node.connect_endpoint(f"tcp://127.0.0.1:{port}")
    with anyio.fail_after(10):
        while (await raw.recv())[1:] != subject.encode() + b"\0":  # its filter arrived
            pass
    for n in GAPPED:
        await raw.send(encode_publish(subject.encode(), encode_header(0, 42, n) + b"x"))
    return raw


async def test_losses_are_exported_and_reported_to_error_cb() -> None:
    reports: list[aoz.AozError] = []
    registry = CollectorRegistry()
    async with aoz.connect(bind=["tcp://127.0.0.1:*"], error_cb=reports.append) as node:
        aoz.metrics.register(node, registry)
        async with node.subscribe("LOSS.A") as sub:
            raw = await _feed_gaps(node, "LOSS.A")
            try:
                got = [await sub.next(timeout=5) for _ in GAPPED]
            finally:
                raw.close(linger=0)
            with aoz.metrics.start_http_server(0, registry=registry) as srv:
                async with httpx.AsyncClient(timeout=5) as http:
                    text = (await http.get(srv.url)).text
    assert [m.gap for m in got] == [0, 0, 2, 0, 3]
    assert value(text, "aoz_messages_lost_total", node=node.uuid) == 5
    assert value(text, "aoz_subscription_lost_total", node=node.uuid, pattern="LOSS.A") == 5
    assert value(text, "aoz_publishes_dropped_total", node=node.uuid) == 0
    assert value(text, "aoz_blocked_sends_total", node=node.uuid) == 0
    lost = [r for r in reports if isinstance(r, aoz.MessagesLost)]
    assert lost and lost[0].pattern == "LOSS.A" and lost[0].lost == 2  # the first gap
    assert lost[0].dropped == 0


async def test_an_async_error_cb_is_awaited() -> None:
    heard = anyio.Event()

    async def on_error(err: aoz.AozError) -> None:
        if isinstance(err, aoz.MessagesLost):
            heard.set()

    node = aoz.connect(bind=["tcp://127.0.0.1:*"], error_cb=on_error)
    async with node, node.subscribe("LOSS.B") as sub:
        raw = await _feed_gaps(node, "LOSS.B")
        try:
            with anyio.fail_after(5):
                await heard.wait()
            assert (await sub.next(timeout=5)).sequence == 1
        finally:
            raw.close(linger=0)


def test_the_loss_warning_reaches_stderr_without_logging_configured() -> None:
    """Messages dropped at a full queue printed nothing: the library's warning went to a
    NullHandler. With no logging configured, Python's last-resort handler prints it."""
    code = """
import asyncio, aoz
async def main():
    async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
        async with node.subscribe("W", queue_size=10) as sub:
            await node.wait_for_interest("W")
            for i in range(1000):
                await node.publish("W", b"x")
            # the burst may still be arriving after the first reads: read until the
            # queue overflowed (bounded: 1,000 reads, 5 s each)
            for _ in range(1000):
                if sub.statistics().dropped:
                    break
                await sub.next(timeout=5)
            assert sub.statistics().dropped > 0, sub.statistics()
asyncio.run(main())
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "subscription 'W' is losing messages" in proc.stderr, proc.stderr[-2000:]
