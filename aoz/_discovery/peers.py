"""The peer table's public types, shared by every discovery mode, and the hub that
fans peer events out to ``node.peer_events()`` listeners."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

import anyio
import msgspec

from .._mesh.subscription import Mailbox
from ..errors import ClosedError, WaitTimeout

__all__ = ["LINK_KINDS", "Peer", "PeerEvent", "PeerEventHub", "PeerEventKind", "PeerEventStream"]

PeerEventKind = Literal["joined", "left", "expired", "link_up", "link_down"]
#: kinds about a peer's data links rather than its membership
LINK_KINDS = frozenset(("link_up", "link_down"))


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
    """A change in the peer table: a peer ``joined``, ``left`` (sent ``D``) or ``expired``;
    or in its data links (``link_up``: both directions handshaken and subscribed;
    ``link_down``: one of them lost), for streams opened with ``links=True``."""

    kind: PeerEventKind
    peer: Peer


class PeerEventStream:
    """Peer events (joined/left/expired) as an async iterator; ``aclose()`` stops it."""

    __slots__ = ("_box",)

    def __init__(self, box: Mailbox[PeerEvent]) -> None:
        self._box = box

    def __aiter__(self) -> PeerEventStream:
        return self

    async def __anext__(self) -> PeerEvent:
        return await self._box.get()

    async def aclose(self) -> None:
        self._box.close()


class PeerEventHub:
    """Every listener gets every event; each listener's queue is bounded (drop oldest)."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: dict[Mailbox[PeerEvent], bool] = {}  # listener -> wants link events

    def push(self, event: PeerEvent) -> None:
        link = event.kind in LINK_KINDS
        for listener, links in list(self._listeners.items()):
            if links or not link:
                listener.push(event)

    def stream(
        self, queue_size: int = 1024, *, links: bool = False, first: Iterable[PeerEvent] = (),
    ) -> PeerEventStream:
        """A new listener; ``first`` is queued ahead of every later event (a snapshot)."""
        box: Mailbox[PeerEvent] = Mailbox(queue_size, "drop_oldest")
        for event in first:
            box.push(event)
        def forget() -> None:
            self._listeners.pop(box, None)

        box._on_close = forget
        self._listeners[box] = links
        return PeerEventStream(box)

    def close(self, error: BaseException | None = None) -> None:
        """End every listener (with ``error`` instead of a clean end when given)."""
        for listener in list(self._listeners):
            listener.close(error)

    async def wait_for(
        self, known: Callable[[], list[Peer]], pred: Callable[[Peer], bool], timeout: float
    ) -> Peer:
        """The first peer, known now or joining later, that satisfies ``pred``."""
        events = self.stream()
        try:
            with anyio.fail_after(timeout):
                for p in known():
                    if pred(p):
                        return p
                async for ev in events:
                    if ev.kind == "joined" and pred(ev.peer):
                        return ev.peer
        except TimeoutError:
            raise WaitTimeout(f"no matching peer appeared within {timeout} s",
                              timeout=timeout) from None
        finally:
            await events.aclose()
        raise ClosedError("node closed while waiting for a peer")
