"""The peer table's public types, shared by every discovery mode."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["Peer", "PeerEvent", "PeerEventKind"]

PeerEventKind = Literal["joined", "left", "expired"]


class Peer(msgspec.Struct, frozen=True, kw_only=True):
    """A node seen through discovery.

    ``last_seen`` is the ``time.time()`` of its most recent ``C``/``c`` (seconds).
    """

    uuid: str
    program: str
    host: str
    pid: int
    endpoint: str
    last_seen: float


class PeerEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A change in the peer table: a peer ``joined``, ``left`` (sent ``D``) or ``expired``."""

    kind: PeerEventKind
    peer: Peer
