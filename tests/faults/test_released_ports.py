"""Issue #22, item 4: no connection attempts to a port aoz has let go of.

libzmq 4.3.5 (zeromq/libzmq#4052) completes a ``disconnect`` only when the
application calls into the socket again; until then the released endpoint is
reconnected every ``reconnect_interval``, and whatever binds the port next gets a
live, subscribed connection from a peer that had let it go. Before the fix a data SUB
held by a full ``overflow="block"`` subscription did exactly that (it is not read
while held). A dead peer's port and a restarted nsd's old XSUB port are checked too
(those passed before as well).

Each check binds a ZeroMQ XPUB on the released port after the grace period and
counts the connections it accepts (its monitor's ACCEPTED events): no root needed.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import anyio
import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

import aoz
from aoz._discovery.nsd import NamingDaemon

from ..delivery.harness import role
from ..hostile.helpers import eventually
from ..ports import free_port

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

GRACE = 1.5  # seconds after aoz released the endpoint (its own grace is 0.5 s)
WATCH = 3.0  # libzmq reconnects every 0.1 s: thirty chances to show up
FAST: dict[str, Any] = {"beacon_interval": 0.2, "connect_interval": 0.05, "connect_retries": 200}


def accepted_on(port: int, seconds: float) -> int:
    """Connections a ZeroMQ XPUB bound on ``port`` accepts within ``seconds``."""
    ctx = zmq.Context.instance()
    xpub = ctx.socket(zmq.XPUB)
    xpub.setsockopt(zmq.LINGER, 0)
    mon = xpub.get_monitor_socket(zmq.EVENT_ACCEPTED)
    try:
        xpub.bind(f"tcp://127.0.0.1:{port}")
        n = 0
        end = time.monotonic() + seconds
        for _ in range(int(seconds / 0.05) + 1):
            if time.monotonic() >= end:
                break
            if mon.poll(50):
                recv_monitor_message(mon)
                n += 1
        return n
    finally:
        xpub.disable_monitor()
        mon.close(linger=0)
        xpub.close(linger=0)


def port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


async def test_a_held_subscriber_lets_go_of_a_departed_peers_port() -> None:
    async with (
        aoz.connect(bind=["tcp://127.0.0.1:*"]) as b,
        b.subscribe("HELD", queue_size=1, overflow="block") as full,
    ):
        async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as a:
            b.connect_endpoint(a.endpoint)
            await a.wait_for_interest("HELD")
            for _ in range(5):  # one fills the queue; b stops reading its SUB
                await a.publish("HELD", b"x")
            await eventually(lambda: full.statistics().pending == 1, "b's queue is full")
            released = a.endpoint
        b._plane.links.disconnect_peer(released)  # what discovery does
        await eventually(lambda: released not in b._plane.links.connected, "b let a go")
        await anyio.sleep(GRACE)  # no event says "libzmq has let go"
        n = await anyio.to_thread.run_sync(accepted_on, port_of(released), WATCH)
        print(f"held SUB: {n} connections to the released port in {WATCH} s")
        assert n == 0
        assert full.statistics().pending == 1  # still held: nothing was read


async def test_a_dead_peers_port_and_a_restarted_nsds_old_port_see_no_attempts() -> None:
    port = free_port()
    nsd = NamingDaemon(port=port)
    await nsd.__aenter__()
    try:
        async with aoz.connect(naming=[nsd.endpoint], **FAST) as b:
            with role("member", {"nsd": nsd.endpoint, "settings": FAST}) as peer:
                ready = await peer.event("ready")
                await b.wait_for_peer(ready["uuid"])
                peer.signal(signal.SIGKILL)
                await eventually(lambda: len(b.peers) == 1, "the dead peer expired", 20)
            old_xsub = port_of(nsd.xsub_endpoint)
            await nsd.__aexit__(None, None, None)
            nsd = NamingDaemon(port=port)
            await nsd.__aenter__()
            await eventually(lambda: b.statistics().discovery["welcomes"] == 2,
                             "b was welcomed by the new nsd", 20)
            await anyio.sleep(GRACE)
            dead = await anyio.to_thread.run_sync(accepted_on, port_of(ready["endpoint"]), WATCH)
            old = await anyio.to_thread.run_sync(accepted_on, old_xsub, WATCH)
            print(f"released ports: dead peer {dead}, old nsd XSUB {old} connections")
            assert dead == 0 and old == 0
    finally:
        await nsd.__aexit__(None, None, None)
