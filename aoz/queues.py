"""Queue groups on the mesh, without a broker: members that share a group split the work.

NATS gives queue groups through its server. aoz has no server, so the *sender* picks
the member, using what every publisher already knows: the subscriptions that reached
its XPUB (the node's interest set).

**How.** A member of group ``G`` for subject ``S`` subscribes to the exact subject
``_QUEUE.G.<member>.S``, where ``<member>`` is unique in the mesh (the node's uuid and
a per-process counter). That subscription travels to every publisher like any other,
so each sender can list the members of every group on ``S`` from its interest set, with
no extra protocol and no extra socket. To publish or request on ``S``, a sender sends:

- the ordinary frame on ``S``, if some plain subscriber (not a group member) wants it;
- one copy on ``_QUEUE.G.<member>.S`` for each group ``G``, the member chosen round
  robin (each sender rotates over the members sorted by id, from a random start).

A member's subscription hands its messages over with ``msg.subject == S``.

**Semantics** (the same as NATS queue groups, minus what a server can promise):

- every plain subscriber gets the message, and *exactly one member of each group*
  gets it (at most once: there is no redelivery);
- a request is answered by the first reply, as for :meth:`aoz.Node.request`;
- *joining*: a member receives work from a sender once its subscription has reached
  that sender (use :func:`wait_for_members`); before that, the others take its share;
- *leaving cleanly*: its unsubscription reaches every sender, which stops choosing
  it; a request sent to it just before it left is lost, and the requester sees
  :class:`aoz.RequestTimeout` (retry if the request is idempotent);
- *crashing*: ZeroMQ drops its subscriptions when the TCP connection breaks (at once
  when the process dies; after TCP keep-alive/heartbeat expiry when the host vanishes);
  until then requests sent to it time out;
- balance: each sender rotates on its own, so several senders spread the work evenly
  on average, not in strict turns;
- ``_QUEUE.`` subjects are never delivered to wildcard subscriptions (SPEC §7), so an
  ``aoz sub '>'`` does not see each queued message twice.

Members subscribe to exact subjects only (no wildcard queue subscriptions): a sender
must read the whole subject back from the member's ZeroMQ filter.

The pure part (:class:`QueueTable`, :func:`member_subject`, :func:`parse_member`) does
no I/O and is tested without sockets; the functions below it drive a node.

    async with aoz.queues.subscribe(node, "SVC.work", "workers") as sub:
        async for req in sub:
            await req.respond(b"done")

    reply = await aoz.queues.request(other, "SVC.work", b"job", timeout=1.0)
"""

from __future__ import annotations

import itertools
import random
import re
import time
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING

import anyio

from .errors import NoResponders, RequestTimeout, SubjectError, WaitTimeout
from .protocol.subjects import MAX_SUBJECT

if TYPE_CHECKING:
    from .message import Message
    from .node import Node
    from .protocol.codecs import Codec
    from .subscription import Subscription, SubscriptionStatistics

__all__ = [
    "QUEUE_PREFIX",
    "QueueSubscription",
    "QueueTable",
    "check_group",
    "member_subject",
    "members",
    "parse_member",
    "publish",
    "request",
    "subscribe",
    "wait_for_members",
    "wait_for_receivers",
]

QUEUE_PREFIX = "_QUEUE."
_PREFIX_B = QUEUE_PREFIX.encode()
_GROUP_RE = re.compile(r"[A-Za-z0-9_\-:]{1,64}")


# ------------------------------------------------------------------------ pure part
def check_group(group: str) -> str:
    """Validate a queue group name: 1..64 of ``A-Z a-z 0-9 _ - :`` (one subject token).

    >>> check_group("workers")
    'workers'
    """
    if not isinstance(group, str) or not _GROUP_RE.fullmatch(group):
        raise SubjectError(
            f"queue group {group!r} is not valid: use 1..64 letters, digits, '_', '-' or ':' "
            "(no dots or wildcards), e.g. 'workers'"
        )
    return group


def member_subject(group: str, member: str, subject: str) -> str:
    """The exact subject member ``member`` of ``group`` subscribes to for ``subject``.

    >>> member_subject("workers", "3669840e-d043-11ea-adc2-fcaa146e6b01-1", "SVC.work")
    '_QUEUE.workers.3669840e-d043-11ea-adc2-fcaa146e6b01-1.SVC.work'
    """
    check_group(group)
    if not subject or "*" in subject.split(".") or ">" in subject.split("."):
        raise SubjectError(
            f"queue group members subscribe to exact subjects, not {subject!r}", subject=subject
        )
    out = f"{QUEUE_PREFIX}{group}.{member}.{subject}"
    if len(out.encode()) > MAX_SUBJECT:
        raise SubjectError(
            f"subject {subject!r} is too long for a queue group: with the group and member "
            f"it needs {len(out.encode())} of {MAX_SUBJECT} bytes; shorten it or the group",
            subject=subject,
        )
    return out


