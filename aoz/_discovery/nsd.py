"""The naming daemon (nsd, SPEC §4): an XPUB/XSUB proxy that greets with a ``W`` frame.

Nodes connect their naming SUB to the XPUB at the well-known address; every new
connection is sent the ``W`` welcome (ZeroMQ's XPUB_WELCOME_MSG), whose endpoint field
names the XSUB, where nodes then connect their naming PUB. The daemon keeps no state,
so it can be restarted at will; a restart gives a new XSUB port and a new welcome.

Embedded (tests, demos)::

    async with NamingDaemon(host="127.0.0.1", port=0) as nsd:   # port 0 = ephemeral
        async with aoz.connect(naming=[nsd.endpoint]) as node:
            ...

The welcome is written by libzmq when a connection attaches to the XPUB (not when
a subscription arrives), so every naming SUB -- including one that reconnects after
the nsd restarted -- gets its own ``W`` without XPUB_VERBOSE. Subscriptions are
forwarded upstream once per topic, which is all an XSUB needs.

Standalone: ``aoz nsd --port 5756`` or ``python -m aoz._discovery.nsd --port 5756``;
it prints ``aoz nsd ready xpub=... xsub=...`` on stderr and exits 0 on SIGINT/SIGTERM.

Secured (``curve_server_secret=``, ``aoz nsd --curve-secret-file mesh.key
--curve-allow-file nodes.txt``): both sockets are CURVE servers with the mesh keypair
and only the listed client keys complete a handshake, so nobody else can announce,
leave or welcome; nodes join it with ``naming_curve=True``. This mode does not talk to
OZ programs (their naming sockets have no CURVE).

With ``identity=True`` (``aoz nsd --curve-identity``, for nodes with
``curve_identity=True``) the daemon also checks who speaks: every naming frame a node
publishes arrives with the key its connection authenticated with (ZAP's ``User-Id``),
and a ``C``/``c``/``D`` whose uuid that key does not own (:mod:`aoz._mesh.identity`), a ``W``
(only the daemon welcomes) or an undecodable frame is not relayed; counted in
:attr:`NamingDaemon.identity_refused` and logged once per key.

Every socket caps inbound messages at :data:`aoz._mesh.sockopts.NAMING_MAX` bytes and drops
handshakes that take longer than ``handshake_timeout``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from types import TracebackType

import anyio
import zmq

from .._mesh.endpoints import daemon_endpoint
from .._mesh.errmap import tolerated
from .._mesh.identity import IdentityTable
from .._mesh.security import ZapThread, public_key, read_key, read_keys
from .._mesh.sockopts import NAMING_MAX, apply_curve_server
from .._protocol.naming import NamingFrame, NamingType, decode_naming, encode_naming
from ..errors import AozError, ClosedError, ConfigError, DecodeError
from .broker import ProxyThread, bind_socket, tune

__all__ = ["NamingDaemon", "main", "welcome_frame"]

log = logging.getLogger("aoz.nsd")

DEFAULT_PORT = 5756
_WILDCARDS = {"*", "0.0.0.0", "::", "[::]", ""}
_LOGGED_KEYS = 1024  # refused keys logged once each (then silently counted)


def welcome_frame(xsub_endpoint: str, *, program: str = "nsd") -> bytes:
    """The ``W`` frame an nsd sends to each new subscriber (uuid empty, endpoint = XSUB).

    >>> len(welcome_frame("tcp://127.0.0.1:40000"))
    882
    """
    frame = NamingFrame(
        NamingType.WELCOME, program, socket.gethostname(), os.getpid(), "", xsub_endpoint
    )
    return encode_naming(frame)


class NamingDaemon:
    """An nsd: XPUB on ``host:port`` (0 = ephemeral), XSUB on an ephemeral port.

    :attr:`endpoint` is the XPUB address (what nodes list in ``naming=[...]``),
    :attr:`xsub_endpoint` the address announced in the welcome. When ``host`` is a
    wildcard, ``advertise`` (default: this machine's host name) replaces it in the
    welcome so remote nodes can connect.

    ``host`` may instead be an ``ipc://`` address (``port`` is then unused): the XPUB
    binds there and the XSUB beside it (``<host>.xsub``). Only aoz nodes on this host
    can use such an nsd (OZ programs name an nsd by address and port), so its nodes may
    announce ipc data endpoints (``transport="ipc"``; see :mod:`aoz._mesh.endpoints`).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        advertise: str | None = None,
        program: str = "nsd",
        heartbeat_interval: float = 1.0,
        handshake_timeout: float = 5.0,
        curve_server_secret: str | None = None,
        curve_allow: list[str] | None = None,
        identity: bool = False,
    ) -> None:
        if identity and curve_server_secret is None:
            raise ConfigError(
                "identity=True (--curve-identity) needs a secured nsd: the mesh secret key "
                "and curve_allow, whose keys are the identities it checks"
            )
        #: naming frames refused because their sender's key does not own their uuid
        self.identity_refused = 0
        self._identities = IdentityTable(curve_allow or ()) if identity else None
        self._refused_keys: set[str] = set()
        if curve_server_secret is not None:
            self.curve_server_public: str | None = public_key(curve_server_secret)
            if not curve_allow:
                raise ConfigError(
                    "a secured nsd needs curve_allow: the public keys of the nodes that may "
                    "use it (an empty list would let nobody in)"
                )
        else:
            self.curve_server_public = None
        self._curve_secret = curve_server_secret
        self._curve_allow = list(curve_allow or ())
        self._handshake = handshake_timeout
        self._zap: ZapThread | None = None
        self.host = host
        self.port = port
        self.program = program
        self._advertise = advertise
        self._heartbeat = heartbeat_interval
        self._proxy: ProxyThread | None = None
        self._closed = False
        self.endpoint = ""
        self.xsub_endpoint = ""

    @property
    def running(self) -> bool:
        return self._proxy is not None and not self._closed

    async def start(self) -> None:
        """Bind and start forwarding (``async with`` calls this).

        Raises :class:`aoz.TransportError` when the port is taken.
        """
        if self._closed or self._proxy is not None:
            raise ClosedError("a NamingDaemon can be started once; create a new one")
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        xsub = ctx.socket(zmq.XSUB)
        xpub = ctx.socket(zmq.XPUB)
        try:
            for sock in (xsub, xpub):
                tune(sock, self._heartbeat)
                sock.setsockopt(zmq.MAXMSGSIZE, NAMING_MAX)
                sock.setsockopt(zmq.HANDSHAKE_IVL, max(1, int(self._handshake * 1000)))
                if self._curve_secret is not None:
                    apply_curve_server(sock, self._curve_secret, domain=b"aoz-naming")
            if self._curve_secret is not None:
                self._zap = ZapThread(ctx, self._curve_allow)
                self._zap.start()
            xsub_bound = bind_socket(
                xsub, daemon_endpoint(self.host, 0, suffix=".xsub"), "nsd XSUB"
            )
            self.xsub_endpoint = self._advertised(xsub_bound)
            xpub.setsockopt(
                zmq.XPUB_WELCOME_MSG, welcome_frame(self.xsub_endpoint, program=self.program)
            )
            self.endpoint = self._advertised(
                bind_socket(xpub, daemon_endpoint(self.host, self.port), "nsd XPUB")
            )
        except BaseException:
            xsub.close(linger=0)
            xpub.close(linger=0)
            if self._zap is not None:
                self._zap.stop()
            ctx.term()
            raise
        check = self._judge if self._identities is not None else None
        self._proxy = ProxyThread(ctx, xsub, xpub, name="aoz-nsd", check=check)
        self._proxy.start()
        log.debug("nsd ready: xpub=%s xsub=%s", self.endpoint, self.xsub_endpoint)

    def _judge(self, frame: zmq.Frame) -> bool:
        """Whether a naming frame from a node may be relayed (runs in the proxy thread):
        its uuid must be one its sender's key owns."""
        table = self._identities
        assert table is not None
        key: object = ""
        with tolerated("a naming frame without a User-Id", "its connection has no ZAP identity"):
            key = frame.get("User-Id")
        try:
            named: NamingFrame | None = decode_naming(frame.bytes)
        except DecodeError:
            named = None
        if named is not None and named.type is not NamingType.WELCOME and isinstance(
            key, str) and table.owns_uuid(key, named.uuid):
            return True
        self.identity_refused += 1
        if key not in self._refused_keys and len(self._refused_keys) < _LOGGED_KEYS:
            self._refused_keys.add(str(key))
            log.warning(
                "refused a naming frame (%s): its uuid is not one its sender's key owns; "
                "sender key %s (logged once per key)",
                "undecodable" if named is None else f"{named.type.name} {named.uuid}", key,
            )
        return False

    def _advertised(self, bound: str) -> str:
        if not bound.startswith("tcp://"):  # ipc: the path is the same for every node
            return bound
        host, _, port = bound.removeprefix("tcp://").rpartition(":")
        if host in _WILDCARDS or self._advertise:
            host = self._advertise or socket.gethostname()
        return f"tcp://{host}:{port}"

    async def aclose(self) -> None:
        """Stop forwarding and release both ports (idempotent)."""
        self._closed = True
        if self._zap is not None:  # before the proxy terminates the context
            zap, self._zap = self._zap, None
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(zap.stop)
        if self._proxy is not None:
            await self._proxy.stop()

    @property
    def refused(self) -> int:
        """Handshakes refused because the client key is not allowed (secured mode)."""
        return 0 if self._zap is None else self._zap.denied

    async def __aenter__(self) -> NamingDaemon:
        await self.start()
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _keys(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    secret = read_key(args.curve_secret_file) if args.curve_secret_file else None
    allow = list(args.curve_allow or ())
    for path in args.curve_allow_file or ():
        allow.extend(read_keys(path))
    if allow and secret is None:
        raise ConfigError("--curve-allow needs --curve-secret-file (the mesh secret key)")
    return secret, allow


async def _serve(args: argparse.Namespace, secret: str | None, allow: list[str]) -> int:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with NamingDaemon(
            args.bind,
            args.port,
            advertise=args.advertise,
            heartbeat_interval=args.heartbeat,
            curve_server_secret=secret,
            curve_allow=allow or None,
            identity=args.curve_identity,
        ) as nsd:
            secured = " curve=on" if secret is not None else ""
            print(
                f"aoz nsd ready xpub={nsd.endpoint} xsub={nsd.xsub_endpoint} "
                f"pid={os.getpid()}{secured}",
                file=sys.stderr,
                flush=True,
            )
            async for signum in signals:
                log.info("nsd stopping on signal %s", signal.Signals(signum).name)
                break
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run a naming daemon until SIGINT/SIGTERM; returns the exit status.

    >>> main(["--port", "5756"])  # doctest: +SKIP
    """
    parser = argparse.ArgumentParser(
        prog="aoz nsd", description="aoz/OZ naming daemon (XPUB/XSUB proxy with a W welcome)"
    )
    parser.add_argument(
        "--bind",
        default="127.0.0.1",
        help="interface to bind (default 127.0.0.1), or ipc:///path for aoz nodes on this host",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="XPUB port nodes connect to (default 5756)"
    )
    parser.add_argument(
        "--advertise", default=None, help="host name put in the welcome when binding a wildcard"
    )
    parser.add_argument(
        "--heartbeat", type=float, default=1.0, help="ZeroMQ heartbeat interval, s (0 = off)"
    )
    parser.add_argument(
        "--curve-secret-file",
        default=None,
        help="secure the naming plane with CURVE: file with the mesh secret key "
        "(aoz keygen); OZ programs cannot use a secured nsd",
    )
    parser.add_argument(
        "--curve-allow",
        action="append",
        help="a node public key allowed in (repeatable; write --curve-allow=KEY, "
        "as a key may start with '-')",
    )
    parser.add_argument(
        "--curve-allow-file", action="append", help="file of allowed public keys, one a line"
    )
    parser.add_argument(
        "--curve-identity",
        action="store_true",
        help="relay only naming frames whose uuid the sender's key owns (nodes with "
        "curve_identity=True); needs --curve-secret-file and --curve-allow*",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING...")
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        secret, allow = _keys(args)
        return anyio.run(_serve, args, secret, allow)
    except AozError as exc:
        print(f"aoz nsd: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
