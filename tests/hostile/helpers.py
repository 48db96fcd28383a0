"""Helpers for the hostile-input tests: an attacker on the naming plane, bounded waits."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import zmq
import zmq.asyncio

from aoz._protocol.naming import NamingFrame, NamingType, encode_naming


def forged(kind: NamingType, uuid: str, endpoint: str) -> bytes:
    """A naming frame claiming to come from ``uuid`` at ``endpoint``."""
    return encode_naming(NamingFrame(kind, "mallory", "evil", 666, uuid, endpoint))


@asynccontextmanager
async def naming_attacker(
    xsub_endpoint: str, *, setup: Callable[[zmq.Socket[bytes]], None] | None = None
) -> AsyncIterator[zmq.asyncio.Socket]:
    """An XPUB connected to an nsd's XSUB, returned once the nsd subscribed to it.

    Anyone who can reach the nsd can do this: it is how every node announces itself.
    ``setup`` may set options (CURVE keys...) before connecting; then the caller waits
    for whatever it expects itself.
    """
    ctx = zmq.asyncio.Context.instance()
    sock = ctx.socket(zmq.XPUB)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        if setup is not None:
            setup(sock)
            sock.connect(xsub_endpoint)
        else:
            sock.connect(xsub_endpoint)
            with anyio.fail_after(10):
                sub = await sock.recv()
            assert sub == b"\x01_NAMING", sub
        yield sock
    finally:
        sock.close(linger=0)


async def eventually(pred: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Poll ``pred`` (no event exists for counters) until true; bounded in time and count."""
    with anyio.fail_after(timeout):
        for _ in range(int(timeout / 0.01) + 1):
            if pred():
                return
            await anyio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


def new_uuid() -> str:
    return str(uuidlib.uuid4())
