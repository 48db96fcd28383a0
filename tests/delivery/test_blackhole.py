"""A network blackhole (nftables drops everything on the link for 4 s) between a
publisher and a subscriber in a network namespace the test creates: the loss is
reported exactly and fresh data flows again promptly after the link heals.

Needs root, ``ip`` (iproute2) and ``nft`` (nftables); skipped cleanly otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator

import anyio
import pytest

from .harness import role

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=10)


@pytest.fixture
def netns() -> Iterator[str]:
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nft"):
        pytest.skip("needs root, iproute2 (ip) and nftables (nft)")
    name = f"aoz-{uuid.uuid4().hex[:8]}"
    try:
        _run("ip", "netns", "add", name)
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"cannot create a network namespace here: {exc}")
    try:
        _run("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


def _nft(ns: str, script: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=script.encode(),
                   check=True, capture_output=True, timeout=10)


async def test_blackhole_loss_is_exact_and_fresh_data_follows_the_heal(netns: str) -> None:
    prefix = ["ip", "netns", "exec", netns]
    with role("pub", {"subject": "BH", "rate": 2000}, prefix) as pub:
        endpoint = (await pub.event("ready"))["endpoint"]
        port = endpoint.rsplit(":", 1)[1]
        with role("sub", {"endpoint": endpoint, "subject": "BH"}, prefix) as sub:
            await sub.event("ready")
            await pub.event("subscribed")
            await anyio.sleep(1.0)  # steady flow before the cut
            _nft(netns, f"""
                table inet aoz {{
                    chain input {{
                        type filter hook input priority 0;
                        tcp dport {port} drop
                        tcp sport {port} drop
                    }}
                }}
            """)
            await anyio.sleep(4.0)  # the blackhole
            _nft(netns, "delete table inet aoz")
            healed = time.monotonic()
            gap = await sub.event("gap", timeout=30)
            await anyio.sleep(0.5)  # fresh data keeps flowing for a while
            pub.stop_input()
            result = await sub.event("result", timeout=30)
            sent = (await pub.event("result", timeout=30))["sent"]
    print(f"blackhole: lost {result['lost']} (gap {gap['gap']}), fresh data "
          f"{gap['t'] - healed:.3f} s after the heal, received {result['received']}")
    assert gap["gap"] > 0
    assert gap["t"] - healed < 1.3, f"fresh data {gap['t'] - healed:.2f} s after the heal"
    assert result["first"] == 1 and result["last"] <= sent
    expected = result["last"] - result["first"] + 1
    assert result["received"] + result["lost"] + result["dropped"] == expected
    assert result["lost"] >= gap["gap"]