def parse_member(prefix: bytes) -> tuple[str, str, str] | None:
    """``(group, member, subject)`` from a member's ZeroMQ filter, else None.

    The filter of an exact subscription is the subject's bytes and a NUL (SPEC §7).

    >>> parse_member(b"_QUEUE.workers.m-1.SVC.work\\x00")
    ('workers', 'm-1', 'SVC.work')
    >>> parse_member(b"SVC.work\\x00") is None
    True
    """
    if not prefix.startswith(_PREFIX_B) or not prefix.endswith(b"\0"):
        return None
    try:
        text = prefix[len(_PREFIX_B) : -1].decode("utf-8")
    except UnicodeDecodeError:
        return None
    parts = text.split(".", 2)
    if len(parts) != 3 or not all(parts) or not _GROUP_RE.fullmatch(parts[0]):
        return None
    return parts[0], parts[1], parts[2]


class QueueTable:
    """Members per subject and group, from interest prefixes; picks one per group.

    Pure: feed it the interest set's prefixes (:meth:`sync`, or :meth:`add` /
    :meth:`discard` per XPUB event) and ask :meth:`targets`.

    >>> t = QueueTable(seed=0)
    >>> t.sync([b"_QUEUE.w.a.S\\x00", b"_QUEUE.w.b.S\\x00", b"S\\x00"])
    True
    >>> sorted({t.targets("S")[0] for _ in range(4)})
    ['_QUEUE.w.a.S', '_QUEUE.w.b.S']
    """

    def __init__(self, seed: int | None = None) -> None:
        # subject -> group -> sorted member ids
        self._members: dict[str, dict[str, list[str]]] = {}
        self._prefixes: frozenset[bytes] = frozenset()
        self._turn: dict[tuple[str, str], int] = {}
        self._rng = random.Random(seed)

    def sync(self, prefixes: Iterable[bytes]) -> bool:
        """Replace the membership with the members among ``prefixes``; True if it changed."""
        mine = frozenset(p for p in prefixes if p.startswith(_PREFIX_B))
        if mine == self._prefixes:
            return False
        for p in self._prefixes - mine:
            self.discard(p)
        for p in mine - self._prefixes:
            self.add(p)
        return True

    def add(self, prefix: bytes) -> bool:
        """A member's subscription arrived; True if it is a queue member."""
        parsed = parse_member(prefix)
        if parsed is None:
            return False
        group, member, subject = parsed
        self._prefixes = self._prefixes | {prefix}
        ms = self._members.setdefault(subject, {}).setdefault(group, [])
        if member not in ms:
            ms.append(member)
            ms.sort()
        return True

    def discard(self, prefix: bytes) -> bool:
        """A member's subscription went away; True if it was a known member."""
        parsed = parse_member(prefix)
        if parsed is None or prefix not in self._prefixes:
            return False
        group, member, subject = parsed
        self._prefixes = self._prefixes - {prefix}
        groups = self._members.get(subject, {})
        ms = groups.get(group, [])
        if member in ms:
            ms.remove(member)
        if not ms:
            groups.pop(group, None)
            self._turn.pop((subject, group), None)
        if not groups:
            self._members.pop(subject, None)
        return True

    def groups(self, subject: str) -> dict[str, list[str]]:
        """Group -> member ids (sorted) for ``subject``."""
        return {g: list(ms) for g, ms in self._members.get(subject, {}).items()}

    def targets(self, subject: str) -> list[str]:
        """One member subject per group on ``subject``, each group rotating round robin."""
        groups = self._members.get(subject)
        if not groups:
            return []
        out = []
        for group, ms in groups.items():
            key = (subject, group)
            turn = self._turn.get(key)
            if turn is None:
                turn = self._rng.randrange(len(ms))  # senders do not all start on one member
            self._turn[key] = turn + 1
            out.append(f"{QUEUE_PREFIX}{group}.{ms[turn % len(ms)]}.{subject}")
        return out


# ------------------------------------------------------------------------ node side
_member_ids = itertools.count(1)
# node -> (table, interest version it was synced at); weak, so a closed node that is
# no longer referenced takes its table with it (no registry to prune, nothing kept alive)
_tables: weakref.WeakKeyDictionary[Node, tuple[QueueTable, int]] = weakref.WeakKeyDictionary()


def _table(node: Node) -> QueueTable:
    """This node's queue table, synced with its interest set when that changed.

    Members come from the node's interest set (``node.interest``: its filters and
    change counter); :func:`_interest_changed` waits on ``node.interest_changed``.
    """
    interest = node.interest
    table, version = _tables.get(node) or (QueueTable(), -1)
    if version != interest.version:
        table.sync(interest.filters())
        _tables[node] = (table, interest.version)
    return table


def members(node: Node, subject: str) -> dict[str, list[str]]:
    """The queue groups on ``subject`` known to this node: group -> member ids."""
    node.has_interest(subject)  # reads pending subscription events on a miss
    return _table(node).groups(subject)


