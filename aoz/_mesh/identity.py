"""Identities bound to CURVE keys (``curve_identity=True``). Pure: keys in, decisions out.

Without it, a CURVE mesh shares one server keypair and a node's uuid is random: any
listed key can announce, beacon or publish as any node. With it, each node's identity
is derived from its own public key, so the mesh can check who speaks:

- **uuid**: its first 64 bits (``xxxxxxxx-xxxx-xxxx``) are the first 8 bytes of
  ``SHA-256("aoz-identity" || key)``; the last 64 bits are random per process (a node
  that restarts is a new uuid, as before). It is still an OZ-shaped uuid string: the
  naming wire format does not change.
- **publisher id** (the sequence header's, :mod:`aoz._protocol.sequence`): its high 32
  bits are the first 4 bytes of that hash, the low 32 random per process.

:class:`IdentityTable` is built from the allow-list (every listed key, this node's own
included) and answers "which key is this uuid's / this publisher id's" and "may the
connection authenticated with key K say it is uuid U / publisher P". The nsd asks it
about every naming frame (it knows each sender's key from ZAP), nodes ask it about
every announcement (a uuid no listed key derives is refused) and about every data
frame (the key is the one the data SUB authenticated that frame's connection with).
Two listed keys whose prefixes collide are refused when the table is built.

:class:`Permissions` is the optional per-key publish/subscribe policy, NATS-style
subject patterns (``A.*``, ``A.>``), enforced where a brokerless mesh can enforce it:
publishing by receiving nodes, subscribing by publishing nodes (:class:`SubscribeGate`);
docs/SECURITY.md.

>>> pub = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
>>> uuid = identity_uuid(pub)
>>> table = IdentityTable([pub])
>>> table.key_of_uuid(uuid) == pub, table.owns_uuid(pub, uuid)
(True, True)
>>> table.owns_publisher(pub, identity_publisher(pub))
True
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Mapping
from typing import Final

from .._protocol.subjects import Pattern, compile_pattern
from ..errors import ConfigError

__all__ = [
    "IdentityTable",
    "Permissions",
    "SubscribeGate",
    "identity_publisher",
    "identity_uuid",
    "key_prefix",
    "uuid_prefix",
]

_DOMAIN: Final = b"aoz-identity"
#: characters of a uuid bound to its key: ``xxxxxxxx-xxxx-xxxx`` (64 bits)
UUID_PREFIX_LEN: Final = 18


def _digest(key: str) -> bytes:
    return hashlib.sha256(_DOMAIN + key.encode("ascii")).digest()


def key_prefix(key: str) -> str:
    """The uuid prefix a key derives (``xxxxxxxx-xxxx-xxxx``)."""
    h = _digest(key)[:8].hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}"


def uuid_prefix(uuid: str) -> str:
    """The part of a uuid that names its key."""
    return uuid[:UUID_PREFIX_LEN]


def identity_uuid(key: str, *, rand: bytes | None = None) -> str:
    """A uuid bound to ``key``: the key's prefix, then 64 random bits (``rand``: 8
    bytes, for tests)."""
    r = (secrets.token_bytes(8) if rand is None else rand).hex()
    # RFC 4122 variant bits in the random half; the string stays OZ-shaped either way
    variant = "89ab"[int(r[0], 16) & 3]
    return f"{key_prefix(key)}-{variant}{r[1:4]}-{r[4:16]}"


def _pid_high(key: str) -> int:
    return int.from_bytes(_digest(key)[:4], "big")


def identity_publisher(key: str, *, low: int | None = None) -> int:
    """A 64-bit publisher id bound to ``key``: 32 bits of the key's hash, 32 random."""
    lo = secrets.randbits(32) if low is None else low & 0xFFFFFFFF
    return (_pid_high(key) << 32) | lo


