"""The hot path in pure Python, and the contract both of its twins keep.

The hot path is the per-frame work of the data plane: the receive drain (frames off the
data SUB, routed, sequence-checked, queued per subscription) and the send side (publish
frames built and handed to the XPUB). It exists twice, with the same behaviour: here, and
compiled in ``aoz/_speedups.pyx``. :mod:`aoz.hotpath` chooses one at import, as pyzmq's
``select_backend`` does; tests/hotpath/test_twins.py feeds both the same input and
compares everything they leave behind, and ``make test`` runs the data-plane tests on
each.

The contract, which neither twin steps outside of:

- a drain reads and writes a :class:`ReceiveSide` (:class:`aoz.receive.Receiver`): its
  routing table, responder, reply callback, the sequence tracker's ``last_seen`` table,
  its ``holds`` flag and counters, and its three methods for the uncommon cases;
- a subscription is read for ``blocking`` (then asked for its ``room()`` once per
  drain) and fed with ``push``/``push_many``;
- a :class:`Sender` reads its :class:`FrameSource` (:class:`aoz.protocol.builder.
  FrameBuilder`): ``entries`` (a subject's cached prefix and sequence number),
  ``publisher``, ``publish`` and ``publish_many``; it sends on ``pub``;
- the rules both apply come from one place: where a payload's data starts is
  :func:`aoz.message.data_start` (the compiled twin has it in C, checked by the twin
  test), frames are built by the FrameBuilder (the compiled twin builds the one common
  case, a ``bytes`` payload on a known subject, from the builder's cached prefix), the
  numbers in :data:`CONSTANTS` are checked against the compiled module's at import.

This module touches no socket option and owns no state beyond the Sender's counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Protocol

import zmq

from ._errmap import translate
from .errors import TransportError, WouldBlock
from .message import Message, Responder, data_start
from .protocol.builder import Entry
from .protocol.codecs import AOZ_CODEC_IDS, Codec
from .protocol.frames import HANDLE_LEN, Kind, publish_subject_end
from .protocol.headers import HEADERS
from .protocol.sequence import FLAG, HEADER_LEN, PACK
from .protocol.subjects import MAX_SUBJECT
from .routing import RoutingTable
from .subscription import Subscription

__all__ = [
    "ABI", "BATCH", "CONSTANTS", "COPY_THRESHOLD", "YIELD_EVERY", "Entry", "FrameSource",
    "ReceiveSide", "Sender", "drain_sub", "subscription_anext",
]

#: bump with any change to the twins' contract (the compiled module's ABI must match)
ABI: Final = 10
BATCH: Final = 1024  # frames drained per wake-up before other callbacks run
COPY_THRESHOLD: Final = 65536  # larger frames are sent zero-copy
YIELD_EVERY: Final = 256  # publishes between forced yields of `await node.publish`
#: the protocol's numbers the compiled twin has built in (checked at import)
CONSTANTS: Final = {
    "BATCH": BATCH, "MAX_SUBJECT": MAX_SUBJECT, "HEADER_LEN": HEADER_LEN,
    "AOZ_CODEC_IDS": AOZ_CODEC_IDS, "SEQUENCE_FLAG": FLAG, "HEADERS_FLAG": HEADERS,
    "COPY_THRESHOLD": COPY_THRESHOLD,
    "YIELD_EVERY": YIELD_EVERY, "HANDLE_LEN": HANDLE_LEN,
}

# pyzmq's Cython-level send: the Socket subclass's send adds a Python layer (~0.3 us)
# that only matters for options aoz does not use (routing ids, groups, zero-copy)
_send: Callable[..., object] = getattr(zmq.backend, "Socket", zmq.Socket).send

# Entry: the pure twin's entry type is the builder's (the compiled twin has its own,
# readable from C)

#: ``Subscription.__anext__`` of the twin, or None for the subscription's own coroutine
#: (the compiled twin's returns a queued message in a ready awaitable; the result of
#: awaiting either is the same)
subscription_anext: Callable[[Subscription], Any] | None = None


class ReceiveSide(Protocol):
    """What a drain reads and writes: the receive path's state (aoz.receive.Receiver)."""

    routes: RoutingTable[Subscription]
    responder: Responder
    #: subject -> [publisher, last number] of the subject's latest publisher
    last_seen: dict[bytes, list[int]]
    holds: int  #: non-zero: a blocking subscription is full, stop reading
    messages_in: int
    bytes_in: int
    malformed: int

    def on_reply(self, subject: bytes, frame: bytes, start: int, now: float) -> None:
        """A reply frame (``start``: its payload's index)."""

    def sequence(self, subject: bytes, publisher: int, seq: int, msg: Message,
                 subs: tuple[Subscription, ...]) -> None:
        """A sequenced frame that is not simply the next of its subject's last publisher."""

    def other_frame(self, frame: bytes, now: float) -> None:
        """A request, a reply or anything malformed (the protocol core decides)."""

    def socket_error(self, exc: zmq.ZMQError, what: str) -> None:
        """A socket error while draining: raises unless the node is closing."""