async def wait_for_members(
    node: Node,
    subject: str,
    group: str,
    count: int = 1,
    timeout: float = 5.0,
    *,
    exactly: bool = False,
) -> list[str]:
    """Wait until ``count`` members of ``group`` on ``subject`` have reached this node
    (with ``exactly``: until there are exactly ``count``, e.g. 0 after they left).

    Returns their ids; raises :class:`aoz.WaitTimeout` otherwise.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = members(node, subject).get(group, [])
        if len(found) == count or (len(found) > count and not exactly):
            return found
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(
                f"{len(found)} members of queue group {group!r} on {subject!r} at this node "
                f"after {timeout} s, expected {'exactly ' if exactly else ''}{count}",
                timeout=timeout,
            )
        await _interest_changed(node, min(remaining, 0.05))


async def wait_for_receivers(node: Node, subject: str, timeout: float = 5.0) -> bool:
    """Wait until a plain subscriber or a queue-group member of ``subject`` has reached
    this node; True if one did within ``timeout`` seconds (no exception)."""
    deadline = time.monotonic() + timeout
    while True:
        if node.has_interest(subject) or members(node, subject):
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        await _interest_changed(node, min(remaining, 0.05))


async def _interest_changed(node: Node, timeout: float) -> None:
    await node.interest_changed(timeout)


class QueueSubscription:
    """A member's subscription: a :class:`aoz.Subscription` whose messages carry the
    subject the sender used (``msg.subject == subject``), not the member subject."""

    def __init__(self, inner: Subscription, subject: str, group: str, member: str) -> None:
        self._inner = inner
        self.subject = subject
        self.group = group
        self.member = member

    def __aiter__(self) -> QueueSubscription:
        return self

    async def __anext__(self) -> Message:
        return self._fix(await self._inner.__anext__())

    async def next(self, timeout: float | None = None) -> Message:
        """The next message (:class:`aoz.WaitTimeout` after ``timeout`` seconds)."""
        return self._fix(await self._inner.next(timeout))

    def _fix(self, msg: Message) -> Message:
        msg._subject = self.subject
        return msg

    def statistics(self) -> SubscriptionStatistics:
        return self._inner.statistics()

    @property
    def closed(self) -> bool:
        return bool(self._inner.closed)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> QueueSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<QueueSubscription {self.subject!r} group={self.group!r} member={self.member!r}>"


def subscribe(
    node: Node, subject: str, group: str, *, queue_size: int | None = None
) -> QueueSubscription:
    """Join queue group ``group`` on the exact ``subject``: each message or request on it
    goes to one member of the group (see the module docstring for the semantics).

    >>> async with aoz.queues.subscribe(node, "SVC.work", "workers") as sub:  # doctest: +SKIP
    ...     async for req in sub:
    ...         await req.respond(b"done")
    """
    member = f"{node.uuid}-{next(_member_ids)}"
    inner = node.subscribe(member_subject(group, member, subject), queue_size=queue_size)
    return QueueSubscription(inner, subject, group, member)


async def publish(
    node: Node, subject: str, data: object = b"", *, codec: Codec | None = None
) -> int:
    """Publish to every plain subscriber of ``subject`` and one member of each queue group.

    Returns the number of frames sent (0 when nobody listens; the message is dropped,
    as a plain publish would be).
    """
    plain = node.has_interest(subject)
    targets = _table(node).targets(subject)
    sent = 0
    if plain:
        await node.publish(subject, data, codec=codec)
        sent += 1
    for target in targets:
        await node.publish(target, data, codec=codec)
        sent += 1
    return sent


async def request(
    node: Node,
    subject: str,
    data: object = b"",
    *,
    timeout: float = 1.0,
    codec: Codec | None = None,
) -> Message:
    """:meth:`aoz.Node.request` that also reaches queue groups: the request goes to the
    plain subscribers and one member of each group; the first reply wins.

    Raises :class:`aoz.NoResponders` when nobody (plain or member) listens.
    """
    plain = node.has_interest(subject)
    targets = _table(node).targets(subject)
    if not targets:
        return await node.request(subject, data, timeout=timeout, codec=codec)
    if not plain and len(targets) == 1:
        return await node.request(targets[0], data, timeout=timeout, codec=codec)
    subjects = ([subject] if plain else []) + targets
    winner: list[Message] = []
    errors: list[BaseException] = []
    async with anyio.create_task_group() as tg:

        async def one(s: str) -> None:
            try:
                reply = await node.request(s, data, timeout=timeout, codec=codec)
            except (NoResponders, RequestTimeout) as exc:
                errors.append(exc)
                return
            if not winner:
                winner.append(reply)
                tg.cancel_scope.cancel()

        for s in subjects:
            tg.start_soon(one, s)
    if winner:
        return winner[0]
    timeouts = [e for e in errors if isinstance(e, RequestTimeout)]
    raise (timeouts or errors)[0]
