"""The hot path in pure Python, and the contract both of its twins keep.

The hot path is the per-frame work of the data plane: the receive drain (frames off the
data SUB, routed, sequence-checked, queued per subscription) and the send side (publish
frames built and handed to the XPUB). It exists twice, with the same behaviour: here, and
compiled in ``aoz/_mesh/_speedups.pyx``. :mod:`aoz._mesh.hotpath` chooses one at import, as pyzmq's
``select_backend`` does; tests/hotpath/test_twins.py feeds both the same input and
compares everything they leave behind, and ``make test`` runs the data-plane tests on
each.

The contract, which neither twin steps outside of:

- a drain reads and writes a :class:`ReceiveSide` (:class:`aoz._mesh.receive.Receiver`): its
  routing table, responder, reply callback, the sequence tracker's ``last_seen`` table,
  its ``holds`` flag and counters, and its three methods for the uncommon cases;
- a subscription is read for ``blocking`` (then asked for its ``room()`` once per
  drain) and fed with ``push``/``push_many``;
- a :class:`Sender` reads its :class:`FrameSource` (:class:`aoz._protocol.builder.
  FrameBuilder`): ``entries`` (a subject's cached prefix and sequence number),
  ``publisher``, ``publish`` and ``publish_many``; it sends on ``pub``; with a
  :class:`CacheStore` in ``store`` (the publisher cache's, :mod:`aoz._mesh.cache`) it keeps
  every frame it numbers for good there, in the same call;
- a :class:`CacheStore` is the publisher cache's frames and bounds: both twins have
  one, with the same eviction and the same counters;
- an :class:`Inbox` holds a node's open requests: futures (``done``, ``set_result``)
  and reply streams (any :class:`aoz._mesh.subscription.Mailbox`: ``push``), and builds reply
  messages with the responder it is given; it owns no timer and no socket;
- the rules both apply come from one place: where a payload's data starts is
  :func:`aoz._mesh.message.data_start` (the compiled twin has it in C, checked by the twin
  test), frames are built by the FrameBuilder (the compiled twin builds the one common
  case, a ``bytes`` payload on a known subject, from the builder's cached prefix), the
  numbers in :data:`CONSTANTS` are checked against the compiled module's at import.

This module touches no socket option and owns no state beyond the Sender's counters,
the cache store's frames and an Inbox's table.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Sequence
from heapq import heapify, heappop, heappush
from typing import Any, Final, Protocol

import zmq

from .._protocol.builder import Entry
from .._protocol.codecs import AOZ_CODEC_IDS, Codec
from .._protocol.frames import HANDLE_LEN, Kind, publish_subject_end
from .._protocol.headers import HEADERS
from .._protocol.inbox import InboxTable
from .._protocol.sequence import FLAG, HEADER_LEN, PACK
from .._protocol.subjects import MAX_SUBJECT
from ..errors import DecodeError, TransportError, WouldBlock
from .errmap import translate
from .message import DONE as _DONE
from .message import Message, Responder, data_start
from .routing import RoutingTable
from .subscription import Mailbox, Subscription

__all__ = [
    "ABI", "BATCH", "CONSTANTS", "COPY_THRESHOLD", "DONE", "YIELD_EVERY", "CacheStore", "Entry",
    "FrameSource", "Inbox", "ReceiveSide", "Sender", "drain_sub", "node_publish",
    "subscription_anext",
]

#: bump with any change to the twins' contract (the compiled module's ABI must match)
ABI: Final = 13
BATCH: Final = 1024  # frames drained per wake-up before other callbacks run
COPY_THRESHOLD: Final = 65536  # larger frames are sent zero-copy
YIELD_EVERY: Final = 256  # publishes between forced yields of `await node.publish`
_HEAP_SLACK: Final = 64  # finished requests an Inbox's deadline heap may hold beyond 2x live
#: the protocol's numbers the compiled twin has built in (checked at import)
CONSTANTS: Final = {
    "BATCH": BATCH, "MAX_SUBJECT": MAX_SUBJECT, "HEADER_LEN": HEADER_LEN,
    "AOZ_CODEC_IDS": AOZ_CODEC_IDS, "SEQUENCE_FLAG": FLAG, "HEADERS_FLAG": HEADERS,
    "COPY_THRESHOLD": COPY_THRESHOLD,
    "YIELD_EVERY": YIELD_EVERY, "HANDLE_LEN": HANDLE_LEN,
    "HEAP_SLACK": _HEAP_SLACK,
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

#: ``Node.publish`` of the twin, or None for the node's own (the compiled twin's runs the
#: common case without a Python frame; both do the same steps)
node_publish: Callable[..., Any] | None = None

#: what a send that is already done returns (the compiled twin's is a C-level ready
#: awaitable); both are stateless coroutines that finish at once
DONE: Coroutine[Any, Any, None] = _DONE


class ReceiveSide(Protocol):
    """What a drain reads and writes: the receive path's state (aoz._mesh.receive.Receiver)."""

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