class FrameSource(Protocol):
    """What a :class:`Sender` reads from its frame builder."""

    entries: dict[str, Any]
    publisher: int | None

    def publish(self, subject: str, data: object, codec: Codec | None = None) -> bytes: ...

    def publish_many(self, subject: str, items: Iterable[object],
                     codec: Codec | None = None) -> list[bytes]: ...


def drain_sub(rx: ReceiveSide, sock: zmq.Socket[bytes]) -> int:
    """Drain up to ``BATCH`` frames of the data SUB into ``rx``'s subscriptions.

    A publish frame on a subject seen before costs one parse, one slice, one dict
    lookup and one Message; messages are collected per subscription and handed over
    with one ``push_many`` each at the end. A subscription with ``overflow="block"``
    is asked for its ``room()`` once per drain and given at most that many in its
    batch: the drain stops at the frame that fills it (a message that may be packed,
    or any message when ``room()`` is 0, is ``push``-ed at once instead).
    """
    recv = sock.recv
    noblock = zmq.NOBLOCK
    routes = rx.routes
    cache = routes.cache
    scan = publish_subject_end
    publish = Kind.PUBLISH
    responder = rx.responder
    unpack = PACK.unpack_from
    last_seen = rx.last_seen
    pending: dict[Subscription, list[Message]] = {}
    budget: dict[Subscription, int] = {}  # what each blocking subscription may still take
    full = False  # a blocking subscription is full once this drain's batches are in
    now = time.time()
    n = 0
    nbytes = 0
    try:
        while n < BATCH and not rx.holds and not full:
            frame = recv(noblock)
            n += 1
            nbytes += len(frame)
            nul = scan(frame)
            if nul > 0:
                sb = frame[:nul]
                subs = cache.get(sb)
                if subs is None:
                    subs = routes.route(sb)
                    if subs is None:
                        rx.malformed += 1
                        continue
                if subs:
                    start = nul + 3
                    data = data_start(frame, start)
                    msg = Message(frame, nul, start, data, publish, None, now, responder)
                    if data - start >= HEADER_LEN and frame[start] & FLAG:
                        # sequenced: the next number from the subject's last publisher
                        # costs one unpack and one lookup; anything else takes sequence()
                        pid, seq = unpack(frame, start + 1)
                        st = last_seen.get(sb)
                        if st is not None and st[0] == pid and seq == st[1] + 1:
                            st[1] = seq
                        else:
                            if pending:  # what came before a gap is queued before it
                                _hand_over(pending)  # is reported (recovery holds)
                            rx.sequence(sb, pid, seq, msg, subs)
                    for s in subs:
                        if s.blocking:
                            # a blocking subscription takes up to room() messages as one
                            # batch, and the drain stops at the frame that fills it; a
                            # message that may be packed (its rows are queued whole), or
                            # room() 0, is pushed at once, in order
                            left = budget.get(s)
                            if left is None:
                                left = s.room()
                            if left <= 0 or data == start:
                                if pending:
                                    _hand_over(pending)
                                s.push(msg)
                                budget.pop(s, None)  # its room changed: asked again
                                continue
                            left -= 1
                            budget[s] = left
                            if not left:
                                full = True
                        queued = pending.get(s)
                        if queued is None:
                            pending[s] = [msg]
                        else:
                            queued.append(msg)
            else:
                if pending:  # keep each subscription's messages in arrival order
                    _hand_over(pending)
                rx.other_frame(frame, now)
                budget.clear()  # it may have pushed: rooms are asked again
    except zmq.Again:
        pass
    except zmq.ZMQError as exc:
        rx.socket_error(exc, "receiving on the data socket")
    finally:
        if pending:
            _hand_over(pending)
        rx.messages_in += n
        rx.bytes_in += nbytes
    return n