class IdentityTable:
    """Listed keys and the identities they own (see the module docstring)."""

    __slots__ = ("_by_pid", "_by_uuid", "keys")

    def __init__(self, keys: Iterable[str]) -> None:
        self.keys = frozenset(keys)
        self._by_uuid: dict[str, str] = {}
        self._by_pid: dict[int, str] = {}
        for key in sorted(self.keys):
            if (self._by_uuid.setdefault(key_prefix(key), key) != key
                    or self._by_pid.setdefault(_pid_high(key), key) != key):
                raise ConfigError(
                    "two listed CURVE keys derive the same identity prefix; "
                    "make a new keypair for one of them (aoz keygen)"
                )

    def key_of_uuid(self, uuid: str) -> str | None:
        """The listed key that owns ``uuid``, or None (no listed key derives it)."""
        return self._by_uuid.get(uuid_prefix(uuid))

    def key_of_publisher(self, publisher: int) -> str | None:
        """The listed key that owns ``publisher`` (a sequence header's id), or None."""
        return self._by_pid.get(publisher >> 32)

    def owns_uuid(self, key: str, uuid: str) -> bool:
        """Whether a connection authenticated with ``key`` may speak as ``uuid``."""
        return key in self.keys and self._by_uuid.get(uuid_prefix(uuid)) == key

    def owns_publisher(self, key: str, publisher: int) -> bool:
        """Whether a connection authenticated with ``key`` may publish as ``publisher``."""
        return key in self.keys and self._by_pid.get(publisher >> 32) == key


class Permissions:
    """Per-key publish/subscribe subject patterns, in the spirit of NATS's.

    ``rules`` maps a public key to ``{"publish": [patterns], "subscribe": [patterns]}``;
    a key absent from ``rules`` may do everything (permissions restrict the keys they
    name); a key present may publish (subscribe) only subjects a pattern of its list
    matches (an absent list: everything; an empty list: nothing). ``_INBOX.`` subjects
    (replies) are always allowed: request/reply needs them.

    >>> k = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
    >>> p = Permissions({k: {"publish": ["MD.>"], "subscribe": []}})
    >>> p.may_publish(k, "MD.IBM"), p.may_publish(k, "ORDERS.X"), p.may_publish("x" * 40, "A")
    (True, False, True)
    >>> p.may_subscribe(k, b"MD."), p.may_subscribe(k, b"_INBOX.")
    (False, True)
    """

    __slots__ = ("_pub", "_sub")

    def __init__(self, rules: Mapping[str, Mapping[str, list[str]]]) -> None:
        self._pub: dict[str, tuple[Pattern, ...] | None] = {}
        self._sub: dict[str, tuple[Pattern, ...] | None] = {}
        for key, rule in rules.items():
            unknown = set(rule) - {"publish", "subscribe"}
            if unknown:
                raise ConfigError(
                    f"curve_permissions: unknown entry {sorted(unknown)} for a key; "
                    "use 'publish' and 'subscribe' lists of subject patterns"
                )
            for name, table in (("publish", self._pub), ("subscribe", self._sub)):
                pats = rule.get(name)
                table[key] = None if pats is None else tuple(compile_pattern(p) for p in pats)

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(self._pub)

    @property
    def restricts_subscribe(self) -> bool:
        """Whether some key has a subscribe list (the publisher must then gate filters)."""
        return any(pats is not None for pats in self._sub.values())

    def may_publish(self, key: str, subject: str) -> bool:
        """Whether ``key`` may publish on ``subject``."""
        pats = self._pub.get(key)
        if pats is None or subject.startswith(_CONTROL):
            return True
        return any(p.matches(subject) for p in pats)

    def may_subscribe(self, key: str, prefix: bytes) -> bool:
        """Whether ``key`` may subscribe the ZeroMQ filter ``prefix`` (what reaches a
        publisher: a subject or a prefix of subjects). A filter is allowed when a
        pattern of the key's list covers every subject it can match."""
        pats = self._sub.get(key)
        if pats is None or prefix.startswith(_CONTROL_BYTES):
            return True
        text = prefix.decode("utf-8", "replace")
        return any(_covers(p, text) for p in pats)


