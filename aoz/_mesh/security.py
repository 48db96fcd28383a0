"""CURVE encryption and key-based authentication for the data plane.

Model
-----
A mesh shares one *server* keypair: every node's data publisher is a CURVE server
with the mesh secret key, and every data subscriber is a CURVE client that knows the
mesh public key and has a keypair of its own. All data traffic is then encrypted.
Authentication is an allow-list of client public keys (``curve_allow``): a publisher
hands its frames only to subscribers whose key is on the list (the node's own key is
always allowed, for self-delivery). Without a list, any client that knows the mesh
public key may subscribe: encryption without authentication.

The naming plane (nsd traffic) stays in the clear by default, as in OZ: it carries
endpoints, not data, and a peer announced by an impostor cannot complete the CURVE
handshake. With ``naming_curve=True`` it is secured with the same keys: the nsd
(``aoz nsd --curve-secret-file mesh.key --curve-allow-file nodes.txt``) is a CURVE
server with the mesh keypair and allows only ``curve_allow``, and nodes' naming
sockets are CURVE clients with their own keypair, so only listed keys can announce
(``C``), leave (``D``) or welcome (``W``). **Such a mesh does not talk to OZ
programs**: OZ's naming sockets speak plain ZMTP, and an OZ nsd cannot serve it.

``aoz keygen NAME`` writes ``NAME.key`` (the secret key) and ``NAME.pub`` (the public
key), both with mode 0600; keys are never logged.

Keys are Z85 text (40 characters), as ``zmq.curve_keypair()`` and ``aoz keys`` make::

    server_public, server_secret = aoz.security.keypair()
    node_public, node_secret = aoz.security.keypair()
    aoz.connect(curve_server_public=server_public, curve_server_secret=server_secret,
                curve_public=node_public, curve_secret=node_secret,
                curve_allow=[node_public, other_node_public])

Identities bound to keys (``curve_identity=True``, :mod:`aoz._mesh.identity`): no mesh
secret on nodes. Each node's data publisher is a CURVE server with the node's *own*
keypair, and its SUB connects to each peer with the key that peer's uuid names (set
just before that connect: libzmq copies the options into each connection). So a data
link comes up only with the holder of the announced uuid's key, and every frame the
SUB reads can be traced to the key of its connection (``ZMQ_SRCFD`` -> the endpoint
the monitor reported for that descriptor -> its key): :class:`VerifyingSub` refuses
sequenced frames whose publisher id that key does not own, and (with
``curve_permissions``) publish frames on subjects that key may not publish.

This module's ZAP logic is pure (frames in, frames out); the node owns the socket.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import zmq
from zmq.utils import z85

from .._protocol import heartbeat
from .._protocol.frames import Kind, decode_frame, parse_handle, publish_subject_end
from .._protocol.sequence import FLAG, HEADER_LEN, PACK
from ..errors import ConfigError, DecodeError
from .errmap import drain_error, mapped, tolerated
from .identity import IdentityTable, Permissions, SubscribeGate
from .message import data_start

__all__ = [
    "ZAP_ENDPOINT",
    "DataCurve",
    "VerifyingSub",
    "ZapThread",
    "keypair",
    "public_key",
    "read_key",
    "read_keys",
    "write_keypair",
    "zap_reply",
]

log = logging.getLogger("aoz.security")

#: where ZeroMQ looks for the authentication handler of a context
ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_ZAP_VERSION = b"1.0"


def keypair() -> tuple[str, str]:
    """A new CURVE keypair as Z85 text: ``(public, secret)``."""
    public, secret = zmq.curve_keypair()
    return public.decode("ascii"), secret.decode("ascii")


def zap_reply(request: Sequence[bytes], allowed: Collection[str]) -> tuple[list[bytes], bool]:
    """Answer one ZAP request (RFC 27): allow CURVE clients whose key is in ``allowed``.

    Returns the reply frames and whether the client was allowed. A request that is not
    a well-formed ZAP 1.0 CURVE request is denied (status 400) or, when even the request
    id is missing, answered with a 500.
    """
    if len(request) < 6 or request[0] != _ZAP_VERSION:
        rid = request[1] if len(request) > 1 else b""
        return [_ZAP_VERSION, rid, b"500", b"malformed ZAP request", b"", b""], False
    rid, mechanism = request[1], request[5]
    if mechanism != b"CURVE" or len(request) < 7 or len(request[6]) != 32:
        return [_ZAP_VERSION, rid, b"400", b"CURVE required", b"", b""], False
    key = z85.encode(request[6]).decode("ascii")
    if key in allowed:
        return [_ZAP_VERSION, rid, b"200", b"OK", key.encode("ascii"), b""], True
    return [_ZAP_VERSION, rid, b"400", b"key not allowed", b"", b""], False


def public_key(secret: str) -> str:
    """The public key of a Z85 secret key.

    >>> pub, sec = keypair()
    >>> public_key(sec) == pub
    True
    """
    what = "not a CURVE secret key: expected 40 characters of Z85 text"
    try:
        with mapped(what):
            return zmq.curve_public(secret.encode("ascii")).decode("ascii")
    except (ValueError, UnicodeEncodeError) as exc:  # refused before ZeroMQ saw it
        raise ConfigError(what) from exc


def _check_key(text: str, where: str) -> str:
    key = text.strip()
    try:
        if len(key) != 40 or len(z85.decode(key.encode("ascii"))) != 32:
            raise ValueError
    except (ValueError, UnicodeEncodeError):
        # never echo the text: it may be a secret key with a typo
        raise ConfigError(f"{where} does not hold a 40-character Z85 CURVE key") from None
    return key


def write_keypair(prefix: str | os.PathLike[str], *, force: bool = False) -> tuple[Path, Path, str]:
    """Write a new keypair to ``PREFIX.key`` (secret) and ``PREFIX.pub``; mode 0600.

    Returns ``(secret_path, public_path, public_key)``. Existing files are kept (and
    :class:`aoz.errors.ConfigError` raised) unless ``force``. The files are created with
    mode 0600 from the start, so the secret is never readable by others.
    """
    base = Path(prefix)
    secret_path, public_path = Path(f"{base}.key"), Path(f"{base}.pub")
    if not force:
        for path in (secret_path, public_path):
            if path.exists():
                raise ConfigError(f"{path} exists; choose another name or pass --force")
    public, secret = keypair()
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    for path, text in ((secret_path, secret), (public_path, public)):
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:
            raise ConfigError(f"{path} exists; choose another name or pass --force") from None
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror}") from None
        with os.fdopen(fd, "w", encoding="ascii") as f:
            os.fchmod(f.fileno(), 0o600)  # also when --force reused an older file
            f.write(text + "\n")
    return secret_path, public_path, public


def read_key(path: str | os.PathLike[str]) -> str:
    """Read one Z85 key (public or secret) from a file written by :func:`write_keypair`."""
    try:
        text = Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the key file {path}: {exc}") from None
    return _check_key(text, f"key file {path}")


def read_keys(path: str | os.PathLike[str]) -> list[str]:
    """Read public keys, one per line (``#`` comments and blank lines skipped)."""
    try:
        lines = Path(path).read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the key list {path}: {exc}") from None
    keys = []
    for n, line in enumerate(lines, 1):
        # '#' is in the Z85 alphabet: a comment starts a line or follows whitespace
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            keys.append(_check_key(line, f"line {n} of {path}"))
    return keys


class ZapThread:
    """A ZAP handler (RFC 27) for one context, in a thread: for daemons whose sockets
    live in a proxy thread rather than on an event loop (the nsd).

    ``start()`` binds it; ``stop()`` ends it and closes its sockets (call it before the
    context is terminated).
    """

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], allowed: Collection[str]) -> None:
        self.allowed = frozenset(allowed)
        self.denied = 0
        self._sock: zmq.Socket[bytes] = ctx.socket(zmq.REP)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aoz-zap", daemon=True)

    def start(self) -> None:
        self._sock.bind(ZAP_ENDPOINT)
        self._thread.start()

    def _run(self) -> None:
        sock = self._sock
        try:
            with tolerated("the ZAP thread ended", "its context was terminated under it"):
                while not self._stop.is_set():
                    if not sock.poll(100):
                        continue
                    request = sock.recv_multipart()
                    reply, ok = zap_reply(request, self.allowed)
                    if not ok:
                        self.denied += 1
                        log.info("refused a naming-plane client: %s", reply[3].decode())
                    sock.send_multipart(reply)
        finally:
            sock.close(linger=0)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        else:
            self._sock.close(linger=0)


