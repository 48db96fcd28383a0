"""Issue #22, item 6 of the issue: a replayed beacon cannot keep a dead peer alive.

An insider (anyone who can publish into an nsd; with ``naming_curve``, any listed
key) records a peer's beacon and replays it after the peer was SIGKILLed. Before the
fix the beacons kept refreshing the peer, so it stayed in every peer table for ever
although its data link was down. Now the link is the evidence: the peer is expired
within the documented bound (``expire_window`` after its link was last up, plus the
link check, aoz/_discovery/state.py) and the replayed beacons only probe its link.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import anyio
import pytest

import aoz
from aoz._discovery.nsd import NamingDaemon

from ..delivery.harness import role
from .helpers import eventually, naming_attacker

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

BEACON = 0.5
FAST: dict[str, Any] = {"beacon_interval": BEACON, "connect_interval": 0.05,
                        "connect_retries": 200}
WINDOW = 3 * BEACON  # expire_beacons (3) x beacon_interval
BOUND = WINDOW + 0.5  # + the driver's link check (state.py)


async def test_replayed_beacons_do_not_keep_a_killed_peer() -> None:
    async with (
        NamingDaemon(port=0) as nsd,
        aoz.connect(naming=[nsd.endpoint], **FAST) as victim,
        naming_attacker(nsd.xsub_endpoint) as evil,
    ):
        events = victim.peer_events()
        with role("member", {"nsd": nsd.endpoint, "settings": FAST}) as peer:
            ready = await peer.event("ready")
            uuid = ready["uuid"]
            await victim.wait_for_peer(uuid)
            # what the insider records: the peer's own beacon, byte for byte
            beacon = _beacon_of(victim, uuid)
            await eventually(lambda: victim._links.up(ready["endpoint"]), "the link is up")
            peer.signal(signal.SIGKILL)
            killed = time.monotonic()

            async with anyio.create_task_group() as tg:

                async def replay() -> None:
                    while True:
                        await evil.send(beacon)
                        await anyio.sleep(BEACON / 2)

                tg.start_soon(replay)
                with anyio.fail_after(BOUND + 5):  # generous: a loaded machine
                    async for ev in events:
                        if ev.peer.uuid == uuid and ev.kind in ("expired", "left"):
                            break
                took = time.monotonic() - killed
                # it stays out while the replay goes on: beacons alone never list it
                with anyio.move_on_after(3 * WINDOW):
                    async for ev in events:
                        assert not (ev.kind == "joined" and ev.peer.uuid == uuid), ev
                assert uuid not in {p.uuid for p in victim.peers}
                tg.cancel_scope.cancel()
        counters = victim.statistics().discovery
        print(f"replayed beacons: killed peer expired after {took:.2f} s "
              f"(bound {BOUND:.1f} s after its link went down); probes {counters['probes']}")
        assert counters["probes"] >= 1  # the replay was seen, and only probed the link


def _beacon_of(node: aoz.Node, uuid: str) -> bytes:
    """The peer's beacon as it was on the wire (built from what it announced)."""
    from aoz._protocol.naming import NamingFrame, NamingType, encode_naming

    p = next(p for p in node.peers if p.uuid == uuid)
    return encode_naming(NamingFrame(NamingType.BEACON, p.program, p.host, p.pid, p.uuid,
                                     p.endpoint))
