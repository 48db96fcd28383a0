"""The data plane: a node's ZeroMQ sockets, their readers and its peer links.

This is the only module of the node that imports zmq, and the one place where
``zmq.ZMQError`` becomes an aoz error (:func:`_mapped`).

Sockets, as in OZ: an XPUB that this node's frames leave from (bound; peers' SUBs
connect to it) and a SUB that connects to every peer's publisher, this node's own
included (self-delivery). It is an XPUB so that the node sees which filters have
reached it (:class:`~aoz.interest.InterestSet`). In naming and UDP modes a monitor on
the SUB tells which peer links are up; with CURVE and an allow-list a ZAP socket
answers authentication requests.

How a frame flows from the socket to ``async for``: ZeroMQ exposes a file descriptor
that signals "look at ZMQ_EVENTS"; the loop watches it with ``add_reader`` and the
callback drains up to ``_BATCH`` frames with non-blocking ``recv`` calls, in the same
loop turn (no task hop). For each frame the subject of a publish frame is found
(:func:`~aoz.protocol.frames.publish_subject_end`), the routing table's cache
(:class:`~aoz.routing.RoutingTable`) gives the subscriptions it goes to, and one
:class:`~aoz.message.Message` is made; at the end of the drain each subscription gets
its messages in one ``push_many``, and a waiting ``async for`` wakes up. Other frames
(requests, replies, malformed input) go through
:func:`~aoz.protocol.frames.decode_frame`, or, compiled, through a C check that accepts
exactly what it accepts.

The drain and the send side (:class:`_SenderPy`) are the hot path, which exists twice:
in Python at the end of this module, and compiled in ``aoz/_speedups.pyx`` (see "the
hot path" below, and docs/ARCHITECTURE.md). The descriptor is edge-like: any socket
call may consume its signal, so calls that touch a socket are followed by a kick
that re-runs the drain, and sockets that are also written to have a safety re-run.

Failures are not swallowed: an exception in a drain callback (other than a closed
socket while closing) ends the reader task with it, which fails the node; the node
then ends every subscription with an error.

Why this module is longer than the others: the socket lifecycle, the fd readers, the
receive hot path and the send paths share the sockets and their state, and are easiest
to check for cancellation and error handling read together in one place.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import cast

import anyio
import zmq
from zmq.utils.monitor import parse_monitor_message

from .config import Settings
from .errors import AozError, ConfigError, TransportError, WouldBlock
from .interest import InterestSet
from .message import Message, Responder, data_start
from .protocol.builder import FrameBuilder, _Entry
from .protocol.codecs import AOZ_CODEC_IDS, Codec
from .protocol.frames import HANDLE_LEN, Kind, decode_frame, publish_subject_end
from .protocol.sequence import FLAG, HEADER_LEN, PACK, SequenceTracker
from .protocol.subjects import MAX_SUBJECT
from .routing import RoutingTable
from .security import ZAP_ENDPOINT, keypair, zap_reply
from .sockopts import (
    DATA_MONITOR_EVENTS,
    HandshakeGuard,
    apply_data_options,
    finish_disconnects,
)
from .subscription import Subscription

__all__ = ["HOT_PATH", "DataPlane", "Entry", "Sender", "connectable"]

log = logging.getLogger("aoz.node")

_BATCH = 1024  # frames drained per wake-up before other callbacks run
# pyzmq's Cython-level send: the Socket subclass's send adds a Python layer (~0.3 us)
# that only matters for options aoz does not use (routing ids, groups, zero-copy)
_send: Callable[..., object] = getattr(zmq.backend, "Socket", zmq.Socket).send
_COPY_THRESHOLD = 65536  # larger frames are sent zero-copy
_YIELD_EVERY = 256  # publishes between forced yields of `await node.publish`
_DISCONNECT_GRACE = 0.5  # seconds a departed peer's data link may still drain


@contextmanager
def _mapped(what: str) -> Iterator[None]:
    """Translate ZeroMQ's errors into aoz's, once, at the edge."""
    try:
        yield
    except zmq.ZMQError as exc:
        if exc.errno == zmq.EINVAL:
            raise ConfigError(f"{what}: ZeroMQ rejected a value ({exc}); check the settings") \
                from exc
        raise TransportError(f"{what}: {exc}") from exc


def connectable(endpoint: str) -> str:
    """A bound wildcard address (tcp://0.0.0.0:5556) as an address to connect to."""
    return endpoint.replace("//0.0.0.0:", "//127.0.0.1:").replace("//[::]:", "//[::1]:")


class DataPlane:
    """Sockets, readers and peer links of one node (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        routes: RoutingTable[Subscription],
        interest: InterestSet,
        on_reply: Callable[[bytes, bytes, int, float], None],
        responder: Responder,
        inbox_filter: bytes,
        builder: FrameBuilder | None = None,
    ) -> None:
        self.settings = settings
        self._routes = routes
        self._interest = interest
        self._on_reply = on_reply
        self._responder = responder
        self._inbox_filter = inbox_filter
        #: set whenever the interest set changes (wait_for_interest waits on it)
        self.interest_changed = asyncio.Event()
        #: set when the publisher may have room again (blocked sends wait on it)
        self._writable = asyncio.Event()
        self._send_waiters = 0
        self._holds = 0  # subscriptions with overflow="block" that are full
        self.endpoint = ""
        self.endpoints: list[str] = []
        self._closing = False

        # A context of its own: closing the node can then wait (in a worker thread,
        # bounded by the linger) until what is queued has left, and a CURVE node has
        # its own ZAP handler.
        self._curve = settings.curve_server_public is not None
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._zap: zmq.Socket[bytes] | None = None
        self._curve_allowed: set[str] = set()
        self._pub: zmq.Socket[bytes] | None = None
        self._sub: zmq.Socket[bytes] | None = None
        self._mon: zmq.Socket[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drainers: dict[int, Callable[[], None]] = {}
        self._connected: set[str] = set()
        self._pending_disconnects: dict[str, asyncio.TimerHandle] = {}
        self._link_state: dict[str, bool] = {}
        self._guard: HandshakeGuard | None = None

        self.messages_in = 0
        self.bytes_in = 0
        #: the send side of the hot path: frames out, and the publish counters
        self.sender: _SenderPy = Sender(builder or FrameBuilder(Codec.MSGPACK, entry_type=Entry))
        self.dropped_out = 0  # publishes dropped at a full queue (block node, block=False)
        self.blocked_sends = 0  # publishes that had to wait for room
        self.malformed = 0
        self.lost = 0  # messages known missing upstream (sequence gaps), all subscriptions
        self.counters: dict[str, int] = {}
        self.sequences = SequenceTracker()

    @property
    def messages_out(self) -> int:
        return self.sender.messages_out

    @property
    def bytes_out(self) -> int:
        return self.sender.bytes_out

    def count(self, counter: str, n: int = 1) -> None:
        self.counters[counter] = self.counters.get(counter, 0) + n

    @property
    def closed(self) -> bool:
        return self._pub is None or self._pub.closed

    # ------------------------------------------------------------------ open / close
    def open(self) -> None:
        """Create, configure, bind and connect the sockets (raises aoz errors)."""
        s = self.settings
        self._loop = asyncio.get_running_loop()
        with _mapped("cannot set up the data sockets"):
            pub: zmq.Socket[bytes] = self._ctx.socket(zmq.XPUB)
            sub: zmq.Socket[bytes] = self._ctx.socket(zmq.SUB)
            self._pub, self._sub = pub, sub
            self.sender.pub = pub
            if self._curve:
                self._setup_curve(pub, sub)
            # every option and why: aoz/sockopts.py (sizes, handshakes, back-off, liveness)
            apply_data_options(pub, sub, s)
            self._guard = HandshakeGuard(
                sub, s, wanted=self._connected.__contains__, count=self.count
            )
            # every mode: the guard needs the handshake events (link state: naming/udp)
            self._mon = sub.get_monitor_socket(DATA_MONITOR_EVENTS)
        if s.mode in ("naming", "udp"):
            self._bind(f"tcp://{s.publish_address}:*")
        elif s.mode == "static":
            for ep in s.bind:
                self._bind(ep)
            for ep in self.endpoints:  # self-delivery
                self._connect_sub(connectable(ep))
            for ep in s.connect:
                self._connect_sub(ep)
        else:  # broker
            assert s.broker_pub and s.broker_sub
            with _mapped(f"cannot connect to the broker at {s.broker_pub}"):
                pub.connect(s.broker_pub)
            self.endpoint = s.broker_pub
            self._connect_sub(s.broker_sub)
        with _mapped("cannot subscribe to this node's inbox"):
            sub.setsockopt(zmq.SUBSCRIBE, self._inbox_filter)

    def _setup_curve(self, pub: zmq.Socket[bytes], sub: zmq.Socket[bytes]) -> None:
        s = self.settings
        assert s.curve_server_public and s.curve_server_secret
        public, secret = s.curve_public, s.curve_secret
        if public is None or secret is None:
            public, secret = keypair()
        if s.curve_allow is not None:
            self._curve_allowed = {*s.curve_allow, public}  # self-delivery is always allowed
            zap: zmq.Socket[bytes] = self._ctx.socket(zmq.REP)
            zap.setsockopt(zmq.LINGER, 0)
            zap.bind(ZAP_ENDPOINT)
            self._zap = zap
        try:
            pub.setsockopt(zmq.CURVE_SERVER, 1)
            pub.setsockopt(zmq.CURVE_SECRETKEY, s.curve_server_secret.encode("ascii"))
            pub.setsockopt(zmq.ZAP_DOMAIN, b"aoz")
            sub.setsockopt(zmq.CURVE_SERVERKEY, s.curve_server_public.encode("ascii"))
            sub.setsockopt(zmq.CURVE_PUBLICKEY, public.encode("ascii"))
            sub.setsockopt(zmq.CURVE_SECRETKEY, secret.encode("ascii"))
        except (zmq.ZMQError, UnicodeEncodeError) as exc:
            raise ConfigError(
                f"invalid CURVE key ({exc}): keys are 40-character Z85 strings; "
                "make them with aoz.security.keypair()"
            ) from exc

    def _bind(self, endpoint: str) -> None:
        assert self._pub is not None
        with _mapped(f"cannot bind data publisher to {endpoint!r} (is the address in use "
                     "or not local?)"):
            self._pub.bind(endpoint)
            last = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.endpoints.append(last)
        if not self.endpoint:
            self.endpoint = last

    def _connect_sub(self, endpoint: str) -> None:
        assert self._sub is not None
        if endpoint in self._connected:
            return
        with _mapped(f"cannot connect to {endpoint!r}"):
            self._sub.connect(endpoint)
        self._connected.add(endpoint)
        self._kick(self._sub)

    async def close(self) -> None:
        """Close every socket (with the configured linger); idempotent."""
        self._closing = True
        for handle in self._pending_disconnects.values():
            handle.cancel()
        self._pending_disconnects.clear()
        linger = int(self.settings.linger * 1000)
        if self._sub is not None and self._mon is not None and not self._sub.closed:
            # Stop monitoring first: libzmq's I/O thread would otherwise block forever
            # reporting the SUB's disconnects to a monitor nobody reads, freezing every
            # socket of the shared context.
            self._sub.disable_monitor()
        # Only what we publish is worth waiting for; a SUB's queue holds subscriptions
        # for peers that may be gone, which would hold term() for the whole linger.
        for sock, wait in ((self._mon, 0), (self._sub, 0), (self._pub, linger), (self._zap, 0)):
            if sock is not None and not sock.closed:
                sock.close(linger=wait)
        if not self._ctx.closed:
            # term() returns once what was queued has left, or the linger ran out;
            # it blocks, so not on the event loop
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._ctx.term)

    # ------------------------------------------------------------------ readers
    async def run(self, tg: anyio.abc.TaskGroup) -> None:
        """Start one reader task per socket in ``tg`` (the node's group)."""
        assert self._sub is not None and self._pub is not None
        tg.start_soon(self._reader, self._sub, self._drain_sub, None, name="aoz-recv")
        tg.start_soon(self._reader, self._pub, self._drain_interest, 0.1, name="aoz-xpub")
        if self._mon is not None:
            tg.start_soon(self._reader, self._mon, self._drain_monitor, 1.0, name="aoz-monitor")
        if self._zap is not None:
            tg.start_soon(self._reader, self._zap, self._drain_zap, 1.0, name="aoz-zap")

    def _kick(self, sock: zmq.Socket[bytes]) -> None:
        """Re-run the drain of ``sock``: a socket call may have eaten its fd signal."""
        drain = self._drainers.get(id(sock))
        if drain is not None and self._loop is not None:
            self._loop.call_soon(drain)

    async def _reader(
        self,
        sock: zmq.Socket[bytes],
        drain: Callable[[zmq.Socket[bytes]], int],
        safety: float | None,
    ) -> None:
        """Own the drain of ``sock`` for the node's lifetime.

        The drain runs straight from the loop's fd callback, ``_BATCH`` frames at a
        time; a full batch re-schedules it with ``call_soon`` so other callbacks and
        tasks run in between. ``safety`` re-runs it at that interval, for sockets that
        other code sends on. An exception in the callback ends this task with it.
        """
        loop = asyncio.get_running_loop()
        key = id(sock)
        fd = cast(int, sock.getsockopt(zmq.FD))
        fault: list[BaseException] = []
        woken = asyncio.Event()

        def on_readable() -> None:
            if sock.closed or fault:
                return
            try:
                if drain(sock) >= _BATCH:
                    loop.call_soon(on_readable)
            except Exception as exc:
                fault.append(exc)
                woken.set()

        self._drainers[key] = on_readable
        loop.add_reader(fd, on_readable)
        try:
            on_readable()  # frames that arrived before the reader was registered
            while not fault:
                with anyio.move_on_after(3600.0 if safety is None else safety):
                    await woken.wait()
                on_readable()
            raise fault[0]
        finally:
            loop.remove_reader(fd)
            self._drainers.pop(key, None)

    def _socket_error(self, exc: zmq.ZMQError, what: str) -> None:
        """A socket error while draining: fatal unless the node is closing."""
        if self._closing or exc.errno in (zmq.ENOTSOCK, zmq.ETERM):
            return
        raise TransportError(f"{what} failed: {exc}") from exc

    def _drain_sub(self, sock: zmq.Socket[bytes]) -> int:
        return _drain_sub(self, sock)

    def _sequence(
        self, subject: bytes, publisher: int, seq: int, msg: Message,
        subs: tuple[Subscription, ...],
    ) -> None:
        """A sequenced frame that is not simply the next one of its subject's latest
        publisher: a first frame, another publisher, or a gap."""
        missing = self.sequences.check(subject, publisher, seq, time.monotonic())
        if missing:
            msg.gap = missing
            self.lost += missing
            for s in subs:
                s.upstream_loss(missing)

    def forget_sequences(self, subjects: Iterable[bytes]) -> None:
        """Forget the streams of subjects no subscription receives any more (a gap
        across that absence would not be a loss); every other stream keeps counting."""
        self.sequences.forget(subjects)

    def hold(self) -> None:
        """A subscription with ``overflow="block"`` is full: stop reading the data SUB
        (ZeroMQ's queues, then TCP, then a blocking publisher take the back-pressure)."""
        self._holds += 1

    def release(self) -> None:
        """That subscription has room again."""
        self._holds -= 1
        if not self._holds and self._sub is not None:
            self._kick(self._sub)

    def _other_frame(self, frame: bytes, now: float) -> None:
        """Requests, replies and anything malformed (validated by the protocol core)."""
        try:
            fr = decode_frame(frame)
        except AozError as exc:
            self.malformed += 1
            log.debug("dropped malformed frame (%s): %r", exc, frame[:64])
            return
        if fr.kind is Kind.REPLY:
            self._on_reply(fr.subject, frame, fr.payload_start, now)
            return
        subs = self._routes.route(fr.subject)
        if subs is None:
            self.malformed += 1
            return
        if subs:
            reply = fr.reply.decode("ascii") if fr.reply is not None else None
            start = fr.payload_start
            msg = Message(frame, len(fr.subject), start, data_start(frame, start), fr.kind,
                          reply, now, self._responder)
            for s in subs:
                s.push(msg)

    def _drain_interest(self, sock: zmq.Socket[bytes]) -> int:
        n = 0
        changed = False
        apply = self._interest.apply
        try:
            while n < _BATCH:
                if apply(sock.recv(zmq.NOBLOCK)):
                    changed = True
                n += 1
        except zmq.Again:
            pass
        except zmq.ZMQError as exc:
            self._socket_error(exc, "reading subscriptions on the data publisher")
        finally:
            if changed:
                self.interest_changed.set()
            if self._send_waiters:
                self._writable.set()  # any XPUB event may mean room again: re-check
        return n

    def read_interest(self) -> None:
        """Fold in the subscription events waiting on the XPUB now."""
        if self._pub is not None and not self._pub.closed:
            self._drain_interest(self._pub)

    def _drain_monitor(self, sock: zmq.Socket[bytes]) -> int:
        n = 0
        try:
            while n < _BATCH:
                parts = sock.recv_multipart(zmq.NOBLOCK)
                n += 1
                try:
                    ev = parse_monitor_message(parts)
                    raw = ev["endpoint"]
                    endpoint = raw.decode() if isinstance(raw, bytes) else str(raw)
                except (ValueError, KeyError, IndexError, UnicodeDecodeError) as exc:
                    self.count("monitor_malformed")
                    log.warning("ignored a malformed ZeroMQ monitor event: %r", exc)
                    continue
                if endpoint not in self._connected:
                    continue  # a link already dropped: keep no state for it
                if self._guard is not None:
                    self._guard.event(ev["event"], endpoint, time.monotonic())
                if ev["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self._link_state[endpoint] = True
                elif ev["event"] in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED):
                    self._link_state[endpoint] = False
        except zmq.Again:
            pass
        except zmq.ZMQError as exc:
            self._socket_error(exc, "reading the data link monitor")
        if self._guard is not None:  # runs at least every second (the reader's safety)
            self._guard.tick(time.monotonic())
        if self._holds and self._sub is not None:  # a held SUB is not read: see sockopts
            finish_disconnects(self._sub)
            self._kick(self._sub)
        return n

    def _drain_zap(self, sock: zmq.Socket[bytes]) -> int:
        n = 0
        try:
            while n < _BATCH:
                request = sock.recv_multipart(zmq.NOBLOCK)
                n += 1
                reply, allowed = zap_reply(request, self._curve_allowed)
                if not allowed:
                    self.count("auth_denied")
                    log.info("denied a data subscriber: %s", reply[3].decode())
                sock.send_multipart(reply)
        except zmq.Again:
            pass
        except zmq.ZMQError as exc:
            self._socket_error(exc, "answering authentication requests")
        return n

    # ------------------------------------------------------------------ filters and sends
    def add_filter(self, prefix: bytes) -> None:
        """Subscribe the data SUB to frames starting with ``prefix``."""
        assert self._sub is not None
        with _mapped("cannot subscribe"):
            self._sub.setsockopt(zmq.SUBSCRIBE, prefix)
        self._kick(self._sub)

    def remove_filter(self, prefix: bytes) -> None:
        if self._sub is None or self._sub.closed or self._closing:
            return
        with _mapped("cannot unsubscribe"):
            self._sub.setsockopt(zmq.UNSUBSCRIBE, prefix)
        self._kick(self._sub)

    def send(self, frame: bytes) -> None:
        """Hand one frame to ZeroMQ without waiting (:meth:`_SenderPy.send`)."""
        self.sender.send(frame)

    def send_batch(self, frames: Sequence[bytes], start: int = 0) -> int:
        """Send ``frames[start:]`` in order until ZeroMQ would block; returns the index of
        the first frame not sent (``len(frames)`` when all were). For bulk forwarders."""
        return self.sender.send_batch(frames, start)

    def send_or_drop(self, frame: bytes) -> None:
        """Send, or drop and count the frame when a subscriber's queue is full."""
        try:
            self.send(frame)
        except WouldBlock:
            self.dropped_out += 1

    async def send_when_ready(self, frame: bytes) -> None:
        """Send, waiting for room while a subscriber's queue is full (block policy).

        A subscriber that stays frozen is cut by the publisher's heartbeat after three
        heartbeat intervals, which frees the wait.
        """
        self._send_waiters += 1
        self.blocked_sends += 1
        try:
            while True:
                try:
                    self.send(frame)
                    return
                except WouldBlock:
                    pass
                # An XPUB reports POLLOUT even when a pipe is full, so ZMQ_EVENTS cannot
                # tell; a pipe that drains wakes the socket's fd, whose callback sets
                # _writable. The 50 ms backstop bounds a missed edge.
                self._writable.clear()
                with anyio.move_on_after(0.05):
                    await self._writable.wait()
        finally:
            self._send_waiters -= 1

    # ------------------------------------------------------------------ peer links
    def connect_peer(self, endpoint: str) -> None:
        """Connect the data SUB to a peer's publisher (idempotent)."""
        pending = self._pending_disconnects.pop(endpoint, None)
        if pending is not None:
            pending.cancel()  # the peer is back (or a new one took its address)
            if not self._link_state.get(endpoint, False):
                # the old link is gone: connect afresh, not after its leftover back-off
                self._disconnect_now(endpoint)
                if self._guard is not None:
                    self._guard.reset(endpoint)
        if self._sub is None or self._closing or endpoint in self._connected:
            return
        try:
            self._connect_sub(endpoint)
        except TransportError as exc:
            self.count("connect_errors")
            log.warning("cannot connect to peer %s: %s", endpoint, exc)

    def disconnect_peer(self, endpoint: str) -> None:
        """Disconnect from a peer's publisher after a short grace period: a peer's
        goodbye travels through the nsd and can overtake its last data frames (a final
        reply, say), which would be lost if the link were cut at once."""
        if self._sub is None or endpoint not in self._connected or self._loop is None:
            return
        if endpoint not in self._pending_disconnects:
            self._pending_disconnects[endpoint] = self._loop.call_later(
                _DISCONNECT_GRACE, self._disconnect_now, endpoint
            )

    def _disconnect_now(self, endpoint: str) -> None:
        self._pending_disconnects.pop(endpoint, None)
        if self._sub is None or self._sub.closed or endpoint not in self._connected:
            return
        self._connected.discard(endpoint)
        self._link_state.pop(endpoint, None)
        try:
            self._sub.disconnect(endpoint)
        except zmq.ZMQError as exc:
            log.debug("disconnect from %s: %s", endpoint, exc)
        self._kick(self._sub)

    def link_up(self, endpoint: str) -> bool:
        """Whether the data SUB currently has a live connection to ``endpoint``."""
        return self._link_state.get(endpoint, False)


# ---------------------------------------------------------------------- the hot path
# Two implementations of the same drain and sender: the pure-Python ones below, and
# aoz/_speedups.pyx, compiled when the package is built (setup.py). They behave
# identically (tests/hotpath/test_twins.py checks them against each other, and
# `make test` runs the suite on each); the compiled one is used when it imports and
# matches this source (ABI, constants), unless AOZ_PURE_PYTHON=1.

def _drain_sub_py(plane: DataPlane, sock: zmq.Socket[bytes]) -> int:
    """Drain up to ``_BATCH`` frames of the data SUB (see the module docstring).

    A publish frame on a subject seen before costs one parse, one slice, one dict
    lookup and one Message; messages are collected per subscription and handed over
    with one ``push_many`` each at the end (a subscription with ``overflow="block"``
    takes them one at a time, so that the drain stops at the frame that fills it).
    """
    recv = sock.recv
    noblock = zmq.NOBLOCK
    routes = plane._routes
    cache = routes.cache
    scan = publish_subject_end
    publish = Kind.PUBLISH
    responder = plane._responder
    unpack = PACK.unpack_from
    last_seen = plane.sequences.last_seen
    pending: dict[Subscription, list[Message]] = {}
    now = time.time()
    n = 0
    nbytes = 0
    try:
        while n < _BATCH and not plane._holds:
            frame = recv(noblock)
            n += 1
            flen = len(frame)
            nbytes += flen
            nul = scan(frame)
            if nul > 0:
                sb = frame[:nul]
                subs = cache.get(sb)
                if subs is None:
                    subs = routes.route(sb)
                    if subs is None:
                        plane.malformed += 1
                        continue
                if subs:
                    # data_start, inline: after the codec byte or the sequence header
                    start = data = nul + 3
                    first = frame[start] if flen > start else 0x7F
                    if first & FLAG:
                        if first & 0x7F < AOZ_CODEC_IDS and flen >= start + HEADER_LEN:
                            data = start + HEADER_LEN
                    elif first < AOZ_CODEC_IDS:
                        data = start + 1
                    msg = Message(frame, nul, start, data, publish, None, now, responder)
                    if data - start == HEADER_LEN:
                        # sequenced: the next number from the subject's last publisher
                        # costs one unpack and one lookup; anything else takes _sequence
                        pid, seq = unpack(frame, start + 1)
                        st = last_seen.get(sb)
                        if st is not None and st[0] == pid and seq == st[1] + 1:
                            st[1] = seq
                        else:
                            plane._sequence(sb, pid, seq, msg, subs)
                    for s in subs:
                        if s._block:
                            s.push(msg)
                        else:
                            queued = pending.get(s)
                            if queued is None:
                                pending[s] = [msg]
                            else:
                                queued.append(msg)
            else:
                if pending:  # keep each subscription's messages in arrival order
                    _hand_over(pending)
                plane._other_frame(frame, now)
    except zmq.Again:
        pass
    except zmq.ZMQError as exc:
        plane._socket_error(exc, "receiving on the data socket")
    finally:
        if pending:
            _hand_over(pending)
        plane.messages_in += n
        plane.bytes_in += nbytes
    return n


def _hand_over(pending: dict[Subscription, list[Message]]) -> None:
    for s, msgs in pending.items():
        s.push_many(msgs)
    pending.clear()


class _SenderPy:
    """The send side of the hot path: one node's publish frames and their counters.

    ``publish`` builds a publish frame with the node's :class:`FrameBuilder` and sends
    it; ``send`` sends a ready frame. With ``send_policy="drop"`` ZeroMQ never refuses
    (a full subscriber queue drops for that subscriber); with ``"block"`` a full queue
    raises :class:`WouldBlock`. Twin of ``aoz._speedups.Sender``.
    """

    __slots__ = ("_builder", "_since_yield", "bytes_out", "messages_out", "pub")

    def __init__(self, builder: FrameBuilder) -> None:
        self._builder = builder
        self.pub: zmq.Socket[bytes] | None = None  # set when the data plane opens
        self.messages_out = 0
        self.bytes_out = 0
        self._since_yield = 0

    def publish(self, subject: str, data: object, codec: Codec | None) -> bool:
        """Build and send; True once every ``_YIELD_EVERY`` calls: then the caller
        (``await node.publish``) lets the loop run, so a tight loop of publishes
        cannot starve the node's tasks."""
        self.send(self._builder.publish(subject, data, codec))
        self._since_yield += 1
        if self._since_yield >= _YIELD_EVERY:
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
            raise TransportError(f"publish failed: {exc}") from exc
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
            if n < _COPY_THRESHOLD:
                _send(pub, frame, zmq.NOBLOCK)
            else:
                pub.send(frame, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            raise WouldBlock(
                "a subscriber's queue at this publisher is full; `await node.publish(...)` "
                "waits for room"
            ) from None
        except zmq.ZMQError as exc:
            raise TransportError(f"publish failed: {exc}") from exc
        self.messages_out += 1
        self.bytes_out += n


def _compiled() -> ModuleType | None:
    """aoz._speedups when it is built, current and wanted, else None."""
    if os.environ.get("AOZ_PURE_PYTHON", "") not in ("", "0"):
        log.debug("aoz hot path: pure Python (AOZ_PURE_PYTHON is set)")
        return None
    try:
        from . import _speedups
    except ImportError as exc:
        log.debug("aoz hot path: pure Python (the compiled module is not built: %s)", exc)
        return None
    if _speedups.ABI != _HOT_PATH_ABI or _constants() != _speedups.CONSTANTS:
        log.warning("aoz._speedups is out of date with this source tree (rebuild it with "
                    "`pip install -e .`); using the pure-Python hot path")
        return None
    log.debug("aoz hot path: compiled (%s)", _speedups.__file__)
    return _speedups


def _constants() -> dict[str, int]:
    """The protocol's numbers that the compiled module has built in."""
    return {"BATCH": _BATCH, "MAX_SUBJECT": MAX_SUBJECT, "HEADER_LEN": HEADER_LEN,
            "AOZ_CODEC_IDS": AOZ_CODEC_IDS, "COPY_THRESHOLD": _COPY_THRESHOLD,
            "YIELD_EVERY": _YIELD_EVERY, "HANDLE_LEN": HANDLE_LEN}


_HOT_PATH_ABI = 6  # bump with any change to the functions' contract
_speedups_module = _compiled()
#: which implementation of the hot path runs: "compiled" or "python"
HOT_PATH = "python" if _speedups_module is None else "compiled"
_drain_sub: Callable[[DataPlane, zmq.Socket[bytes]], int] = (
    _drain_sub_py if _speedups_module is None else _speedups_module.drain_sub
)
#: the FrameBuilder entries that go with Sender (the compiled Sender reads them from C)
Entry: Callable[[bytes, bytes], _Entry] = (
    _Entry if _speedups_module is None else _speedups_module.Entry
)
Sender: type[_SenderPy] = (
    _SenderPy if _speedups_module is None else cast(type[_SenderPy], _speedups_module.Sender)
)
