"""Helpers for discovery tests: nsd subprocesses, a raw OZ-style peer."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import uuid as uuidlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import IO

import anyio
import zmq
import zmq.asyncio

PY = sys.executable


async def readline(stream: IO[str], timeout: float = 15.0) -> str:
    with anyio.fail_after(timeout):
        return await anyio.to_thread.run_sync(stream.readline, abandon_on_cancel=True)


@contextmanager
def child(args: list[str]) -> Iterator[subprocess.Popen[str]]:
    """A Python subprocess, killed and reaped on exit."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [PY, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


@asynccontextmanager
async def nsd_process(port: int) -> AsyncIterator[subprocess.Popen[str]]:
    """``python -m aoz._discovery.nsd --port N``, returned once it printed its ready line."""
    with child(["-m", "aoz._discovery.nsd", "--port", str(port), "--log-level", "WARNING"]) as p:
        assert p.stderr is not None
        line = await readline(p.stderr)
        assert "ready" in line, line
        yield p


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


# ---------------------------------------------------------------- a raw OZ-style peer


def naming_frame(kind: bytes, uuid: str, endpoint: str, program: bytes = b"rawpeer") -> bytes:
    """A naming frame built from SPEC §3 alone (not with aoz._protocol.naming)."""
    return (
        b"_NAMING".ljust(257, b"\0")
        + kind
        + program.ljust(257, b"\0")
        + b"rawhost".ljust(65, b"\0")
        + struct.pack("<q", 4242)
        + uuid.encode().ljust(37, b"\0")
        + endpoint.encode().ljust(257, b"\0")
    )


class RawPeer:
    """An OZ node written with raw pyzmq: naming SUB/PUB plus its own data PUB/SUB."""

    def __init__(self, nsd_endpoint: str, data_port: int = 0) -> None:
        self.ctx = zmq.asyncio.Context.instance()
        self.uuid = str(uuidlib.uuid4())
        self.naming_sub = self.ctx.socket(zmq.SUB)
        self.naming_pub = self.ctx.socket(zmq.PUB)
        self.data_pub = self.ctx.socket(zmq.PUB)
        self.data_sub = self.ctx.socket(zmq.SUB)
        for s in (self.naming_sub, self.naming_pub, self.data_pub, self.data_sub):
            s.setsockopt(zmq.LINGER, 0)
        try:
            self.data_pub.bind(f"tcp://127.0.0.1:{data_port or '*'}")
        except zmq.ZMQError:
            self.close()
            raise
        last = self.data_pub.getsockopt(zmq.LAST_ENDPOINT)
        assert isinstance(last, bytes)
        self.endpoint = last.decode()
        self.naming_sub.setsockopt(zmq.SUBSCRIBE, b"_NAMING")
        self.naming_sub.connect(nsd_endpoint)
        self.connected: set[str] = set()
        self.welcomed = False

    def announce(self, kind: bytes = b"C") -> None:
        self.naming_pub.send(naming_frame(kind, self.uuid, self.endpoint))

    async def pump(self, timeout: float = 0.05) -> None:
        """Handle naming frames for a while (W -> connect PUB; C/c -> connect data SUB)."""
        with anyio.move_on_after(timeout):
            while True:
                raw = await self.naming_sub.recv()
                kind = raw[257:258]
                endpoint = raw[625:882].split(b"\0", 1)[0].decode(errors="replace")
                if kind == b"W" and not self.welcomed:
                    self.naming_pub.connect(endpoint)
                    self.welcomed = True
                elif (
                    kind in (b"C", b"c")
                    and endpoint.startswith("tcp://127.0.0.1:")
                    and endpoint not in self.connected
                ):
                    self.data_sub.connect(endpoint)
                    self.connected.add(endpoint)

    def close(self) -> None:
        for s in (self.naming_sub, self.naming_pub, self.data_pub, self.data_sub):
            s.close(linger=0)
