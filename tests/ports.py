"""Ports that tests choose themselves, safe when pytest-xdist runs tests side by side.

A test that needs a port number before anything binds it (an nsd restarted on the same
port, a port that nothing listens on, an endpoint handed to a subprocess) takes it from
here. The ports come from below the kernel's ephemeral range (32768-60999 by default),
where no ``bind(0)``, ``tcp://127.0.0.1:*`` or outgoing connection of any process lands,
and from a slice of their own per xdist worker, so two workers never pick the same one.
"""

from __future__ import annotations

import os
import random
import socket

_SLICES, _SLICE_BASE, _SLICE_SIZE = 16, 20000, 750
_TRIES = 200


def _worker_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")  # "gw3"; absent without xdist
    n = int(worker[2:]) if worker[2:].isdigit() else 0
    start = _SLICE_BASE + (n % _SLICES) * _SLICE_SIZE
    return range(start, start + _SLICE_SIZE)


def _free(kind: socket.SocketKind, host: str) -> int:
    ports = _worker_slice()
    for _ in range(_TRIES):
        port = random.choice(ports)
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in {ports.start}..{ports.stop - 1} after {_TRIES} tries")


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    return _free(socket.SOCK_STREAM, "127.0.0.1")


def free_udp_port() -> int:
    """A UDP port that was free a moment ago on every interface."""
    return _free(socket.SOCK_DGRAM, "")


def free_endpoint() -> str:
    """``tcp://127.0.0.1:<free_port()>``."""
    return f"tcp://127.0.0.1:{free_port()}"