class CacheStore:
    """The publisher cache's frames: the last ``depth`` frames of every subject (the
    oldest leaves first), at most ``max_bytes`` bytes in all (past it, the oldest frame
    of the subject first inserted goes and that subject moves to the end: round robin).
    ``nbytes`` is what it holds; ``evicted`` counts the frames that left at either bound.
    :class:`aoz._mesh.cache.PublishCache` owns one and answers queries from ``deques``; a
    :class:`Sender` whose ``store`` it is calls :meth:`add` for every frame it numbers.
    """

    __slots__ = ("depth", "deques", "evicted", "max_bytes", "nbytes")

    def __init__(self, depth: int, max_bytes: int) -> None:
        self.depth = depth
        self.max_bytes = max_bytes
        #: subject -> its last frames, oldest first (a deque of maxlen ``depth``)
        self.deques: dict[str, deque[bytes]] = {}
        self.nbytes = 0
        self.evicted = 0

    def add(self, subject: str, frame: bytes) -> None:
        """Keep ``frame``, just numbered on ``subject``."""
        d = self.deques.get(subject)
        if d is None:
            d = self.deques[subject] = deque(maxlen=self.depth)
        elif len(d) == self.depth:
            self.nbytes -= len(d[0])  # the append below pushes it out
            self.evicted += 1
        d.append(frame)
        self.nbytes += len(frame)
        if self.nbytes > self.max_bytes:
            self.shrink()

    def shrink(self) -> None:
        """Over the byte bound: the oldest frame of the first subject goes, and that
        subject moves to the end (round robin), until the store fits."""
        subjects = self.deques
        while self.nbytes > self.max_bytes and subjects:
            subject = next(iter(subjects))
            d = subjects.pop(subject)
            self.nbytes -= len(d.popleft())
            self.evicted += 1
            if d:
                subjects[subject] = d


class Sender:
    """The send side of the hot path: one node's publish frames and their counters.

    ``publish`` builds a publish frame with the node's frame builder and sends it;
    ``build`` only builds it; ``send`` sends a ready frame. With ``send_policy="drop"``
    ZeroMQ never refuses (a full subscriber queue drops for that subscriber); with
    ``"block"`` a full queue raises :class:`WouldBlock` and leaves the frame, numbered
    but not sent, in ``unsent``. ``due`` counts one publish toward the yield cadence
    (every ``YIELD_EVERY``), for callers that send otherwise.

    With a :class:`CacheStore` in ``store`` (a node with a publisher cache), every
    frame numbered for good is kept there in the same call: by ``publish`` and ``put``
    once it is sent, by ``frames`` as it is built (``keep`` is for a frame ZeroMQ
    refused that the caller will still send or drop). ``build`` keeps nothing.
    """

    __slots__ = ("_builder", "_since_yield", "bytes_out", "messages_out", "pub", "store",
                 "thread", "unsent")

    def __init__(self, builder: FrameSource) -> None:
        self._builder = builder
        self.pub: zmq.Socket[bytes] | None = None  # set when the data plane opens
        self.store: CacheStore | None = None  # the publisher cache's, when it has one
        #: the last frame ZeroMQ refused (WouldBlock), for the caller to wait with
        self.unsent: bytes | None = None
        self.messages_out = 0
        self.bytes_out = 0
        self._since_yield = 0
        #: the node's loop thread (``threading.get_ident()``) while the node is open, else
        #: 0: ``node.publish`` called from any other thread sends nothing (it returns a
        #: coroutine that publishes when the loop runs it, as run_coroutine_threadsafe
        #: does), and on a node not open it raises
        self.thread = 0

    def publish(self, subject: str, data: object, codec: Codec | None) -> bool:
        """Build, send and keep; True once every ``YIELD_EVERY`` calls: then the caller
        (``await node.publish``) lets the loop run, so a tight loop of publishes
        cannot starve the node's tasks."""
        frame = self._builder.publish(subject, data, codec)
        self.send(frame)
        if self.store is not None:
            self.store.add(subject, frame)
        return self.due()

    def put(self, subject: str, frame: bytes) -> bool:
        """Send and keep a publish frame of ``subject`` built otherwise (headers); True
        when the caller should yield, as :meth:`publish`."""
        self.send(frame)
        if self.store is not None:
            self.store.add(subject, frame)
        return self.due()

    def keep(self, subject: str, frame: bytes) -> None:
        """Keep a frame numbered for good that was not sent yet (a no-op without a
        store)."""
        if self.store is not None:
            self.store.add(subject, frame)

    def build(self, subject: str, data: object, codec: Codec | None) -> bytes:
        """The next publish frame of ``subject`` (numbered), not sent."""
        return self._builder.publish(subject, data, codec)

    def due(self) -> bool:
        """Count one publish; True when the caller should yield to the loop."""
        self._since_yield += 1
        if self._since_yield >= YIELD_EVERY:
            self._since_yield = 0
            return True
        return False

    def frames(self, subject: str, items: Iterable[object], codec: Codec | None
               ) -> list[bytes]:
        """The publish frames of every item, numbered in order and kept; if one cannot
        be encoded the error is raised and nothing was numbered (``publish_many``)."""
        frames = self._builder.publish_many(subject, items, codec)
        store = self.store
        if store is not None:
            for frame in frames:
                store.add(subject, frame)
        return frames

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
            self.unsent = frame
            raise WouldBlock(
                "a subscriber's queue at this publisher is full; `await node.publish(...)` "
                "waits for room"
            ) from None
        except zmq.ZMQError as exc:
            raise translate(exc, "publish failed") from exc
        self.messages_out += 1
        self.bytes_out += n


