"""Socket-option policy: what every aoz ZeroMQ socket is allowed to cost.

One place decides the options of the data sockets, the naming sockets and the nsd's,
so that no socket that reads from the network is unbounded:

- **Message size** (``ZMQ_MAXMSGSIZE``): a peer that sends more is disconnected by
  libzmq after reading the frame header, not after reading the frame. The data SUB
  takes ``settings.max_message_size``; sockets whose inbound traffic is tiny by
  protocol get a tight fixed cap: a data PUB only ever receives subscriptions
  (:data:`SUBSCRIPTION_MAX`), naming sockets only 882-byte frames (:data:`NAMING_MAX`).
- **Handshake timeout** (``ZMQ_HANDSHAKE_IVL``): a half-open ZMTP/CURVE handshake is
  dropped after ``settings.handshake_timeout`` seconds instead of libzmq's 30.
- **Reconnect back-off after failed handshakes**: libzmq retries a connection whose
  handshake failed (wrong CURVE server key, a key the server does not allow) every
  ``reconnect_interval`` -- about 400 failed handshakes a minute at the publisher --
  and its ``ZMQ_RECONNECT_IVL_MAX`` does not help, because every retry starts a fresh
  connecter with the base interval (measured with libzmq 4.3.5). So connecting sockets
  stop retrying after a failed handshake (``ZMQ_RECONNECT_STOP``, or an immediate
  ``disconnect`` where that option is missing) and :class:`HandshakeGuard` connects
  them again after 1, 4, 16... seconds, up to ``settings.reconnect_backoff_max``
  (60 s): 4 failed handshakes in the first minute, then one a minute. A successful
  handshake resets the endpoint's back-off.
- **Links libzmq abandons**: after a protocol error on an established connection -- a
  message over ``ZMQ_MAXMSGSIZE``, say -- libzmq closes the session for good and never
  reconnects (4.3.5: ``DISCONNECTED`` and no ``CONNECT_RETRIED``). A peer that sends one
  oversized message would be cut off forever, and a hostile frame relayed by an OZ nsd
  would end a node's naming subscription. The guard notices the missing retry and
  connects such an endpoint again with the same back-off.
- **Released endpoints** (zeromq/libzmq#4052): libzmq 4.3.5 finishes a ``disconnect``
  -- and stops reconnecting to the released port -- only when the application next
  calls into the socket (the pipe's termination handshake runs on commands the
  socket processes then). A socket nobody calls (a data SUB held by a full
  ``overflow="block"`` subscription, a naming PUB between beacons) keeps connecting
  to the port for ever, and connects for good to whatever binds it next.
  :func:`finish_disconnects` is that call; owners make it while such a socket is
  idle. (``ZMQ_RECONNECT_STOP`` is accepted by the bundled 4.3.5, but its
  ``CONN_REFUSED`` would also give up on a static peer that has not started yet, and
  its ``AFTER_DISCONNECT`` reads an uninitialised flag in 4.3.5, zeromq/libzmq#4720.)
- **CURVE** on the naming plane (``settings.naming_curve``): the same key model as the
  data plane (:mod:`aoz._mesh.security`); the nsd is the CURVE server.

The policy (:class:`Backoff`) is pure; :class:`HandshakeGuard` applies it to one
connecting socket and is fed monitor events and the time by its owner.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable
from typing import Any, Final

import zmq

from ..config import Settings
from ..errors import AozError
from .errmap import mapped, tolerated

__all__ = [
    "CONNECT_TIMEOUT",
    "DATA_MONITOR_EVENTS",
    "GUARD_EVENTS",
    "HANDSHAKE_FAILED",
    "NAMING_MAX",
    "SUBSCRIPTION_MAX",
    "Backoff",
    "HandshakeGuard",
    "apply_curve_client",
    "apply_data_options",
    "apply_naming_options",
    "finish_disconnects",
]

log = logging.getLogger("aoz.sockopts")

#: largest inbound message of a data PUB: subscriptions are at most a subject and a byte
SUBSCRIPTION_MAX: Final = 64 * 1024
#: largest inbound message of a naming socket (frames are 882 bytes; room for more)
NAMING_MAX: Final = 4096

#: monitor events that mean "the handshake with this endpoint failed"
HANDSHAKE_FAILED: Final = frozenset(
    (
        zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
        zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
        zmq.EVENT_HANDSHAKE_FAILED_AUTH,
    )
)
#: events after which libzmq is still trying to (re)connect an endpoint
_TRYING: Final = frozenset(
    (
        zmq.EVENT_CONNECTED,
        zmq.EVENT_CONNECT_DELAYED,
        zmq.EVENT_CONNECT_RETRIED,
        zmq.EVENT_HANDSHAKE_SUCCEEDED,
        *HANDSHAKE_FAILED,
    )
)
#: what a guarded socket's monitor must report: link state, retries, handshake outcomes
GUARD_EVENTS: Final = (
    zmq.EVENT_CONNECTED
    | zmq.EVENT_CONNECT_DELAYED
    | zmq.EVENT_CONNECT_RETRIED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
#: what the node's data SUB monitor listens to
DATA_MONITOR_EVENTS: Final = GUARD_EVENTS | zmq.EVENT_CLOSED
#: seconds after a disconnect within which libzmq schedules its retry (it does so at once)
_RETRY_GRACE: Final = 1.0
#: one TCP connect attempt of a data SUB, seconds, before the next reconnect: while a
#: network is cut, a SYN goes out every this + ``reconnect_interval`` (a healed cut is
#: noticed that soon); a peer more than this round trip away cannot be reached
CONNECT_TIMEOUT: Final = 0.5
#: send_policy="block": a subscriber silent this long is cut
_BLOCK_CUT_MS: Final = 30_000


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _common(sock: zmq.Socket[Any], s: Settings) -> None:
    sock.setsockopt(zmq.RECONNECT_IVL, _ms(s.reconnect_interval))
    sock.setsockopt(zmq.HANDSHAKE_IVL, _ms(s.handshake_timeout))
    if s.heartbeat_interval > 0:
        ivl = _ms(s.heartbeat_interval)
        sock.setsockopt(zmq.HEARTBEAT_IVL, ivl)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3 * ivl)
        sock.setsockopt(zmq.HEARTBEAT_TTL, 3 * ivl)


def stop_reconnect_on_handshake_failure(sock: zmq.Socket[Any]) -> bool:
    """Ask libzmq not to retry after a failed handshake; whether it agreed.

    ``ZMQ_RECONNECT_STOP`` is a draft option of libzmq 4.3.5; without it the
    :class:`HandshakeGuard` disconnects the endpoint as soon as the failure is reported.
    """
    option = getattr(zmq, "RECONNECT_STOP", None)
    value = getattr(zmq, "RECONNECT_STOP_HANDSHAKE_FAILED", None)
    if option is None or value is None:  # pyzmq without the draft option's names
        return False
    try:
        with mapped("cannot set ZMQ_RECONNECT_STOP"):
            sock.setsockopt(option, value)
    except AozError:  # libzmq without draft options (EINVAL): the guard disconnects instead
        return False
    return True


def finish_disconnects(sock: zmq.Socket[Any]) -> None:
    """Let libzmq finish the disconnects made on ``sock`` (see the module docstring).

    Reading ``ZMQ_EVENTS`` processes the socket's pending commands and reads no
    message. It may consume the socket's fd signal: a caller that reads the socket
    from that fd re-runs its drain afterwards.
    """
    if not sock.closed:
        sock.getsockopt(zmq.EVENTS)


def apply_data_options(pub: zmq.Socket[Any], sub: zmq.Socket[Any], s: Settings) -> None:
    """Options of a node's data PUB (XPUB) and data SUB; why each matters:

    - Heartbeats run on the XPUB only (ping every ``heartbeat_interval``, drop a
      subscriber that has not answered within 3 of them): a frozen or vanished
      subscriber is cut, which frees what it held at this publisher and withdraws
      its filters (that is how a peer's link is seen to die). The SUB runs no
      heartbeat timer and the XPUB asks for none (TTL 0): libzmq aborts
      (``Assertion failed: !_io_error``, zeromq/libzmq#3937, #4767) when a heartbeat
      timer fires on a connection whose input is stopped because the receiving
      queue is full, which a burst into a busy subscriber makes likely.
    - The SUB uses TCP keepalive instead, so a connection whose peer has gone
      (a healed network cut, a rebooted host) is noticed and reconnected; the
      connect timeout (:data:`CONNECT_TIMEOUT`, 0.5 s) bounds each attempt so a
      reconnect follows within about 0.6 s of the network healing.
    - A handshake that does not complete within ``handshake_timeout`` (a frozen peer
      whose kernel still accepts connections, a half-open attack) is dropped; a link
      is up only once the handshake succeeded.
    - ``send_policy="block"``: XPUB_NODROP, so a full subscriber queue makes the
      send wait instead of dropping.
    - Inbound sizes: the XPUB only ever receives subscriptions
      (:data:`SUBSCRIPTION_MAX`), the SUB at most ``max_message_size``.
    - The XPUB's receive queue is unbounded (``RCVHWM`` 0). With a bound, a peer's
      burst of subscriptions (a subscriber with thousands of filters connecting) filled
      it while the event loop was busy, which stopped that connection's input; if the
      peer then went, the next heartbeat tick aborted the process (the assertion
      above). A churning peer with 5,000 filters did that in every run. What the queue
      holds is folded into the interest set as soon as the loop runs, and that set
      holds every distinct filter anyway.
    - The SUB stops retrying after a failed handshake; :class:`HandshakeGuard`
      retries with back-off.
    - The SUB's send side is unbounded (``SNDHWM`` 0): what a SUB sends are its
      subscriptions, and libzmq drops, without a word, those above the send
      high-water mark -- in the burst of a subscribe loop and in the burst that
      greets every publisher that connects later (all filters at once). A dropped
      filter is a subscription that silently receives nothing. What that queue can
      hold is bounded by the node itself: one message per filter per connected
      publisher, plus the subscribe/unsubscribe calls made while a publisher does not
      read (a frozen one; a reconnect discards that backlog and resends the current
      filters only), a few hundred bytes each.

    >>> ctx = zmq.Context.instance()
    >>> pub, sub = ctx.socket(zmq.XPUB), ctx.socket(zmq.SUB)
    >>> apply_data_options(pub, sub, Settings())
    >>> sub.getsockopt(zmq.MAXMSGSIZE) == Settings().max_message_size
    True
    >>> sub.getsockopt(zmq.SNDHWM)  # subscriptions are never dropped
    0
    >>> pub.close(); sub.close()
    """
    linger = int(s.linger * 1000)
    for sock in (pub, sub):
        sock.setsockopt(zmq.LINGER, linger)
        sock.setsockopt(zmq.HANDSHAKE_IVL, _ms(s.handshake_timeout))
    pub.setsockopt(zmq.SNDHWM, s.send_hwm)
    pub.setsockopt(zmq.RCVHWM, 0)  # subscriptions never stop a connection's input
    pub.setsockopt(zmq.MAXMSGSIZE, SUBSCRIPTION_MAX)
    if s.heartbeat_interval > 0:
        ivl = _ms(s.heartbeat_interval)
        pub.setsockopt(zmq.HEARTBEAT_IVL, ivl)
        # A subscriber whose queue is full reads no pings either: with "block" it is
        # given 30 s before it is cut (its loss is then reported by sequence gaps).
        timeout = ivl * 3 if s.send_policy == "drop" else max(ivl * 3, _BLOCK_CUT_MS)
        pub.setsockopt(zmq.HEARTBEAT_TIMEOUT, timeout)
        pub.setsockopt(zmq.HEARTBEAT_TTL, 0)
    if s.send_policy == "block":
        pub.setsockopt(zmq.XPUB_NODROP, 1)
    sub.setsockopt(zmq.RCVHWM, s.recv_hwm)
    sub.setsockopt(zmq.SNDHWM, 0)
    sub.setsockopt(zmq.MAXMSGSIZE, s.max_message_size)
    sub.setsockopt(zmq.RECONNECT_IVL, _ms(s.reconnect_interval))
    sub.setsockopt(zmq.CONNECT_TIMEOUT, _ms(CONNECT_TIMEOUT))
    sub.setsockopt(zmq.TCP_KEEPALIVE, 1)
    sub.setsockopt(zmq.TCP_KEEPALIVE_IDLE, 1)
    sub.setsockopt(zmq.TCP_KEEPALIVE_INTVL, 1)
    sub.setsockopt(zmq.TCP_KEEPALIVE_CNT, 3)
    stop_reconnect_on_handshake_failure(sub)


def apply_naming_options(sock: zmq.Socket[Any], s: Settings, *, hwm: int) -> None:
    """Options of a node's naming SUB or PUB (both connect to an nsd). Each connection
    attempt is bounded as the data SUB's (:data:`CONNECT_TIMEOUT`): without it an
    attempt made during a network cut waits on the kernel's SYN back-off (1, 3, 7, 15 s
    ...), and the node hears its nsd again seconds after the network healed."""
    sock.setsockopt(zmq.CONNECT_TIMEOUT, _ms(CONNECT_TIMEOUT))
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm)
    sock.setsockopt(zmq.MAXMSGSIZE, NAMING_MAX)
    _common(sock, s)
    if s.naming_curve:
        apply_curve_client(sock, s)
        stop_reconnect_on_handshake_failure(sock)


def apply_curve_client(sock: zmq.Socket[Any], s: Settings) -> None:
    """Make ``sock`` a CURVE client of the mesh's server key with this node's keypair."""
    assert s.curve_server_public and s.curve_public and s.curve_secret
    sock.setsockopt(zmq.CURVE_SERVERKEY, s.curve_server_public.encode("ascii"))
    sock.setsockopt(zmq.CURVE_PUBLICKEY, s.curve_public.encode("ascii"))
    sock.setsockopt(zmq.CURVE_SECRETKEY, s.curve_secret.encode("ascii"))


def apply_curve_server(sock: zmq.Socket[Any], server_secret: str, *, domain: bytes) -> None:
    """Make ``sock`` a CURVE server with the mesh's secret key (ZAP decides who may talk)."""
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_SECRETKEY, server_secret.encode("ascii"))
    sock.setsockopt(zmq.ZAP_DOMAIN, domain)


