"""The interest set: which subscription filters have reached this node's publisher. Pure.

A node's data publisher is a ZeroMQ XPUB, which reports every filter its peers'
SUB sockets subscribe (``0x01 + filter``) and drop (``0x00 + filter``), each
distinct filter once. :class:`InterestSet` folds those events into a set and answers
two questions without I/O:

- :meth:`InterestSet.covers`: would a frame on this subject reach some subscriber?
  (``wait_for_interest`` waits for this; a request raises ``NoResponders`` without it.)
- :meth:`InterestSet.routable`: has the inbox filter of a reply handle arrived, so that
  a reply would not be dropped by ZeroMQ?

A catch-all filter (``b""``: a ``>`` subscriber or an unanchored regex -- a monitor or
a recorder somewhere in the mesh) receives every publication, so it counts for
``covers``; but it is not a *responder*: with ``responders=True`` it is ignored, so one
``aoz sub '>'`` in the mesh does not turn every request without a real subscriber
into a timeout instead of ``NoResponders``. Wildcards never see inbox traffic, so no
catch-all routes a reply either.

>>> s = InterestSet()
>>> s.apply(b"\\x01MD.")
True
>>> s.covers(b"MD.NYSE.IBM"), s.covers(b"FX.EUR")
(True, False)
>>> s.apply(b"\\x01"), s.covers(b"FX.EUR"), s.covers(b"FX.EUR", responders=True)
(True, True, False)
"""

from __future__ import annotations

from .._protocol.frames import INBOX_PREFIX, inbox_of
from .._protocol.queuegroups import QUEUE_PREFIX, QueueTable

_QUEUE_B = QUEUE_PREFIX.encode()

__all__ = ["InterestSet"]


class InterestSet:
    """Filters reported by an XPUB (see the module docstring)."""

    __slots__ = ("_filters", "_lengths", "queues", "version")

    def __init__(self) -> None:
        self._filters: set[bytes] = set()
        self._lengths: dict[int, int] = {}  # filter length -> how many filters have it
        #: the queue groups among the filters (members per subject and group)
        self.queues = QueueTable()
        #: increases on every change (a cheap "did anything change" for callers)
        self.version = 0

    def apply(self, event: bytes) -> bool:
        """Fold one XPUB event in; returns whether the set changed."""
        if not event:
            return False
        flt = event[1:]
        if event[0] == 1:
            if flt in self._filters:
                return False
            self._filters.add(flt)
            self._lengths[len(flt)] = self._lengths.get(len(flt), 0) + 1
            if flt.startswith(_QUEUE_B):
                self.queues.add(flt)
        elif event[0] == 0:
            if flt not in self._filters:
                return False
            self._filters.discard(flt)
            if flt.startswith(_QUEUE_B):
                self.queues.discard(flt)
            left = self._lengths[len(flt)] - 1
            if left:
                self._lengths[len(flt)] = left
            else:
                del self._lengths[len(flt)]
        else:
            return False  # not a subscription event (an XPUB only sends 0 and 1)
        self.version += 1
        return True

    def covers(self, subject: bytes, *, responders: bool = False) -> bool:
        """Whether some filter selects frames on ``subject`` (validated subject bytes).

        A frame starts ``subject NUL``, so a filter covers it when it is a prefix of
        that. One set lookup per distinct filter length, however many filters.
        """
        frame_start = subject + b"\0"
        filters = self._filters
        for n in self._lengths:
            if n == 0 and responders:
                continue
            if n <= len(frame_start) and frame_start[:n] in filters:
                return True
        return False

    def queue_groups(self, subject: str) -> dict[str, list[str]]:
        """The queue groups serving ``subject``: group -> member ids (sorted)."""
        return self.queues.groups(subject)

    def queue_targets(self, subject: str) -> list[str]:
        """One member subject per queue group on ``subject`` (each group round robin):
        where a message or request for the groups goes."""
        return self.queues.targets(subject)

    def routable(self, handle: bytes) -> bool:
        """Whether a reply on ``handle`` has a route: its inbox filter, or any
        inbox-shaped filter covering it (an OZ peer's, a broker's) has arrived."""
        if inbox_of(handle) in self._filters:
            return True
        return any(
            f.startswith(INBOX_PREFIX) and handle.startswith(f) for f in self._filters
        )

    def filters(self) -> frozenset[bytes]:
        """Every filter now (a copy; read :attr:`version` to know when to read again)."""
        return frozenset(self._filters)

    def has_inbox(self, inbox_filter: bytes) -> bool:
        """Whether a peer's inbox filter (``_INBOX.<uuid>``) has arrived: its data SUB is
        connected to this publisher, handshaken, and has sent its subscriptions (every
        OZ and aoz node subscribes its inbox first thing, SPEC §2)."""
        return inbox_filter in self._filters

    def __contains__(self, flt: bytes) -> bool:
        return flt in self._filters

    def __len__(self) -> int:
        return len(self._filters)
