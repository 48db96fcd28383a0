"""Endpoints: the one place that parses, validates and chooses ZeroMQ addresses (pure).

Owns the transport seam: which transports aoz speaks (``tcp``, ``ipc``), what a valid
address of each looks like, the address a node's data PUB binds to, and the rule of
which addresses may travel where. No zmq, no sockets: the rooms that own sockets bind
and connect what this module hands them. Adding a transport starts here.

Accepted forms::

    tcp://host:port      host: a name, IPv4, or [IPv6]; port 1..65535
    tcp://host:*         bind only: an ephemeral port (also tcp://host:0); host may be *
    ipc:///abs/path      a Unix socket file (at most 107 bytes: the kernel's limit)
    ipc://rel/path       the same, relative to the working directory
    ipc://@name          Linux's abstract namespace: no file, gone with the socket
    ipc://*              bind only: libzmq picks a file

The OZ rule. OZ programs and OZ's nsd speak tcp only: their config names an nsd by
address and port, and they connect to whatever endpoint a naming frame carries.
So an ``ipc://`` data endpoint may be announced only where no OZ program can read
it: through an aoz nsd reached over ``ipc://`` (which no OZ program can be
configured to use) or in UDP-beacon mode (aoz's own datagrams). :func:`ipc_mesh`
says whether a node's settings are such a place; there a node announces and accepts
ipc endpoints (the latter only from peers on its own host: an ipc address means
nothing elsewhere). Everywhere else naming frames carry :func:`is_oz_endpoint`
addresses, as OZ's own do. Static and brokered modes announce nothing, so their
``bind``/``connect``/``broker_*`` addresses may use either transport.

>>> parse_endpoint("tcp://127.0.0.1:5756")
Endpoint(transport='tcp', address='127.0.0.1:5756', host='127.0.0.1', port=5756)
>>> connectable("tcp://0.0.0.0:5556"), is_oz_endpoint("ipc:///tmp/x")
('tcp://127.0.0.1:5556', False)
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from ..errors import ConfigError, UsageError

__all__ = [
    "IPC_PATH_MAX",
    "TRANSPORTS",
    "Endpoint",
    "Transport",
    "bind_endpoint",
    "check_endpoint",
    "connectable",
    "daemon_endpoint",
    "ipc_dir",
    "ipc_mesh",
    "is_aoz_endpoint",
    "is_ipc_endpoint",
    "is_oz_endpoint",
    "parse_endpoint",
]

Transport = Literal["tcp", "ipc"]
TRANSPORTS: tuple[Transport, ...] = ("tcp", "ipc")
#: longest ipc path: ``sun_path`` is 108 bytes, one of them the terminating NUL
IPC_PATH_MAX = 107

_HOST = re.compile(r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+")
_EXAMPLES = "tcp://host:port, or ipc:///path between aoz nodes on one host"


class Settings(Protocol):
    """The settings this module reads (:class:`aoz.config.Settings` has them all)."""

    @property
    def mode(self) -> str: ...
    @property
    def naming(self) -> Sequence[str]: ...
    @property
    def publish_address(self) -> str: ...
    @property
    def transport(self) -> str: ...
    @property
    def ipc_dir(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed endpoint. ``port`` is ``None`` for an ephemeral bind (``*``)."""

    transport: Transport
    #: what follows ``<transport>://``
    address: str
    #: tcp: the host part (``*`` for every interface); ipc: empty
    host: str = ""
    port: int | None = None

    def __str__(self) -> str:
        return f"{self.transport}://{self.address}"


def parse_endpoint(text: str, *, bind: bool = False, what: str = "endpoint") -> Endpoint:
    """Parse ``text``; a bind address (``bind=True``) may use wildcards.

    Raises :class:`aoz.ConfigError` naming ``what`` and the accepted forms.

    >>> parse_endpoint("ipc://@aoz-demo").address
    '@aoz-demo'
    >>> parse_endpoint("tcp://*:*", bind=True).port is None
    True
    """
    if not isinstance(text, str):
        raise ConfigError(f"{what} must be a str such as {_EXAMPLES}, not {type(text).__name__}")
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in TRANSPORTS:
        raise ConfigError(f"{what} {text!r}: aoz speaks {_EXAMPLES}")
    if any(c.isspace() or c == "\0" for c in rest):
        raise ConfigError(f"{what} {text!r}: no spaces, newlines or NULs in an address")
    if scheme == "ipc":
        return _parse_ipc(text, rest, bind=bind, what=what)
    return _parse_tcp(text, rest, bind=bind, what=what)


def _parse_tcp(text: str, rest: str, *, bind: bool, what: str) -> Endpoint:
    host, sep, port_text = rest.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{what} {text!r}: a tcp address is tcp://host:port")
    if host == "*" and not bind:
        raise ConfigError(
            f"{what} {text!r}: * (every interface) is for binding; connect to a host name "
            "or address"
        )
    if host != "*" and not _HOST.fullmatch(host):
        raise ConfigError(
            f"{what} {text!r}: the host must be a name, an IPv4 address or a bracketed "
            "IPv6 address such as [::1]"
        )
    if port_text in ("*", "0"):
        if not bind:
            raise ConfigError(
                f"{what} {text!r}: an ephemeral port (* or 0) is for binding; connect to "
                "the port the other side bound"
            )
        return Endpoint("tcp", rest, host, None)
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        hint = " (0 or * picks a free port when binding)" if bind else ""
        raise ConfigError(f"{what} {text!r}: the port must be within 1..65535{hint}")
    return Endpoint("tcp", rest, host, int(port_text))


