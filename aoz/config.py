"""Node settings: OZ's settings under Python names, from keywords, environment and files.

Precedence, lowest first: defaults < config file (``AOZ_CONFIG`` or ``config=``) <
environment variables (``AOZ_<NAME>``) < keyword arguments.

OZ name (``mama.zmq.transport.<t>.``)  ->  aoz name
    naming.subscribe_address_N/port_N  ->  ``naming`` (list of ``tcp://host:port``)
    naming.connect_interval            ->  ``connect_interval``
    naming.connect_retries             ->  ``connect_retries``
    naming.beacon_interval             ->  ``beacon_interval``
    reconnect_interval                 ->  ``reconnect_interval``
    heartbeat_interval                 ->  ``heartbeat_interval``
    publish_address                    ->  ``publish_address``
    outgoing_url_N / incoming_url_N    ->  ``bind`` / ``connect`` (static mode)

aoz only: ``transport="ipc"`` puts the data PUB on a Unix socket (``ipc_dir``) instead
of tcp, for aoz nodes on one host; every endpoint is checked by :mod:`aoz._mesh.endpoints`,
which also states where ipc endpoints may be announced (never where OZ reads them).

aoz's defaults suit a local mesh (sub-second healing); OZ's slower WAN values are
available as :meth:`Settings.oz_defaults`.

Example file (TOML)::

    naming = ["tcp://10.0.0.5:5756", "tcp://10.0.0.6:5756"]
    beacon_interval = 1.0
    publish_address = "10.0.0.17"
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from ._mesh.endpoints import TRANSPORTS, check_endpoint, ipc_mesh
from .errors import ConfigError

__all__ = ["Mode", "Overflow", "Settings", "Transport", "load_settings"]

Mode = Literal["naming", "static", "broker", "udp"]
Overflow = Literal["drop_newest", "drop_oldest", "block"]
SendPolicy = Literal["drop", "block"]
Transport = Literal["tcp", "ipc"]

DEFAULT_NSD = "tcp://127.0.0.1:5756"


class Settings(msgspec.Struct, kw_only=True, frozen=True):
    """Everything a node can be configured with. All durations are seconds."""

    #: discovery mode: ``naming`` (nsd), ``static`` (bind/connect lists), ``broker``
    #: (an XSUB/XPUB forwarder), ``udp`` (nsd-free UDP beacons)
    mode: Mode = "naming"
    #: naming daemons' XPUB endpoints (naming mode)
    naming: list[str] = msgspec.field(default_factory=lambda: [DEFAULT_NSD])
    #: interface the data PUB binds to (ephemeral port) in naming/udp modes
    publish_address: str = "127.0.0.1"
    #: the data PUB's transport in naming/udp modes: ``tcp`` (on ``publish_address``,
    #: what OZ does) or ``ipc`` (a Unix socket ``<ipc_dir>/aoz-<uuid>.ipc``: faster, for
    #: aoz nodes on this host only; in naming mode it needs an nsd reached over ipc://,
    #: since OZ programs cannot connect to ipc endpoints -- see aoz._mesh.endpoints)
    transport: Transport = "tcp"
    #: directory of ipc socket files (default: $XDG_RUNTIME_DIR, else $TMPDIR or /tmp)
    ipc_dir: str | None = None
    #: static mode: endpoints the data PUB binds / the data SUB connects to
    bind: list[str] = msgspec.field(default_factory=list)
    connect: list[str] = msgspec.field(default_factory=list)
    #: broker mode: the forwarder's XSUB (we publish into it) and XPUB (we subscribe from it)
    broker_pub: str | None = None
    broker_sub: str | None = None
    #: naming protocol timers (OZ: 0.1 s x 100 retries, 1 s beacons)
    connect_interval: float = 0.1
    connect_retries: int = 100
    beacon_interval: float = 1.0
    #: a peer with no beacon for this many beacon intervals and its data link down is expired
    expire_beacons: int = 3
    #: ZeroMQ reconnect interval for connecting sockets (OZ: 10 s, too slow for a local mesh)
    reconnect_interval: float = 0.1
    #: ZeroMQ heartbeat interval/timeout on data and naming links (OZ: 10 s); 0 disables
    heartbeat_interval: float = 1.0
    #: publisher heartbeats (aoz only; OZ programs neither send nor need them): every
    #: this many seconds a node that published on a subject and then went quiet tells
    #: subscribers the subject's last sequence number, so a lost tail is reported within
    #: one interval (``lost``, ``error_cb``); 0 sends none. Needs ``sequence``.
    publisher_heartbeat: float = 1.0
    #: how long after its last publication a quiet subject is still announced, seconds
    #: (a subscriber frozen longer than this is not told of a lost tail)
    publisher_heartbeat_window: float = 30.0
    #: UDP beacon discovery (udp mode)
    udp_port: int = 11312
    udp_address: str = "127.255.255.255"
    #: program name announced to peers (default: the running script's short name)
    program: str | None = None
    #: per-subscription queue bound and what happens when it is full: ``drop_newest``,
    #: ``drop_oldest`` (counted as ``dropped``) or ``block`` (the node stops reading its
    #: data socket until the consumer catches up; with a ``send_policy="block"``
    #: publisher nothing is lost end to end)
    queue_size: int = 65536
    overflow: Overflow = "drop_newest"
    #: ZeroMQ high-water marks of the data sockets (messages). A stalled subscriber costs
    #: its publisher at most about send_hwm x (message size + 100 B) plus the kernel's
    #: socket buffers: ~10 MiB + ~4 MiB for 1 KiB messages with the default
    send_hwm: int = 10_000
    recv_hwm: int = 100_000
    #: what a publish does when a subscriber's queue at this node is full: ``drop`` (that
    #: subscriber loses the message and counts it through sequence gaps, ``lost``) or
    #: ``block`` (``await publish()`` waits until every subscriber has room; nothing is lost)
    send_policy: SendPolicy = "drop"
    #: number publications per subject, so subscribers detect and count losses exactly
    sequence: bool = True
    #: the publisher cache (aoz._mesh.cache): keep the last ``publish_cache`` frames published
    #: on each subject, at most ``publish_cache_bytes`` in all, for late joiners
    #: (``subscribe(history=N)``) and for subscribers repairing a gap (``recover=True``).
    #: Off (0) by default: it holds N frames per subject for the node's lifetime (with
    #: 100,000 subjects of 100 B frames and N=1, ~15 MiB) and adds an append to every
    #: publish (``python -m benchmarks.memory_cache``); OZ programs keep none. Needs
    #: ``sequence=True`` (the numbers make history and repair exact).
    publish_cache: int = 0
    publish_cache_bytes: int = 64 * 1024 * 1024
    #: history (``subscribe(history=N)``): how long to wait for the peers' caches to
    #: answer; a peer that has not answered by then is counted, not waited for
    history_timeout: float = 2.0
    #: recovery (``subscribe(recover=True)``): how long a detected gap waits for the
    #: publisher's cache (what follows on that stream is held meanwhile), and how many
    #: recovery requests may be outstanding at once (more: the gap is reported lost)
    recover_timeout: float = 1.0
    recover_max: int = 64
    #: codec used for payloads that are not bytes/str: ``msgpack``, ``json`` or ``omnm``
    #: (OpenMAMA's format, OZ's default: dicts then reach OZ programs as omnm messages)
    default_codec: Literal["msgpack", "json", "omnm"] = "msgpack"
    #: on close, how long queued outgoing messages may take to leave, seconds
    linger: float = 1.0
    #: CURVE on the data plane (see aoz._mesh.security): the mesh's server keypair, this
    #: node's client keypair (generated when omitted) and the allowed client keys
    curve_server_public: str | None = None
    curve_server_secret: str | None = None
    curve_public: str | None = None
    curve_secret: str | None = None
    curve_allow: list[str] | None = None
    #: the same, read from ``aoz keygen``'s files (``PREFIX.key`` holds a secret key,
    #: whose public key is derived; an allow file holds public keys, one a line): set
    #: ``curve_server_public``/``curve_server_secret``, ``curve_public``/``curve_secret``
    #: and ``curve_allow`` when those are not given
    curve_server_secret_file: str | None = None
    curve_secret_file: str | None = None
    curve_allow_file: str | None = None
    #: CURVE on the naming plane too (the nsd is the CURVE server with the mesh keypair
    #: and allows ``curve_allow``); needs ``curve_public``/``curve_secret`` listed there.
    #: Such a node cannot use an OZ nsd, and OZ programs cannot join its mesh.
    naming_curve: bool = False
    #: identities bound to keys (aoz._mesh.identity): this node's uuid and publisher id derive
    #: from ``curve_public``; its data PUB is a CURVE server with its own keypair (no
    #: mesh secret on nodes), peers are connected with the key their uuid names, and
    #: announcements, beacons and data frames that claim another key's identity are
    #: refused and counted. Needs ``curve_public``/``curve_secret`` and ``curve_allow``
    #: (the listed keys are the identities); naming or udp mode. ``curve_server_public``
    #: is then only the nsd's key (``naming_curve``)
    curve_identity: bool = False
    #: with ``curve_identity``: per-key subject permissions, NATS-style, ``{public_key:
    #: {"publish": [patterns], "subscribe": [patterns]}}``; enforced where a brokerless
    #: mesh can (aoz._mesh.identity.Permissions, docs/SECURITY.md)
    curve_permissions: dict[str, dict[str, list[str]]] | None = None
    #: largest data message accepted, bytes (-1 = unlimited); a peer sending more is
    #: disconnected by ZeroMQ after the frame header (aoz._mesh.sockopts)
    max_message_size: int = 64 * 1024 * 1024
    #: a ZeroMQ/CURVE handshake not finished within this many seconds is dropped
    handshake_timeout: float = 5.0
    #: after failed handshakes (wrong CURVE keys) reconnect after 1, 4, 16... s, at most this
    reconnect_backoff_max: float = 60.0

    def __post_init__(self) -> None:
        _check(self.connect_interval > 0, "connect_interval must be > 0 seconds")
        _check(self.connect_retries >= 1, "connect_retries must be >= 1")
        _check(self.beacon_interval >= 0, "beacon_interval must be >= 0 (0 turns beacons off)")
        _check(self.expire_beacons >= 1, "expire_beacons must be >= 1")
        _check(self.reconnect_interval > 0, "reconnect_interval must be > 0 seconds")
        _check(self.heartbeat_interval >= 0, "heartbeat_interval must be >= 0 (0 disables)")
        _check(self.publisher_heartbeat >= 0,
               "publisher_heartbeat must be >= 0 seconds (0 sends no heartbeats)")
        _check(self.publisher_heartbeat_window > 0,
               "publisher_heartbeat_window must be > 0 seconds")
        _check(self.queue_size >= 1, "queue_size must be >= 1")
        _check(self.publish_cache >= 0, "publish_cache must be >= 0 (0 turns it off)")
        _check(self.publish_cache_bytes >= 1, "publish_cache_bytes must be >= 1")
        _check(self.publish_cache == 0 or self.sequence,
               "publish_cache needs sequence=True (cached frames are found by number)")
        _check(self.history_timeout > 0, "history_timeout must be > 0 seconds")
        _check(self.recover_timeout > 0, "recover_timeout must be > 0 seconds")
        _check(self.recover_max >= 1, "recover_max must be >= 1")
        _check(0 < self.udp_port < 65536, "udp_port must be within 1..65535")
        _check(self.linger >= 0, "linger must be >= 0 seconds")
        _check(
            self.max_message_size == -1 or self.max_message_size >= 1024,
            "max_message_size must be >= 1024 bytes, or -1 for unlimited",
        )
        _check(self.handshake_timeout > 0, "handshake_timeout must be > 0 seconds")
        _check(self.reconnect_backoff_max >= 1, "reconnect_backoff_max must be >= 1 second")
        _check(
            not self.naming_curve
            or (self.curve_server_public is not None and self.curve_public is not None),
            "naming_curve needs the mesh keypair (curve_server_public/curve_server_secret) "
            "and this node's curve_public/curve_secret, listed in the nsd's curve_allow",
        )
        _check(self.send_hwm >= 1 and self.recv_hwm >= 1, "send_hwm and recv_hwm must be >= 1")
        keys = (self.curve_server_public, self.curve_server_secret, self.curve_public,
                self.curve_secret, *(self.curve_allow or ()))
        for key in keys:
            _check(key is None or len(key) == 40,
                   "CURVE keys are 40-character Z85 text; make them with aoz.security.keypair()")
        _check(
            (self.curve_server_public is None) == (self.curve_server_secret is None)
            or (self.curve_identity and self.curve_server_secret is None),
            "CURVE needs both curve_server_public and curve_server_secret (the mesh keypair)",
        )
        _check(
            (self.curve_public is None) == (self.curve_secret is None),
            "give both curve_public and curve_secret, or neither (a keypair is generated)",
        )
        _check(
            not self.curve_identity
            or (self.curve_public is not None and self.curve_allow is not None
                and self.mode in ("naming", "udp")),
            "curve_identity needs this node's curve_public/curve_secret, curve_allow (the "
            "listed keys are the mesh's identities) and mode 'naming' or 'udp'",
        )
        _check(
            self.curve_permissions is None or self.curve_identity,
            "curve_permissions needs curve_identity=True (permissions name keys)",
        )
        _check(
            self.curve_server_public is not None or self.curve_identity
            or (self.curve_public is None and self.curve_allow is None),
            "curve_public/curve_secret/curve_allow need the mesh keypair "
            "(curve_server_public and curve_server_secret)",
        )
        self._check_endpoints()
        if self.mode == "naming":
            _check(bool(self.naming), "naming mode needs at least one nsd endpoint in `naming`")
        if self.mode == "static":
            _check(
                bool(self.bind or self.connect),
                "static mode needs `bind` and/or `connect` endpoints",
            )
        if self.mode == "broker":
            _check(
                bool(self.broker_pub and self.broker_sub),
                "broker mode needs `broker_pub` (forwarder XSUB) and `broker_sub` (forwarder XPUB)",
            )

    def _check_endpoints(self) -> None:
        _check(self.transport in TRANSPORTS, f"transport must be one of {TRANSPORTS}")
        for ep in self.naming:
            check_endpoint(ep, what=f"naming endpoint (such as {DEFAULT_NSD})")
        for ep in self.bind:
            check_endpoint(ep, bind=True, what="bind endpoint")
        for ep in self.connect:
            check_endpoint(ep, what="connect endpoint")
        for name in ("broker_pub", "broker_sub"):
            if (ep := getattr(self, name)) is not None:
                check_endpoint(ep, what=name)
        check_endpoint(f"tcp://{self.publish_address}:*", bind=True, what="publish_address")
        _check(
            self.transport == "tcp" or self.mode not in ("naming", "udp") or ipc_mesh(self),
            "transport='ipc' in naming mode needs every nsd in `naming` reached over ipc:// "
            "(an aoz nsd: `aoz nsd --bind ipc:///path`): an nsd on tcp may relay our "
            "announcements to OZ programs, which cannot connect to ipc endpoints",
        )

    @classmethod
    def oz_defaults(cls, **overrides: Any) -> Settings:
        """OZ's own (WAN-oriented) timer values: 10 s reconnect and heartbeat."""
        base: dict[str, Any] = {"reconnect_interval": 10.0, "heartbeat_interval": 10.0}
        base.update(overrides)
        return load_settings(base, environ={})

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed (validated again)."""
        return load_settings({**msgspec.structs.asdict(self), **changes}, environ={})


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


_LIST_FIELDS = {"naming", "bind", "connect", "curve_allow"}


def _from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in Settings.__struct_fields__:
        raw = environ.get(f"AOZ_{name.upper()}")
        if raw is None or raw == "":
            continue
        if name in _LIST_FIELDS:
            out[name] = [part.strip() for part in raw.split(",") if part.strip()]
        else:
            out[name] = raw
    return out


def _from_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror}") from exc
    try:
        if p.suffix == ".json":
            data = msgspec.json.decode(text)
        else:
            data = tomllib.loads(text.decode())
    except (msgspec.DecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {p} is not valid TOML/JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a table of settings")
    # allow an [aoz] table so the file can be shared with other tools
    section = data.get("aoz", data)
    if not isinstance(section, dict):
        raise ConfigError(f"config file {p}: [aoz] must be a table of settings")
    return section


def _infer_mode(values: dict[str, Any]) -> None:
    if "mode" in values:
        return
    if values.get("broker_pub") or values.get("broker_sub"):
        values["mode"] = "broker"
    elif values.get("bind") or values.get("connect"):
        values["mode"] = "static"


def _read_key_files(values: dict[str, Any]) -> None:
    """Fill the CURVE keys from the ``curve_*_file`` settings (aoz keygen's files)."""
    from ._mesh.security import public_key, read_key, read_keys

    for field, public, secret in (("curve_server_secret_file", "curve_server_public",
                                   "curve_server_secret"),
                                  ("curve_secret_file", "curve_public", "curve_secret")):
        path = values.get(field)
        if path and values.get(secret) is None:
            values[secret] = read_key(path)
            values.setdefault(public, public_key(values[secret]))
    path = values.get("curve_allow_file")
    if path and values.get("curve_allow") is None:
        values["curve_allow"] = read_keys(path)


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    *,
    config: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Build :class:`Settings` from a file, the environment and keyword overrides.

    ``None`` values in ``overrides`` are ignored, so callers can pass optional
    arguments straight through. The mode is inferred when not given: ``bind``/
    ``connect`` mean static, ``broker_pub``/``broker_sub`` mean broker, else naming.

    >>> load_settings({"naming": ["tcp://127.0.0.1:7000"]}, environ={}).naming
    ['tcp://127.0.0.1:7000']
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    cfg = config if config is not None else env.get("AOZ_CONFIG")
    if cfg:
        values.update(_from_file(cfg))
    from_env = _from_environ(env)
    values.update(from_env)
    if overrides:
        values.update({k: v for k, v in overrides.items() if v is not None})
    # where each value came from, for an error message that names it
    sources = {k: f"config file {cfg}" for k in values} if cfg else {}
    sources.update({k: f"environment variable AOZ_{k.upper()}" for k in from_env})
    sources.update({k: f"keyword {k}=" for k, v in (overrides or {}).items() if v is not None})
    unknown = sorted(set(values) - set(Settings.__struct_fields__))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {', '.join(unknown)}; "
            f"known: {', '.join(Settings.__struct_fields__)}"
        )
    for name in _LIST_FIELDS:
        if isinstance(values.get(name), str):
            values[name] = [values[name]]
    _infer_mode(values)
    _read_key_files(values)
    try:
        return msgspec.convert(values, Settings, strict=False)
    except msgspec.ValidationError as exc:
        # msgspec names the field as `$.name`; Settings' own checks start with it
        field = re.search(r"\$\.(\w+)", str(exc)) or re.match(r"(\w+)", str(exc))
        source = sources.get(field.group(1)) if field else None
        where = f" (from {source})" if source else ""
        raise ConfigError(f"invalid setting{where}: {exc}") from exc
