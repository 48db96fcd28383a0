"""The request table: serial numbers, reply handles and deadlines (SPEC §2). Pure.

Every node has one inbox, ``_INBOX.<uuid>``; each request gets the next serial and
the handle ``_INBOX.<uuid>.<serial as 16 hex>``. A reply names its serial, so the
table maps serial -> whatever the I/O layer waits with (a future, a stream). Entries
carry a deadline so a caller that walks away is still cleaned up by :meth:`expire`.
Time is passed in; this module reads no clock.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from ..errors import DecodeError
from .frames import HANDLE_LEN, inbox_subject, parse_handle

__all__ = ["InboxTable"]

W = TypeVar("W")

_MAX_SERIAL = 2**64 - 1


class InboxTable(Generic[W]):
    """Open requests of one node, keyed by serial.

    >>> t: InboxTable[str] = InboxTable("3669840e-d043-11ea-adc2-fcaa146e6b01")
    >>> serial, handle = t.open("waiter", deadline=10.0)
    >>> handle
    b'_INBOX.3669840e-d043-11ea-adc2-fcaa146e6b01.0000000000000001'
    >>> t.lookup(t.serial_of(handle))
    'waiter'
    """

    __slots__ = ("_deadlines", "_entries", "_next", "filter", "prefix", "uuid")

    def __init__(self, node_uuid: str) -> None:
        self.uuid = node_uuid
        #: the data-SUB filter that receives this node's replies (43 bytes)
        self.filter = inbox_subject(node_uuid)
        #: every reply handle of this node starts with this (44 bytes)
        self.prefix = self.filter + b"."
        self._next = 1
        self._entries: dict[int, W] = {}
        self._deadlines: dict[int, float] = {}

    def open(self, waiter: W, deadline: float) -> tuple[int, bytes]:
        """Register ``waiter`` under a new serial; returns ``(serial, reply_handle)``."""
        serial = self._next
        self._next = 1 if serial >= _MAX_SERIAL else serial + 1
        self._entries[serial] = waiter
        self._deadlines[serial] = deadline
        # make_handle's format, without re-validating our own uuid per request
        return serial, self.prefix + b"%016x" % serial

    def serial_of(self, subject: bytes) -> int:
        """The serial named by a reply subject of this inbox; DecodeError otherwise.

        One parser for handles, :func:`aoz._protocol.frames.parse_handle`, decides.
        """
        if len(subject) != HANDLE_LEN or not subject.startswith(self.prefix):
            raise DecodeError("reply subject is not a handle of this inbox", what="reply handle")
        return parse_handle(subject)[1]

    def lookup(self, serial: int) -> W | None:
        return self._entries.get(serial)

    def close(self, serial: int) -> W | None:
        self._deadlines.pop(serial, None)
        return self._entries.pop(serial, None)

    def expire(self, now: float) -> list[W]:
        """Remove and return the entries whose deadline is before ``now``."""
        gone = [s for s, d in self._deadlines.items() if d < now]
        return [w for s in gone if (w := self.close(s)) is not None]

    def drain(self) -> list[W]:
        """Remove and return every entry (the node is closing)."""
        out = list(self._entries.values())
        self._entries.clear()
        self._deadlines.clear()
        return out

    def __len__(self) -> int:
        return len(self._entries)
