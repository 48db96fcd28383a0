"""The naming daemon and the broker: welcome bytes, forwarding, the CLI entry point."""

from __future__ import annotations

import os
import signal
import socket
import struct

import anyio
import pytest
import zmq
import zmq.asyncio

from aoz._discovery.broker import Broker
from aoz._discovery.nsd import NamingDaemon
from aoz.errors import ClosedError, TransportError

from .helpers import child, naming_frame, readline


async def _recv(sock: zmq.asyncio.Socket, timeout: float = 5.0) -> bytes:
    with anyio.fail_after(timeout):
        return await sock.recv()


async def test_welcome_frame_layout_field_by_field() -> None:
    ctx = zmq.asyncio.Context.instance()
    async with NamingDaemon(host="127.0.0.1", port=0) as nsd:
        assert nsd.endpoint.startswith("tcp://127.0.0.1:")
        assert nsd.xsub_endpoint.startswith("tcp://127.0.0.1:")
        assert nsd.xsub_endpoint != nsd.endpoint
        sub = ctx.socket(zmq.SUB)
        try:
            sub.setsockopt(zmq.SUBSCRIBE, b"_NAMING")
            sub.connect(nsd.endpoint)
            data = await _recv(sub)
        finally:
            sub.close(linger=0)
    assert len(data) == 882
    assert data[0:257] == b"_NAMING".ljust(257, b"\0")
    assert data[257:258] == b"W"
    assert data[258:515] == b"nsd".ljust(257, b"\0")
    assert data[515:580] == socket.gethostname().encode()[:64].ljust(65, b"\0")
    assert struct.unpack("<q", data[580:588]) == (os.getpid(),)
    assert data[588:625] == b"\0" * 37  # no uuid in a welcome
    assert data[625:882] == nsd.xsub_endpoint.encode().ljust(257, b"\0")


async def test_nsd_forwards_naming_frames_and_welcomes_every_subscriber() -> None:
    ctx = zmq.asyncio.Context.instance()
    async with NamingDaemon(port=0) as nsd:
        subs = [ctx.socket(zmq.SUB) for _ in range(2)]
        pub = ctx.socket(zmq.PUB)
        try:
            for s in subs:
                s.setsockopt(zmq.SUBSCRIBE, b"_NAMING")
                s.connect(nsd.endpoint)
                assert (await _recv(s))[257:258] == b"W"
            pub.connect(nsd.xsub_endpoint)
            frame = naming_frame(b"C", "3669840e-d043-11ea-adc2-fcaa146e6b01", "tcp://1.2.3.4:5")
            got = b""
            with anyio.fail_after(5):
                for _ in range(100):  # until the subscription reached our PUB through the proxy
                    await pub.send(frame)
                    with anyio.move_on_after(0.05):
                        got = await subs[0].recv()
                        break
            assert got == frame
            assert await _recv(subs[1]) == frame
        finally:
            for s in [*subs, pub]:
                s.close(linger=0)


async def test_broker_forwards_both_ways() -> None:
    ctx = zmq.asyncio.Context.instance()
    async with Broker() as broker:
        pub, sub = ctx.socket(zmq.PUB), ctx.socket(zmq.SUB)
        try:
            pub.connect(broker.pub_endpoint)
            sub.setsockopt(zmq.SUBSCRIBE, b"A.B\0")
            sub.connect(broker.sub_endpoint)
            got = b""
            with anyio.fail_after(5):
                for _ in range(100):
                    await pub.send(b"A.BC\0\x01\0nope")  # filtered out at the broker
                    await pub.send(b"A.B\0\x01\0hello")
                    with anyio.move_on_after(0.05):
                        got = await sub.recv()
                        break
            assert got == b"A.B\0\x01\0hello"
        finally:
            pub.close(linger=0)
            sub.close(linger=0)
    assert broker.pub_endpoint != broker.sub_endpoint


async def test_port_in_use_and_restart_errors() -> None:
    async with NamingDaemon(port=0) as nsd:
        port = int(nsd.endpoint.rsplit(":", 1)[1])
        with pytest.raises(TransportError, match="another port"):
            await NamingDaemon(port=port).start()
        with pytest.raises(ClosedError):
            await nsd.start()
    await nsd.aclose()  # idempotent


async def test_main_prints_ready_and_exits_cleanly_on_sigterm() -> None:
    with child(["-m", "aoz._discovery.nsd", "--port", "0"]) as proc:
        assert proc.stderr is not None
        line = await readline(proc.stderr)
        assert "aoz nsd ready xpub=tcp://127.0.0.1:" in line and "xsub=tcp://" in line
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):
            code = await anyio.to_thread.run_sync(proc.wait)
        assert code == 0
