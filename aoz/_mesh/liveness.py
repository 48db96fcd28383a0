"""Peer liveness from the data links themselves, in both directions.

A peer's data link is up when both halves are: our SUB completed the ZMTP handshake
with its publisher (the data plane's monitor), and its SUB's inbox filter
(``_INBOX.<uuid>``, which every OZ and aoz node subscribes first, SPEC §2) has reached
our publisher (the interest set). The second half is what catches a frozen peer: its
kernel still accepts TCP and keeps the connection alive, but it stops answering our
publisher's heartbeats, so the publisher cuts its subscriber after three heartbeat
intervals and withdraws its filters. Discovery's expiry rule reads :meth:`up` through
the driver port's ``link_up``; :meth:`report` turns changes into ``link_up``/``link_down`` peer
events, called by the data plane as either half changes (the SUB's monitor, the XPUB's
subscription events) and by the discovery driver's peer events, so an event follows
its cause within the same loop turn (housekeeping re-checks every 0.25 s as a
backstop); :meth:`wait_subscribed` is what a short-lived publisher waits for.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from .._discovery.peers import Peer, PeerEvent, PeerEventHub
from .._protocol.frames import inbox_subject
from .dataplane import DataPlane
from .interest import InterestSet

__all__ = ["PeerLinks"]


class PeerLinks:
    """Link state per peer (see the module docstring)."""

    __slots__ = ("_hub", "_interest", "_peers", "_plane", "_seen", "_uuid")

    def __init__(
        self,
        uuid: str,
        plane: DataPlane,
        interest: InterestSet,
        hub: PeerEventHub,
        peers: Callable[[], list[Peer]],
    ) -> None:
        self._uuid = uuid
        self._plane = plane
        self._interest = interest
        self._hub = hub
        self._peers = peers
        self._seen: dict[str, bool] = {}  # peer uuid -> last link state reported

    def subscribed(self, peer: Peer) -> bool:
        """Whether ``peer``'s SUB is connected to our publisher with its filters in."""
        return self._interest.has_inbox(inbox_subject(peer.uuid))

    def up(self, endpoint: str) -> bool:
        """Whether the link with the peer at ``endpoint`` is up both ways."""
        if not self._plane.links.up(endpoint):
            return False
        peer = next((p for p in self._peers() if p.endpoint == endpoint), None)
        if peer is None or peer.uuid == self._uuid:
            return True
        return self.subscribed(peer)

    def report(self) -> None:
        """Turn link changes into ``link_up``/``link_down`` peer events."""
        seen = self._seen
        current = {p.uuid: p for p in self._peers() if p.uuid != self._uuid}
        for uuid in [u for u in seen if u not in current]:
            del seen[uuid]  # departed peers leave no state behind
        for uuid, peer in current.items():
            up = self.up(peer.endpoint)
            if seen.get(uuid, False) != up:
                if up or uuid in seen:
                    self._hub.push(PeerEvent(kind="link_up" if up else "link_down", peer=peer))
                seen[uuid] = up

    def snapshot(self) -> list[tuple[Peer, bool]]:
        """Every known peer (not this node) with its link state as last reported.

        It first reports what changed (to the listeners already open), so a listener
        opened now with this snapshot and a later :meth:`report` agree: no event twice,
        none missing."""
        self.report()
        return [(p, self._seen.get(p.uuid, False)) for p in self._peers() if p.uuid != self._uuid]

    async def wait_subscribed(self, quiet: float) -> int:
        """Wait until every known peer is :meth:`subscribed` and the peer table has been
        quiet for ``quiet`` seconds; returns how many peers (the caller bounds it)."""
        changed = self._plane.interest_changed
        events = self._hub.stream()
        try:
            while True:
                others = [p for p in self._peers() if p.uuid != self._uuid]
                missing = [p for p in others if not self.subscribed(p)]
                if not missing:
                    with anyio.move_on_after(quiet) as settle:
                        await events.__anext__()  # a peer joined or left: look again
                    if settle.cancelled_caught:
                        return len(others)
                    continue
                changed.clear()
                self._plane.read_interest()
                if not all(self.subscribed(p) for p in missing):
                    with anyio.move_on_after(quiet):
                        await changed.wait()
        finally:
            await events.aclose()