def _parse_ipc(text: str, rest: str, *, bind: bool, what: str) -> Endpoint:
    if rest == "*":
        if not bind:
            raise ConfigError(f"{what} {text!r}: ipc://* (a file libzmq picks) is for binding")
        return Endpoint("ipc", rest)
    if not rest or rest == "@":
        raise ConfigError(f"{what} {text!r}: an ipc address is ipc:///path or ipc://@name")
    if len(rest.encode()) > IPC_PATH_MAX:
        raise ConfigError(
            f"{what} {text!r}: an ipc path is at most {IPC_PATH_MAX} bytes (the kernel's "
            "limit); choose a shorter directory"
        )
    return Endpoint("ipc", rest)


def check_endpoint(text: str, *, bind: bool = False, what: str = "endpoint") -> str:
    """``text`` unchanged when it is a valid endpoint, else :class:`aoz.ConfigError`."""
    parse_endpoint(text, bind=bind, what=what)
    return text


def _valid(text: str) -> Endpoint | None:
    try:
        return parse_endpoint(text)
    except ConfigError:
        return None


def is_oz_endpoint(text: str) -> bool:
    """Whether an OZ program can connect to ``text``: ``tcp://host:port``, no wildcard.

    >>> is_oz_endpoint("tcp://127.0.0.1:5756"), is_oz_endpoint("tcp://h:0")
    (True, False)
    """
    ep = _valid(text)
    return ep is not None and ep.transport == "tcp"


def is_ipc_endpoint(text: str) -> bool:
    """Whether ``text`` is an ipc address a node can connect to."""
    ep = _valid(text)
    return ep is not None and ep.transport == "ipc"


def is_aoz_endpoint(text: str) -> bool:
    """Whether an aoz node can connect to ``text`` (tcp or ipc, no wildcard)."""
    return _valid(text) is not None


def connectable(endpoint: str) -> str:
    """A bound wildcard address (tcp://0.0.0.0:5556) as an address to connect to.

    >>> connectable("tcp://[::]:1"), connectable("ipc:///tmp/x")
    ('tcp://[::1]:1', 'ipc:///tmp/x')
    """
    return endpoint.replace("//0.0.0.0:", "//127.0.0.1:").replace("//[::]:", "//[::1]:")


def ipc_mesh(settings: Settings) -> bool:
    """Whether this node's naming plane reaches no OZ program, so naming frames may carry
    ipc endpoints (see the module docstring): UDP-beacon mode, or naming mode with every
    nsd reached over ipc."""
    if settings.mode == "udp":
        return True
    if settings.mode == "naming":
        return bool(settings.naming) and all(is_ipc_endpoint(ep) for ep in settings.naming)
    return False


def ipc_dir(settings: Settings, environ: Mapping[str, str] | None = None) -> str:
    """Where a node's ipc socket files go: ``settings.ipc_dir``, else
    ``$XDG_RUNTIME_DIR`` (per user, cleaned at logout), else ``$TMPDIR`` or ``/tmp``."""
    env = os.environ if environ is None else environ
    return (
        settings.ipc_dir or env.get("XDG_RUNTIME_DIR") or env.get("TMPDIR") or "/tmp"
    ).rstrip("/") or "/"


def bind_endpoint(
    settings: Settings, uuid: str, environ: Mapping[str, str] | None = None
) -> str:
    """The data PUB's bind address in naming and UDP modes.

    ``transport="tcp"`` (the default, what OZ does): ``tcp://<publish_address>:*``.
    ``transport="ipc"``: ``ipc://<ipc_dir>/aoz-<uuid>.ipc``, one file per node (libzmq
    removes it when the socket closes). Static mode binds ``settings.bind`` and
    brokered mode binds nothing, so they raise :class:`aoz.UsageError`.

    >>> from aoz.config import Settings
    >>> bind_endpoint(Settings(), "3669840e-d043-11ea-adc2-fcaa146e6b01")
    'tcp://127.0.0.1:*'
    >>> bind_endpoint(Settings(mode="udp", transport="ipc", ipc_dir="/run/aoz"), "u1")
    'ipc:///run/aoz/aoz-u1.ipc'
    """
    if settings.mode not in ("naming", "udp"):
        raise UsageError(
            f"{settings.mode} mode has no chosen bind address: static mode binds "
            "`bind`, brokered mode connects to the broker"
        )
    if settings.transport == "tcp":
        return check_endpoint(f"tcp://{settings.publish_address}:*", bind=True,
                              what="publish_address")
    directory = ipc_dir(settings, environ)
    return check_endpoint(f"ipc://{directory.rstrip('/')}/aoz-{uuid}.ipc", bind=True,
                          what="the ipc data endpoint (set ipc_dir to a shorter directory)")


def daemon_endpoint(host: str, port: int, *, suffix: str = "") -> str:
    """A daemon's bind address from ``--bind`` and ``--port``.

    ``host`` is an interface (``127.0.0.1``, ``0.0.0.0``, ``*``): ``tcp://host:port``
    (0 = ephemeral). Or a whole ``ipc://`` address: that address plus ``suffix``
    (the nsd's XSUB and the broker's two sockets each need their own file).

    >>> daemon_endpoint("127.0.0.1", 0), daemon_endpoint("ipc:///run/nsd", 1, suffix=".xsub")
    ('tcp://127.0.0.1:*', 'ipc:///run/nsd.xsub')
    """
    if host.startswith("ipc://"):
        return check_endpoint(host + suffix, bind=True, what="daemon address")
    if "://" in host:
        raise ConfigError(
            f"bind address {host!r}: give an interface (127.0.0.1, 0.0.0.0) with a port, "
            "or a whole ipc:///path"
        )
    return check_endpoint(f"tcp://{host}:{port or '*'}", bind=True, what="daemon address")
