"""Issue #22, item 7 of the issue (item 5 of this turn): a forged welcome cannot win
a race against an nsd's restart.

The victim uses two nsds. An attacker who can reach the first one floods forged ``W``
frames through it (every nsd relays ``_NAMING`` frames to every subscriber) while
the second nsd restarts 20 times. Before the fix a ``W`` was believed when it came
within a window after *any* naming connection's handshake, so the forged one
arriving over the first nsd's connection often beat the second nsd's own welcome:
the victim's naming PUB connected to the attacker's socket. Now a ``W`` counts only
as the first frame of the connection that just shook hands.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import zmq
import zmq.asyncio

import aoz
from aoz._discovery.nsd import NamingDaemon
from aoz._protocol.naming import NamingType

from ..ports import free_port
from .helpers import eventually, forged, naming_attacker

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

RESTARTS = 20
FAST: dict[str, Any] = {"beacon_interval": 0.5, "connect_interval": 0.05, "connect_retries": 200}


def xsubs(node: aoz.Node) -> list[str]:
    driver = node._driver
    assert driver is not None and driver._state is not None
    return driver._state.xsub_endpoints


async def test_a_forged_welcome_flood_never_wins_an_nsd_restart() -> None:
    ctx = zmq.asyncio.Context.instance()
    trap = ctx.socket(zmq.XSUB)  # where the forged W points
    trap.setsockopt(zmq.LINGER, 0)
    trap_ep = f"tcp://127.0.0.1:{trap.bind_to_random_port('tcp://127.0.0.1')}"
    mon = trap.get_monitor_socket(zmq.EVENT_ACCEPTED)
    port2 = free_port()
    accepted = welcomed = 0
    nsd2 = NamingDaemon(port=port2)
    await nsd2.__aenter__()
    try:
        async with (
            NamingDaemon(port=0) as nsd1,
            aoz.connect(naming=[nsd1.endpoint, nsd2.endpoint], **FAST) as victim,
            naming_attacker(nsd1.xsub_endpoint) as evil,
            anyio.create_task_group() as tg,
        ):
            await eventually(lambda: len(xsubs(victim)) == 2, "both nsds welcomed the victim")
            flood = forged(NamingType.WELCOME, "", trap_ep)

            async def spam() -> None:
                while True:
                    await evil.send(flood)
                    await anyio.sleep(0.001)

            tg.start_soon(spam)
            for _ in range(RESTARTS):
                await nsd2.__aexit__(None, None, None)
                nsd2 = NamingDaemon(port=port2)
                await nsd2.__aenter__()
                new = nsd2.xsub_endpoint
                # the real W, or the forged one instead (no event: the naming state's)
                with anyio.move_on_after(5):
                    for _ in range(500):
                        if new in xsubs(victim) or trap_ep in xsubs(victim):
                            break
                        await anyio.sleep(0.01)
                welcomed += new in xsubs(victim)
                if trap_ep in xsubs(victim):
                    accepted += 1
                    victim._driver._state.forget_xsub(trap_ep)  # type: ignore[union-attr]
            tg.cancel_scope.cancel()
            refused = victim.statistics().discovery["welcomes_refused"]
        print(f"forged W accepted in {accepted} of {RESTARTS} nsd restarts, the nsd's own "
              f"in {welcomed} ({refused} refused)")
        assert accepted == 0
        assert welcomed == RESTARTS
        with pytest.raises(zmq.Again):
            await mon.recv_multipart(zmq.NOBLOCK)  # nobody ever connected to the trap
    finally:
        await nsd2.__aexit__(None, None, None)
        trap.disable_monitor()
        mon.close(linger=0)
        trap.close(linger=0)