def _hand_over(pending: dict[Subscription, list[Message]]) -> None:
    for s, msgs in pending.items():
        s.push_many(msgs)
    pending.clear()


class Sender:
    """The send side of the hot path: one node's publish frames and their counters.

    ``publish`` builds a publish frame with the node's frame builder and sends it;
    ``offer`` does the same but hands back a frame ZeroMQ would not take now;
    ``build`` only builds it; ``send`` sends a ready frame. With ``send_policy="drop"``
    ZeroMQ never refuses (a full subscriber queue drops for that subscriber); with
    ``"block"`` a full queue raises :class:`WouldBlock`. ``due`` counts one publish
    toward the yield cadence (every ``YIELD_EVERY``), for callers that send otherwise.
    """

    __slots__ = ("_builder", "_since_yield", "bytes_out", "messages_out", "pub")

    def __init__(self, builder: FrameSource) -> None:
        self._builder = builder
        self.pub: zmq.Socket[bytes] | None = None  # set when the data plane opens
        self.messages_out = 0
        self.bytes_out = 0
        self._since_yield = 0

    def publish(self, subject: str, data: object, codec: Codec | None) -> bool:
        """Build and send; True once every ``YIELD_EVERY`` calls: then the caller
        (``await node.publish``) lets the loop run, so a tight loop of publishes
        cannot starve the node's tasks."""
        self.send(self._builder.publish(subject, data, codec))
        return self.due()

    def build(self, subject: str, data: object, codec: Codec | None) -> bytes:
        """The next publish frame of ``subject`` (numbered), not sent."""
        return self._builder.publish(subject, data, codec)

    def offer(self, subject: str, data: object, codec: Codec | None) -> bool | bytes:
        """Build and send one publish if ZeroMQ takes it now (``send_policy="block"``):
        False when sent, True when sent and the caller should yield (as ``publish``),
        and the frame itself, numbered and not sent, when a subscriber's queue is full
        (the caller waits for room and sends it: ``await node.publish``)."""
        frame = self._builder.publish(subject, data, codec)
        try:
            self.send(frame)
        except WouldBlock:
            return frame
        return self.due()

    def due(self) -> bool:
        """Count one publish; True when the caller should yield to the loop."""
        self._since_yield += 1
        if self._since_yield >= YIELD_EVERY:
            self._since_yield = 0
            return True
        return False

    def frames(self, subject: str, items: Iterable[object], codec: Codec | None
               ) -> list[bytes]:
        """The publish frames of every item, numbered in order; if one cannot be
        encoded the error is raised and nothing was numbered (``publish_many``)."""
        return self._builder.publish_many(subject, items, codec)

    def send_batch(self, frames: Sequence[bytes], start: int = 0) -> int:
        """Send ``frames[start:]`` in order until ZeroMQ would block; returns the index of
        the first frame not sent (``len(frames)`` when all were)."""
        pub = self.pub
        if pub is None:
            raise TransportError("the data publisher is not open")
        i = start
        nbytes = 0
        noblock = zmq.NOBLOCK
        try:
            for i in range(start, len(frames)):
                frame = frames[i]
                _send(pub, frame, noblock)
                nbytes += len(frame)
            else:
                i = len(frames)
        except zmq.Again:
            pass
        except zmq.ZMQError as exc:
            raise translate(exc, "publish failed") from exc
        finally:
            self.messages_out += i - start
            self.bytes_out += nbytes
        return i

    def send(self, frame: bytes) -> None:
        pub = self.pub
        if pub is None:
            raise TransportError("the data publisher is not open")
        n = len(frame)
        try:
            if n < COPY_THRESHOLD:
                _send(pub, frame, zmq.NOBLOCK)
            else:
                pub.send(frame, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            raise WouldBlock(
                "a subscriber's queue at this publisher is full; `await node.publish(...)` "
                "waits for room"
            ) from None
        except zmq.ZMQError as exc:
            raise translate(exc, "publish failed") from exc
        self.messages_out += 1
        self.bytes_out += n
