"""Queue groups on the wire: member subjects, and the table a sender picks members from.
Pure (no I/O); :mod:`aoz.queues` drives it for the user-facing functions and
:class:`aoz.Node` for ``request``/``request_many``.

A member of group ``G`` for subject ``S`` subscribes to the exact subject
``_QUEUE.G.<member>.S`` (docs/PROTOCOL.md, "Queue groups"); a sender reads the members
back from the subscription filters that reached its publisher (:class:`QueueTable`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable

from ..errors import SubjectError
from .subjects import MAX_SUBJECT

__all__ = ["QUEUE_PREFIX", "QueueTable", "check_group", "member_subject", "parse_member"]

QUEUE_PREFIX = "_QUEUE."
_PREFIX_B = QUEUE_PREFIX.encode()
_GROUP_RE = re.compile(r"[A-Za-z0-9_\-:]{1,64}")


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