class Backoff:
    """When to try an endpoint again after its handshakes failed. Pure: time comes in.

    The n-th consecutive failure waits ``first x factor**(n-1)`` seconds, at most
    ``maximum``.

    >>> b = Backoff(first=1.0, factor=4.0, maximum=60.0)
    >>> [b.failed("tcp://h:1", 0.0) for _ in range(5)]
    [1.0, 4.0, 16.0, 60.0, 60.0]
    >>> b.due(59.0), b.due(60.0)
    ([], ['tcp://h:1'])
    """

    def __init__(self, *, first: float = 1.0, factor: float = 4.0, maximum: float = 60.0) -> None:
        self.first = first
        self.factor = factor
        self.maximum = maximum
        self._failures: dict[str, int] = {}
        self._due: list[tuple[float, str]] = []  # heap of (time, endpoint)
        self._when: dict[str, float] = {}

    def failed(self, endpoint: str, now: float) -> float:
        """A handshake with ``endpoint`` failed; returns the delay before the next try."""
        n = self._failures.get(endpoint, 0) + 1
        self._failures[endpoint] = n
        delay = min(self.first * self.factor ** (n - 1), self.maximum)
        when = now + delay
        self._when[endpoint] = when
        heapq.heappush(self._due, (when, endpoint))
        return delay

    def succeeded(self, endpoint: str) -> None:
        """A handshake with ``endpoint`` succeeded: the next failure starts over."""
        self._failures.pop(endpoint, None)

    def forget(self, endpoint: str) -> None:
        """``endpoint`` is no longer wanted: never retry it."""
        self._failures.pop(endpoint, None)
        self._when.pop(endpoint, None)

    def due(self, now: float) -> list[str]:
        """Endpoints whose wait is over (each returned once per failure)."""
        out: list[str] = []
        while self._due and self._due[0][0] <= now:
            when, endpoint = heapq.heappop(self._due)
            if self._when.get(endpoint) == when:
                del self._when[endpoint]
                out.append(endpoint)
        return out