class Inbox(InboxTable[Any]):
    """The request side of the hot path: one node's open requests and their replies.

    The table (:class:`aoz._protocol.inbox.InboxTable`: serial -> waiter, reply handles,
    the per-entry deadlines :meth:`expire` sweeps) plus what runs per request and per
    reply:

    - :meth:`open_timed` opens a first-reply request (a future) and keeps its deadline
      in one heap, so the node arms one loop timer for the earliest deadline
      (:meth:`next_deadline`) instead of one timer per request; :meth:`due` pops what
      has passed. The heap holds the futures themselves, so a timeout never depends on
      the entry still being in the table; it is rebuilt without the finished ones when
      they outnumber the live entries (so it stays within a constant of them).
    - :meth:`on_reply` is the receive path's reply hook (``ReceiveSide.on_reply``):
      the handle's serial (``parse_handle``'s rule), the waiter, one ``Message``; a
      future gets it and leaves the table, a reply stream (a ``Mailbox``) is pushed
      to; a reply for nobody is counted in ``replies_dropped``.
    """

    __slots__ = ("_heap", "_responder", "replies_dropped")

    def __init__(self, node_uuid: str, responder: Responder) -> None:
        super().__init__(node_uuid)
        self._responder = responder
        self._heap: list[tuple[float, int, Any, str, float]] = []
        self.replies_dropped = 0

    def open_timed(self, waiter: Any, deadline: float, subject: str, timeout: float
                   ) -> tuple[int, bytes]:
        """:meth:`open` a request whose ``waiter`` (a future) fails at ``deadline``:
        the heap keeps ``(deadline, serial, waiter, subject, timeout)``."""
        serial, handle = self.open(waiter, deadline)
        heap = self._heap
        if len(heap) >= 2 * len(self) + _HEAP_SLACK:
            heap[:] = [e for e in heap if not e[2].done()]
            heapify(heap)
        heappush(heap, (deadline, serial, waiter, subject, timeout))
        return serial, handle

    def due(self, now: float) -> list[tuple[Any, str, float]]:
        """Pop every timed request whose deadline is ``now`` or before: ``(waiter,
        subject, timeout)`` of those whose waiter is not done yet."""
        heap = self._heap
        out = []
        while heap and heap[0][0] <= now:
            _, _, waiter, subject, timeout = heappop(heap)
            if not waiter.done():
                out.append((waiter, subject, timeout))
        return out

    def next_deadline(self) -> float | None:
        """The earliest deadline in the heap (possibly of a finished request)."""
        return self._heap[0][0] if self._heap else None

    @property
    def deadlines(self) -> int:
        """How many deadlines the heap holds (of open and of finished requests)."""
        return len(self._heap)

    def drain(self) -> list[Any]:
        self._heap.clear()
        return super().drain()

    def on_reply(self, subject: bytes, frame: bytes, start: int, now: float) -> None:
        """A reply frame arrived on ``subject`` (a reply handle of ours, or not)."""
        try:
            serial = self.serial_of(subject)
        except DecodeError:
            self.replies_dropped += 1  # someone else's reply or garbage
            return
        waiter = self.lookup(serial)
        if waiter is None:
            self.replies_dropped += 1
            return
        msg = Message(frame, len(subject), start, data_start(frame, start), Kind.REPLY, None,
                      now, self._responder)
        if isinstance(waiter, Mailbox):
            waiter.push(msg)
        else:
            self.close(serial)
            if not waiter.done():
                waiter.set_result(msg)
