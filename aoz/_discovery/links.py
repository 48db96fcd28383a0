"""The peer-link port: what a discovery driver may do to its node, and what a node
needs from a driver. Defined here, beside the drivers that use it, so the node
depends on discovery and never the other way round (no import cycle).

A driver is started by the node in its task group with ``await tg.start(driver.run,
links)`` and calls ``task_status.started()`` once the node may be used (naming: after
hearing its own ``C``). It owns the peer table and sends ``D`` in ``goodbye()``, which
the node awaits on close before closing its sockets.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..config import Settings
from .peers import Peer, PeerEvent

__all__ = ["DataLinks", "Driver"]


class DataLinks(Protocol):
    """The node as a driver sees it."""

    uuid: str
    endpoint: str  #: data PUB address to announce
    settings: Settings
    program: str
    host: str
    pid: int

    def connect_peer(self, endpoint: str) -> None:
        """Connect the data SUB to a peer's publisher (idempotent per endpoint)."""

    def disconnect_peer(self, endpoint: str) -> None:
        """Disconnect the data SUB from a peer's publisher."""

    def link_up(self, endpoint: str) -> bool:
        """Whether the data link with the peer at ``endpoint`` is up both ways: our SUB's
        handshake with its publisher and its inbox filter at ours (:mod:`aoz._mesh.liveness`)."""

    def link_silent(self, endpoint: str) -> bool:
        """Whether our SUB's last attempt to connect to ``endpoint`` got no answer at all
        (a cut network or a host that is down; a port nobody listens on refuses at
        once): expiry then keeps trying that link for a while (:mod:`.state`)."""

    def peer_event(self, event: PeerEvent) -> None:
        """Fan a peer event out to ``node.peer_events()`` listeners."""

    def count(self, counter: str, n: int = 1) -> None:
        """Add to a discovery counter of ``node.statistics()``."""


class Driver(Protocol):
    """A discovery driver as the node sees it."""

    @property
    def peers(self) -> list[Peer]: ...

    async def run(self, links: DataLinks, *, task_status: Any = ...) -> None: ...

    async def goodbye(self) -> None: ...

    def links_changed(self) -> None:
        """A data link's state changed: look at the links at the next tick (<= 0.1 s)
        rather than at the next periodic check (<= 0.5 s)."""

    def statistics(self) -> dict[str, int]: ...

    def uuid_at(self, endpoint: str) -> str | None:
        """The uuid announced at a data endpoint (listed or being probed), if any."""
