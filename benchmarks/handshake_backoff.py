"""Failed CURVE handshakes per minute caused by one misconfigured client (issue #11).

A CURVE server (a raw XPUB, counting ``HANDSHAKE_FAILED_*`` on its monitor) and a
client that has the wrong server key: first a plain pyzmq SUB with aoz's former
options (the baseline, libzmq retrying every ``reconnect_interval``), then an aoz node
(aoz._mesh.sockopts back-off). Both run for the same window in the same process::

    python -m benchmarks.handshake_backoff --seconds 60
"""

from __future__ import annotations

import argparse
import time

import anyio
import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

import aoz
from aoz._mesh.security import keypair
from aoz._mesh.sockopts import HANDSHAKE_FAILED


async def _count(seconds: float, client: str) -> int:
    _, server_secret = keypair()
    wrong, _ = keypair()
    ctx = zmq.asyncio.Context.instance()
    server = ctx.socket(zmq.XPUB)
    server.setsockopt(zmq.LINGER, 0)
    server.setsockopt(zmq.CURVE_SERVER, 1)
    server.setsockopt(zmq.CURVE_SECRETKEY, server_secret.encode())
    port = server.bind_to_random_port("tcp://127.0.0.1")
    mon = server.get_monitor_socket()
    endpoint = f"tcp://127.0.0.1:{port}"
    failures = 0

    async def watch() -> None:
        nonlocal failures
        with anyio.move_on_after(seconds):
            while True:
                ev = await recv_monitor_message(mon)
                failures += ev["event"] in HANDSHAKE_FAILED

    try:
        if client == "pyzmq":
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.RECONNECT_IVL, 100)  # aoz's reconnect_interval
            sub.setsockopt(zmq.RECONNECT_IVL_MAX, 60_000)  # does not help: see sockopts.py
            sub.curve_serverkey = wrong.encode()
            sub.curve_publickey, sub.curve_secretkey = zmq.curve_keypair()
            sub.connect(endpoint)
            try:
                await watch()
            finally:
                sub.close(linger=0)
        else:
            async with aoz.connect(
                connect=[endpoint], curve_server_public=wrong, curve_server_secret=server_secret
            ):
                await watch()
    finally:
        server.disable_monitor()
        mon.close(linger=0)
        server.close(linger=0)
    return failures


async def _main(seconds: float) -> None:
    for client in ("pyzmq", "aoz"):
        start = time.monotonic()
        n = await _count(seconds, client)
        per_minute = n * 60.0 / (time.monotonic() - start)
        print(f"{client:6} {n:5d} failed handshakes in {seconds:.0f} s ({per_minute:.0f}/min)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    anyio.run(_main, args.seconds)


if __name__ == "__main__":
    main()
