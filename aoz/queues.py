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
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ._protocol.queuegroups import (
    QUEUE_PREFIX,
    QueueTable,
    check_group,
    member_subject,
    parse_member,
)
from .errors import WaitTimeout

if TYPE_CHECKING:
    from ._mesh.message import Message
    from ._mesh.node import Node
    from ._mesh.subscription import Subscription, SubscriptionStatistics
    from ._protocol.codecs import Codec

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

# ------------------------------------------------------------------------ node side
_member_ids = itertools.count(1)
def members(node: Node, subject: str) -> dict[str, list[str]]:
    """The queue groups on ``subject`` known to this node: group -> member ids."""
    node.has_interest(subject)  # reads pending subscription events on a miss
    return node.interest.queue_groups(subject)


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


async def wait_for_receivers(
    node: Node, subject: str, timeout: float = 5.0, *, responders: bool = False
) -> bool:
    """Wait until a plain subscriber or a queue-group member of ``subject`` has reached
    this node; True if one did within ``timeout`` seconds (no exception). With
    ``responders=True`` a catch-all subscriber does not count (as for requests)."""
    deadline = time.monotonic() + timeout
    while True:
        if node.has_interest(subject, responders=responders) or members(node, subject):
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
    node: Node, subject: str, data: object = b"", *, codec: Codec | None = None,
    headers: Mapping[str, str] | None = None,
) -> int:
    """Publish to every plain subscriber of ``subject`` and one member of each queue group.

    Returns the number of frames sent (0 when nobody listens; the message is dropped,
    as a plain publish would be).
    """
    plain = node.has_interest(subject)
    targets = node.interest.queue_targets(subject)
    sent = 0
    if plain:
        await node.publish(subject, data, codec=codec, headers=headers)
        sent += 1
    for target in targets:
        await node.publish(target, data, codec=codec, headers=headers)
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
    """:meth:`aoz.Node.request`, which reaches queue groups itself: the request goes
    to the plain subscribers and one member of each group; the first reply wins. Kept
    for callers of the first queue-group API.

    Raises :class:`aoz.NoResponders` when nobody (plain or member) listens.
    """
    return await node.request(subject, data, timeout=timeout, codec=codec)