#: aoz's own traffic, never limited by permissions: replies (``_INBOX.``) and control
#: subjects (``_AOZ.``: publisher heartbeats, cache queries), which every node sends and
#: subscribes to whatever it may publish; no application subscribes to them, and the
#: identity checks (aoz._mesh.security.VerifyingSub) judge who sent them
_CONTROL: Final = ("_INBOX.", "_AOZ.")
_CONTROL_BYTES: Final = tuple(p.encode() for p in _CONTROL)


def _covers(pattern: Pattern, prefix: str) -> bool:
    """Whether every subject a ZeroMQ filter can match matches ``pattern``: an exact
    filter (``subject\\0``) is its subject; a prefix filter (a wildcard subscriber's)
    is covered only by a ``>`` pattern whose own prefix it starts with."""
    if prefix.endswith("\0"):
        return pattern.matches(prefix[:-1])
    if pattern.text != ">" and not pattern.text.endswith(".>"):
        return False
    return prefix.startswith(pattern.zmq_prefix.decode("utf-8", "replace"))


class SubscribeGate:
    """Subscribe permissions at a publisher whose XPUB applies no filter by itself
    (``ZMQ_XPUB_MANUAL``): each subscription event comes with its subscriber's key and
    :meth:`event` says whether to apply it to that subscriber's pipe, and which event,
    if any, the node's interest set should see (one per filter, as a plain XPUB gives).

    libzmq reports a departed subscriber's unsubscriptions without a key (``key`` None),
    for its refused filters too. Such an unsubscription is charged to the refused
    subscriptions of that filter first: the interest set may then keep a filter that
    only refused subscribers had (over-reported interest), never lose one an allowed
    subscriber still has. Inbox filters are always allowed, so link liveness is exact.

    >>> k = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
    >>> gate = SubscribeGate(Permissions({k: {"subscribe": ["A.>"]}}))
    >>> gate.event(b"\\x01A.", k), gate.event(b"\\x01B.", k), gate.refused
    ((True, b'\\x01A.'), (False, b''), 1)
    >>> gate.event(b"\\x00B.", None), gate.event(b"\\x00A.", None)
    ((False, b''), (False, b'\\x00A.'))
    """

    __slots__ = ("_allowed", "_forbidden", "permissions", "refused")

    def __init__(self, permissions: Permissions) -> None:
        self.permissions = permissions
        self._allowed: dict[bytes, int] = {}
        self._forbidden: dict[bytes, int] = {}
        self.refused = 0  #: subscriptions refused

    def event(self, event: bytes, key: str | None) -> tuple[bool, bytes]:
        """``(apply to the pipe, event for the interest set or b"")``."""
        if not event or event[0] not in (0, 1):
            return False, b""
        flt = event[1:]
        if key is None:  # a departed subscriber's: refused ones first (class docstring)
            if event[0] == 1 or _take(self._forbidden, flt) is not None:
                return False, b""
            return False, event if _take(self._allowed, flt) == 0 else b""
        if not self.permissions.may_subscribe(key, flt):
            if event[0] == 1:
                self.refused += 1
                self._forbidden[flt] = self._forbidden.get(flt, 0) + 1
            else:
                _take(self._forbidden, flt)
            return False, b""
        if event[0] == 1:
            n = self._allowed.get(flt, 0) + 1
            self._allowed[flt] = n
            return True, event if n == 1 else b""
        return True, event if _take(self._allowed, flt) == 0 else b""


def _take(counts: dict[bytes, int], flt: bytes) -> int | None:
    """Decrement ``counts[flt]``; the count left, or None when there was none."""
    n = counts.get(flt, 0)
    if not n:
        return None
    if n == 1:
        del counts[flt]
        return 0
    counts[flt] = n - 1
    return n - 1