class DataCurve:
    """CURVE on a node's data sockets: the XPUB a CURVE server with the mesh's key, the
    SUB a client with the node's own keypair, and (with ``curve_allow``) a ZAP handler
    that admits the listed client keys. The node's data plane creates the sockets and
    its reader drives :meth:`drain_zap`; this class only configures and answers."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], settings: Any,
                 count: Callable[[str, int], None]) -> None:
        self._ctx = ctx
        self._s = settings
        self._count = count
        self.allowed: set[str] = set()
        self.zap: zmq.Socket[bytes] | None = None
        self.closing = False
        #: curve_identity: the listed keys' identities, and endpoint -> the key of the
        #: peer announced there (the node wires it to its discovery driver)
        self.identities: IdentityTable | None = None
        self.permissions: Permissions | None = None
        #: subscribe permissions: the XPUB applies only the filters this gate allows
        self.gate: SubscribeGate | None = None
        self.key_at: Callable[[str], str | None] = lambda endpoint: None
        self._refused_keys: set[str] = set()
        if settings.curve_identity:
            assert settings.curve_public is not None and settings.curve_allow is not None
            self.identities = IdentityTable({*settings.curve_allow, settings.curve_public})
            if settings.curve_permissions is not None:
                self.permissions = Permissions(settings.curve_permissions)
                if self.permissions.restricts_subscribe:
                    self.gate = SubscribeGate(self.permissions)

    def apply(self, pub: zmq.Socket[bytes], sub: zmq.Socket[bytes]) -> None:
        """Configure ``pub`` and ``sub``; opens the ZAP socket when there is an
        allow-list. Raises ConfigError for an invalid key."""
        s = self._s
        public, secret = s.curve_public, s.curve_secret
        if public is None or secret is None:
            public, secret = keypair()
        if s.curve_identity:  # our own keypair serves; each connect names its peer's key
            server_public, server_secret = public, secret
        else:
            assert s.curve_server_public and s.curve_server_secret
            server_public, server_secret = s.curve_server_public, s.curve_server_secret
        if s.curve_allow is not None:
            self.allowed = {*s.curve_allow, public}  # self-delivery is always allowed
            zap: zmq.Socket[bytes] = self._ctx.socket(zmq.REP)
            zap.setsockopt(zmq.LINGER, 0)
            zap.bind(ZAP_ENDPOINT)
            self.zap = zap
        what = ("invalid CURVE key: keys are 40-character Z85 strings; make them with "
                "aoz.security.keypair()")
        try:
            with mapped(what):  # libzmq refuses a key that is not Z85 with EINVAL
                pub.setsockopt(zmq.CURVE_SERVER, 1)
                pub.setsockopt(zmq.CURVE_SECRETKEY, server_secret.encode("ascii"))
                pub.setsockopt(zmq.ZAP_DOMAIN, b"aoz")
                if self.gate is not None:  # filters applied by read_subscription only
                    pub.setsockopt(zmq.XPUB_MANUAL, 1)
                sub.setsockopt(zmq.CURVE_SERVERKEY, server_public.encode("ascii"))
                sub.setsockopt(zmq.CURVE_PUBLICKEY, public.encode("ascii"))
                sub.setsockopt(zmq.CURVE_SECRETKEY, secret.encode("ascii"))
        except UnicodeEncodeError as exc:  # refused before ZeroMQ saw it
            raise ConfigError(what) from exc

    def before_connect(self, sub: zmq.Socket[bytes], endpoint: str) -> None:
        """``curve_identity``: name the key of the peer at ``endpoint`` as the server key
        of the connection about to be made (a peer no listed key owns gets a key nobody
        holds: its handshake fails)."""
        if self.identities is None:
            return
        key = self.key_at(endpoint)
        if key is None:
            self._count("identity_unknown_peer", 1)
            key = _NOBODY
        sub.setsockopt(zmq.CURVE_SERVERKEY, key.encode("ascii"))

    def read_subscription(self, pub: zmq.Socket[bytes], flags: int) -> bytes:
        """With subscribe permissions: read one subscription event off the XPUB (in
        ``XPUB_MANUAL`` mode), apply it to its subscriber's pipe if that key may
        subscribe it, and return the event the interest set should see (``b""``: none).
        Raises ``zmq.Again`` as ``recv`` does."""
        gate = self.gate
        assert gate is not None
        frame = pub.recv(flags, copy=False)
        event = frame.bytes
        key: str | None = None
        with tolerated("a subscription without a User-Id", "its subscriber has left"):
            uid = frame.get("User-Id")
            key = uid if isinstance(uid, str) else None
        refused = gate.refused
        apply, seen = gate.event(event, key)
        if apply:  # applies to the pipe of the message just read (XPUB_MANUAL)
            option = zmq.SUBSCRIBE if event[0] == 1 else zmq.UNSUBSCRIBE
            pub.setsockopt(option, event[1:])
        if gate.refused != refused:
            self._count("permission_refused_subscriptions", 1)
            if key is not None and key not in self._refused_keys:
                self._refused_keys.add(key)
                log.warning("refused a subscription of key %s to %r: not permitted "
                            "(curve_permissions; logged once per key)", key, event[1:65])
        return seen

    def drain_zap(self, sock: zmq.Socket[bytes]) -> int:
        """Answer the ZAP requests waiting on ``sock`` (the data plane's reader calls it)."""
        n = 0
        try:
            while n < _ZAP_BATCH:
                request = sock.recv_multipart(zmq.NOBLOCK)
                n += 1
                reply, allowed = zap_reply(request, self.allowed)
                if not allowed:
                    self._count("auth_denied", 1)
                    log.info("denied a data subscriber: %s", reply[3].decode())
                sock.send_multipart(reply)
        except zmq.Again:
            pass
        except zmq.ZMQError as exc:
            drain_error(exc, "answering authentication requests", closing=self.closing)
        return n


_ZAP_BATCH = 1024
#: a valid public key whose secret nobody keeps (made once per process, secret dropped)
_NOBODY = keypair()[0]
#: frames a VerifyingSub refuses in one recv before it lets the drain end (and kicks it)
_REFUSE_BATCH = 1024


class VerifyingSub:
    """The data SUB as the hot path's drain sees it (``recv``), with every frame
    traced to the key of the connection it came on (``curve_identity``).

    ``fd_endpoint`` maps a connection's file descriptor to the endpoint the SUB
    connected (the data SUB's monitor reports it with ``EVENT_CONNECTED``);
    ``refresh`` reads the monitor now (a frame may come before its connection's
    event was read); ``key_at`` names the key of the peer at an endpoint. A frame is
    refused (counted ``identity_refused_frames`` or ``permission_refused``, logged
    once per peer) when it is sequenced with a publisher id its connection's key does
    not own, a publisher heartbeat naming such a publisher id, a request whose reply
    handle names a uuid that key does not own, or a publish or request on a subject
    that key may not publish; a frame whose connection cannot be traced is refused
    (``identity_untraced``).

    Limitation: ``ZMQ_SRCFD`` is the descriptor the frame was read from; a frame
    still queued when its connection closed and its descriptor was reused by another
    connection is traced to the newer one (refused, unless both are one key's).
    """

    __slots__ = ("_count", "_logged", "fd_endpoint", "identities", "key_at", "kick",
                 "permissions", "refresh", "sock")

    def __init__(
        self,
        sock: zmq.Socket[bytes],
        identities: IdentityTable,
        permissions: Permissions | None,
        *,
        fd_endpoint: dict[int, str],
        key_at: Callable[[str], str | None],
        refresh: Callable[[], None],
        count: Callable[[str, int], None],
    ) -> None:
        self.sock = sock
        self.identities = identities
        self.permissions = permissions
        self.fd_endpoint = fd_endpoint
        self.key_at = key_at
        self.refresh = refresh
        self.kick: Callable[[], None] = lambda: None
        self._count = count
        self._logged: set[str] = set()

    def recv(self, flags: int = 0) -> bytes:
        """The next frame this node may accept (raises ``zmq.Again`` when none)."""
        for _ in range(_REFUSE_BATCH):
            frame = self.sock.recv(flags, copy=False)
            data = frame.bytes
            verdict = self.judge(data, frame)
            if verdict is None:
                return data
            self._refused(verdict, frame)
        self.kick()  # more may be waiting: let other callbacks run first
        raise zmq.Again()

    def judge(self, data: bytes, frame: zmq.Frame) -> str | None:
        """None to accept the frame, else the counter it is refused under."""
        nul = publish_subject_end(data)
        if nul <= 0:
            return self._judge_other(data, frame)
        start = nul + 3
        if data.startswith(heartbeat.SUBJECT_HEADER):
            # a publisher heartbeat names its publisher in its payload: a forged one
            # would have subscribers count made-up lost tails (or hide real ones)
            claimed = heartbeat.publisher_of(data[start:])
            if claimed is None:
                return None  # malformed: the receive path counts it
            key = self._key(frame)
            if key is None:
                return "identity_untraced"
            return None if self.identities.owns_publisher(key, claimed) else (
                "identity_refused_frames")
        sequenced = data_start(data, start) - start >= HEADER_LEN and data[start] & FLAG
        if not sequenced and self.permissions is None:
            return None
        key = self._key(frame)
        if key is None:
            return "identity_untraced"
        if sequenced:
            publisher = PACK.unpack_from(data, start + 1)[0]
            if not self.identities.owns_publisher(key, publisher):
                return "identity_refused_frames"
        perms = self.permissions
        if perms is not None:
            subject = data[:nul].decode("utf-8", "replace")
            if not perms.may_publish(key, subject):
                return "permission_refused"
        return None

    def _judge_other(self, data: bytes, frame: zmq.Frame) -> str | None:
        """A request names its sender in its reply handle (``_INBOX.<uuid>.<serial>``):
        that uuid must be its key's, and its subject one the key may publish. Replies
        and junk are the receive path's to judge."""
        try:
            fr = decode_frame(data)
            if fr.kind is not Kind.REQUEST or fr.reply is None:
                return None
            uuid = parse_handle(fr.reply)[0]
        except DecodeError:
            return None
        key = self._key(frame)
        if key is None:
            return "identity_untraced"
        if not self.identities.owns_uuid(key, uuid):
            return "identity_refused_frames"
        perms = self.permissions
        if perms is not None and not perms.may_publish(key, fr.subject.decode("utf-8", "replace")):
            return "permission_refused"
        return None

    def _key(self, frame: zmq.Frame) -> str | None:
        fd = frame.get(zmq.SRCFD)
        endpoint = self.fd_endpoint.get(fd)
        if endpoint is None:
            self.refresh()  # its EVENT_CONNECTED may not have been read yet
            endpoint = self.fd_endpoint.get(fd)
        return None if endpoint is None else self.key_at(endpoint)

    def _refused(self, counter: str, frame: zmq.Frame) -> None:
        self._count(counter, 1)
        fd = frame.get(zmq.SRCFD)
        endpoint = self.fd_endpoint.get(fd, f"fd {fd}")
        if endpoint not in self._logged and len(self._logged) < 1024:
            self._logged.add(endpoint)
            log.warning("refused a data frame from %s (%s): it claims an identity or a "
                        "subject its key does not own (logged once per peer)",
                        endpoint, counter)
