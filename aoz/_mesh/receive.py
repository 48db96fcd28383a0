"""The receive path: frames off the data SUB -> routing -> subscriptions' mailboxes.

Owns what the hot path's drain reads and writes (:class:`Receiver`, the
:class:`aoz._mesh._hotpath.ReceiveSide` of both twins): the routing table it routes by, the
sequence tracker (loss per publisher and subject), the back-pressure hold of blocking
subscriptions, and the receive counters. The per-frame loop itself is the hot path's
(:mod:`aoz._mesh.hotpath`); this room handles what the loop hands back: a sequence that is not
simply the next number, requests, replies and malformed frames, socket errors, and
publisher heartbeats (:mod:`aoz._protocol.heartbeat`: a stream whose publisher says it
is further than what arrived has lost its tail). Every loss it finds, a gap or a lost
tail, is reported through one method, :meth:`Receiver.report_gap`.

It owns no socket: the data plane (:mod:`aoz._mesh.dataplane`) calls :meth:`Receiver.drain`
with the SUB when it is readable, and gives it ``kick`` to re-run that drain.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from .._protocol import heartbeat
from .._protocol.frames import Kind, decode_frame
from .._protocol.sequence import SequenceTracker
from .._protocol.subjects import Pattern
from ..errors import AozError
from .errmap import drain_error
from .hotpath import drain_sub
from .message import Message, Responder, data_start
from .recovery import MemorySubscription, Recovery
from .routing import RoutingTable
from .subscription import Subscription

if TYPE_CHECKING:
    import zmq

__all__ = ["Receiver"]

log = logging.getLogger("aoz.node")

_WRAP = 2**32


class _HeartbeatIn:
    """Where the drain hands frames on the heartbeat subject: what a subscription is to
    the hot path (``blocking``, ``room``, ``push``, ``push_many``). ``blocking`` with
    ``room()`` 0 makes the drain push each one as it comes, in order with the data
    frames around it."""

    __slots__ = ("_rx",)
    blocking = True

    def __init__(self, rx: Receiver) -> None:
        self._rx = rx

    def room(self) -> int:
        return 0  # never batched: each one is read as it comes

    def push(self, msg: Message) -> None:
        self._rx.heartbeat(msg.payload)

    def push_many(self, msgs: list[Message]) -> None:
        for msg in msgs:
            self._rx.heartbeat(msg.payload)


class Receiver:
    """The receive path's state and its uncommon cases (see the module docstring)."""

    def __init__(
        self,
        routes: RoutingTable[Subscription],
        responder: Responder,
        on_reply: Callable[[bytes, bytes, int, float], None],
    ) -> None:
        self.routes = routes
        self.responder = responder
        #: a reply frame: (subject, frame, payload start, time received)
        self.on_reply = on_reply
        self.sequences = SequenceTracker()
        #: the tracker's table the hot path reads (subject -> [publisher, last number])
        self.last_seen = self.sequences.last_seen
        self.holds = 0  # subscriptions with overflow="block" that are full
        self.messages_in = 0
        self.bytes_in = 0
        self.malformed = 0
        self.lost = 0  # messages known missing upstream (sequence gaps), all subscriptions
        self.lost_tails = 0  # of which found by publisher heartbeats (lost tails)
        self.heartbeats_in = 0  # well-formed heartbeat frames received
        self.closing = False  # set by the data plane: socket errors are expected then
        #: re-run the drain (set by the data plane once the SUB's reader runs)
        self.kick: Callable[[], None] = lambda: None
        # every aoz node's data SUB subscribes to the heartbeat subject (aoz._mesh.dataplane);
        # the drain routes its frames here like an exact subscription's
        routes.pin(heartbeat.SUBJECT, cast(Subscription, _HeartbeatIn(self)))
        #: recovering subscriptions' gaps go here (aoz._mesh.recovery; set by the node)
        self.recovery: Recovery | None = None

    def drain(self, sock: zmq.Socket[bytes]) -> int:
        """Drain up to a batch of frames of the data SUB (the hot path)."""
        return drain_sub(self, sock)

    def sequence(
        self, subject: bytes, publisher: int, seq: int, msg: Message,
        subs: tuple[Subscription, ...],
    ) -> None:
        """A sequenced frame that is not simply the next one of its subject's latest
        publisher: a first frame, another publisher, or a gap."""
        missing = self.sequences.check(subject, publisher, seq, time.monotonic())
        if missing:
            self.report_gap(subject, publisher, (seq - missing) % _WRAP, (seq - 1) % _WRAP,
                            subs, msg)

    def report_gap(
        self, subject: bytes, publisher: int, first: int, last: int,
        subs: tuple[Subscription, ...], msg: Message | None,
    ) -> None:
        """Numbers ``first..last`` (inclusive, modulo 2**32) of ``publisher`` on
        ``subject`` are missing for ``subs``: the one place every gap is reported (a
        sequence jump, with ``msg`` the message after it, whose ``gap`` is set; a
        history seam; a lost tail a heartbeat revealed, ``msg`` None, also counted in
        ``lost_tails``). Subscriptions with ``recover=True`` ask the publisher's cache
        (aoz._mesh.recovery) and hold what follows meanwhile; the others count the numbers
        ``lost`` now (which tells ``error_cb``). The sequence tracker has already moved
        past ``last``, so one loss is reported once."""
        missing = (last - first) % _WRAP + 1
        if msg is not None:
            msg.gap = missing
        else:
            self.lost_tails += missing  # found by a heartbeat (recovered or not)
        recovering: list[MemorySubscription] = []
        recovery = self.recovery
        for s in subs:
            if recovery is not None and type(s) is MemorySubscription and s.recover:
                recovering.append(s)
            else:
                s.upstream_loss(missing)
        if recovering and recovery is not None:
            # the node counts what the cache could not give back (recovery.lost)
            recovery.gap(subject, publisher, first, missing, recovering)
        else:
            self.lost += missing

    def heartbeat(self, payload: bytes) -> None:
        """A publisher heartbeat (:mod:`aoz._protocol.heartbeat`): every stream it names
        that this node tracks and that is behind has lost its tail. Streams this node
        does not track (subjects it does not subscribe to, or has received nothing on)
        are ignored; a malformed heartbeat is counted and dropped whole."""
        self.messages_in -= 1  # control traffic, not a message (the drain counted it)
        try:
            publisher, items = heartbeat.decode(payload)
        except AozError as exc:
            self.malformed += 1
            log.debug("dropped malformed heartbeat (%s): %r", exc, payload[:64])
            return
        self.heartbeats_in += 1
        advance = self.sequences.advance
        for subject, seq in items:
            missing = advance(subject, publisher, seq)
            if missing:
                self.report_gap(subject, publisher, (seq - missing + 1) % _WRAP, seq,
                                self.routes.route(subject) or (), None)

    def forget_streams(self, closed: Pattern) -> None:
        """A subscription to ``closed`` ended: forget the streams of the subjects it
        matched that no subscription receives any more (a gap across that absence would
        not be a loss); every other stream keeps counting. Costs one prefix test per
        tracked subject for a wildcard, one lookup for an exact subject."""
        if closed.kind == "exact":
            candidates = [closed.text.encode()]
        else:
            candidates = [
                sb for sb in self.sequences.subjects(closed.zmq_prefix)
                if closed.matches(sb.decode())
            ]
        self.sequences.forget(sb for sb in candidates if not self.routes.route(sb))

    def hold(self) -> None:
        """A subscription with ``overflow="block"`` is full: stop reading the data SUB
        (ZeroMQ's queues, then TCP, then a blocking publisher take the back-pressure)."""
        self.holds += 1

    def release(self) -> None:
        """That subscription has room again."""
        self.holds -= 1
        if not self.holds:
            self.kick()

    def other_frame(self, frame: bytes, now: float) -> None:
        """Requests, replies and anything malformed (validated by the protocol core)."""
        try:
            fr = decode_frame(frame)
        except AozError as exc:
            self.malformed += 1
            log.debug("dropped malformed frame (%s): %r", exc, frame[:64])
            return
        if fr.kind is Kind.REPLY:
            self.on_reply(fr.subject, frame, fr.payload_start, now)
            return
        subs = self.routes.route(fr.subject)
        if subs is None:
            self.malformed += 1
            return
        if subs:
            reply = fr.reply.decode("ascii") if fr.reply is not None else None
            start = fr.payload_start
            msg = Message(frame, len(fr.subject), start, data_start(frame, start), fr.kind,
                          reply, now, self.responder)
            for s in subs:
                s.push(msg)

    def socket_error(self, exc: zmq.ZMQError, what: str) -> None:
        """A socket error while draining: fatal unless the node is closing."""
        drain_error(exc, what, closing=self.closing)