class HandshakeGuard:
    """Applies :class:`Backoff` to one connecting socket: after failed handshakes, and
    to links libzmq abandoned after a protocol error.

    Its owner feeds it the socket's monitor events (:meth:`event`) and the time
    (:meth:`tick`, every fraction of a second); ``wanted`` says whether an endpoint is
    still meant to be connected (a peer that left is not retried).
    """

    def __init__(
        self,
        sock: zmq.Socket[Any],
        s: Settings,
        *,
        wanted: Callable[[str], bool],
        count: Callable[[str], None] | None = None,
    ) -> None:
        self.sock = sock
        self.backoff = Backoff(maximum=s.reconnect_backoff_max)
        self._wanted = wanted
        self._count = count
        self._waiting: set[str] = set()
        self._silent: dict[str, float] = {}  # disconnected, no retry seen yet: until when
        self.failures = 0
        self.abandoned = 0
        #: called with an endpoint just before the guard connects it again (the data
        #: SUB's per-connection CURVE server key under curve_identity)
        self.prepare: Callable[[str], None] = lambda endpoint: None

    def event(self, event: int, endpoint: str, now: float) -> None:
        """One monitor event of the socket."""
        if event == zmq.EVENT_DISCONNECTED:
            self._silent[endpoint] = now + _RETRY_GRACE
        elif event in _TRYING:
            self._silent.pop(endpoint, None)
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self.backoff.succeeded(endpoint)
        elif event in HANDSHAKE_FAILED and endpoint not in self._waiting:
            self.failures += 1
            if self._count is not None:
                self._count("handshake_failures")
            delay = self.backoff.failed(endpoint, now)
            self._waiting.add(endpoint)
            self._disconnect(endpoint)
            log.warning(
                "handshake with %s failed (wrong CURVE server key, or our key is not "
                "allowed there?); next try in %.0f s",
                endpoint,
                delay,
            )

    def tick(self, now: float) -> None:
        """Connect again the endpoints whose back-off is over."""
        for endpoint, until in list(self._silent.items()):
            if now < until:
                continue
            del self._silent[endpoint]
            if endpoint in self._waiting or self.sock.closed or not self._wanted(endpoint):
                continue
            self.abandoned += 1
            if self._count is not None:
                self._count("links_abandoned")
            delay = self.backoff.failed(endpoint, now)
            self._waiting.add(endpoint)
            log.warning(
                "ZeroMQ gave up on the link to %s after a protocol error (a message over "
                "max_message_size?); connecting again in %.0f s",
                endpoint,
                delay,
            )
        for endpoint in self.backoff.due(now):
            self._waiting.discard(endpoint)
            if self.sock.closed or not self._wanted(endpoint):
                self.backoff.forget(endpoint)
                continue
            self._disconnect(endpoint)  # one session per endpoint, whoever connected it
            # the socket may close under us; the next tick (or the owner's close) decides
            with tolerated(f"cannot reconnect to {endpoint}", "the socket is closing"):
                self.prepare(endpoint)
                self.sock.connect(endpoint)

    def reset(self, endpoint: str) -> None:
        """A fresh link to ``endpoint`` (a peer came back): no back-off left over."""
        self._waiting.discard(endpoint)
        self._silent.pop(endpoint, None)
        self.backoff.forget(endpoint)

    def _disconnect(self, endpoint: str) -> None:
        if self.sock.closed:
            return
        with tolerated(f"cannot disconnect {endpoint}", "libzmq already dropped it "
                       "(ZMQ_RECONNECT_STOP)"):
            self.sock.disconnect(endpoint)
