"""nsd-free discovery with UDP beacons (SPEC §6, after disc_zmq).

Every node binds a UDP socket to ``settings.udp_port`` on all interfaces (with
SO_REUSEADDR and SO_REUSEPORT, so several processes on one host share the port) and
sends its datagrams to ``settings.udp_address``. That address must be a *broadcast*
address -- the default ``127.255.255.255`` reaches every node on this host: Linux
delivers a broadcast datagram to every socket bound to the port, but a unicast one
to a single socket only.

A datagram is :func:`aoz._protocol.naming.encode_beacon`: version (u16 LE), the
16-byte node id (the uuid's bytes), the type byte (``C``/``c``/``D``) and the naming
frame's fields. The state machine is the naming one without the welcome step: the
node announces at once and is ready when its own datagram comes back.

>>> async def demo() -> None:  # doctest: +SKIP
...     async with aoz.connect(mode="udp", udp_port=40123) as node:
...         print(node.peers)
"""

from __future__ import annotations

import logging
import socket
import time
import uuid as uuidlib
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus

from .._protocol.naming import NamingFrame, NamingType, decode_beacon, encode_beacon
from ..config import Settings
from ..errors import DecodeError, NamingTimeout, TransportError
from .driver import DriverCore

if TYPE_CHECKING:
    from .links import DataLinks

__all__ = ["UdpDriver", "decode_datagram"]

log = logging.getLogger("aoz.discovery")

_BATCH = 512
_MAX_DATAGRAM = 2048


def decode_datagram(data: bytes) -> NamingFrame:
    """Decode a beacon and check that its node id is its uuid's bytes."""
    frame, node_id = decode_beacon(data)
    try:
        expected = uuidlib.UUID(frame.uuid).bytes
    except ValueError:
        raise DecodeError("beacon uuid is not a uuid", what="beacon") from None
    if node_id != expected:
        raise DecodeError("beacon node id does not match its uuid", what="beacon")
    return frame


class UdpDriver(DriverCore):
    """Discovery by UDP broadcast, with the same interface as the naming driver."""

    kind = "udp"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._sock: socket.socket | None = None
        self._frames: dict[NamingType, bytes] = {}
        self._node_id = b""

    def _open(self) -> socket.socket:
        s = self.settings
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if hasattr(socket, "SO_REUSEPORT"):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            sock.setblocking(False)
            sock.bind(("", s.udp_port))
        except OSError as exc:
            sock.close()
            raise TransportError(
                f"cannot bind the UDP discovery socket to port {s.udp_port}: {exc}; "
                "choose another `udp_port`"
            ) from exc
        return sock

    def _send(self, ftype: NamingType) -> None:
        assert self._state is not None
        if self._sock is None:
            return
        data = self._frames.get(ftype)
        if data is None:
            data = encode_beacon(self._state.frame(ftype), self._node_id)
            self._frames[ftype] = data
        try:
            self._sock.sendto(data, (self.settings.udp_address, self.settings.udp_port))
            self._counters["naming_out"] += 1
        except OSError as exc:  # a full buffer or no route: the next beacon retries
            self._counters["udp_send_errors"] = self._counters.get("udp_send_errors", 0) + 1
            log.debug("UDP beacon send failed: %s", exc)

    async def run(
        self, links: DataLinks, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Join the mesh by broadcast; ``task_status.started()`` once our datagram came back.

        Raises :class:`aoz.NamingTimeout` when it never does within
        ``connect_retries x connect_interval`` seconds.
        """
        s = self.settings
        self._links = links
        self._node_id = uuidlib.UUID(links.uuid).bytes
        self._state = state = self._make_state(links, require_welcome=False)
        sock = self._open()
        try:
            self._sock = sock
            self._apply(state.start(time.monotonic()))
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._receive, sock, name="aoz-udp-recv")
                await self._tick_loop(task_status)
                tg.cancel_scope.cancel()
        finally:
            self._sock = None
            sock.close()
        if self._failed is not None:
            timeout = s.connect_retries * s.connect_interval
            raise NamingTimeout(
                f"no UDP discovery datagram came back on port {s.udp_port} (sent to "
                f"{s.udp_address}) within {timeout:.1f} s; `udp_address` must be a broadcast "
                "address such as 127.255.255.255 and the port must not be firewalled",
                endpoints=[f"udp://{s.udp_address}:{s.udp_port}"],
                timeout=timeout,
            )

    async def goodbye(self) -> None:
        """Broadcast ``D`` so peers disconnect at once."""
        if self._state is not None:
            self._apply(self._state.stop())

    async def _receive(self, sock: socket.socket) -> None:
        while True:
            await anyio.wait_readable(sock)
            batch: list[bytes] = []
            try:
                while len(batch) < _BATCH:
                    batch.append(sock.recv(_MAX_DATAGRAM))
            except (BlockingIOError, InterruptedError):
                pass
            if batch:
                self._apply(self._decode_batch(batch, decode_datagram, time.monotonic()))
            await anyio.lowlevel.checkpoint()
