"""A plain XSUB/XPUB forwarder for brokered mode (SPEC §6), and the proxy thread it shares
with the naming daemon.

Publishers connect their PUB to :attr:`Broker.pub_endpoint` (the forwarder's XSUB),
subscribers connect their SUB to :attr:`Broker.sub_endpoint` (its XPUB); every
message takes two hops, like JMS/AMQP.

>>> async def demo() -> None:  # doctest: +SKIP
...     async with Broker(host="127.0.0.1") as broker:
...         async with aoz.connect(broker_pub=broker.pub_endpoint,
...                                broker_sub=broker.sub_endpoint) as node:
...             await node.publish("A.B", b"hello")

Why a thread and not a coroutine: libzmq's ``zmq_proxy`` moves messages in C
without the GIL, so forwarding neither competes with the event loop of the process
that embeds the daemon (tests run many nodes and an nsd on one loop) nor stalls
when that loop is busy. The thread is steerable: :meth:`aclose` sends ``TERMINATE``
on an inproc control socket and joins it, and each daemon has its own ZeroMQ
context that is terminated at close, so nothing leaks.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from types import TracebackType

import anyio
import zmq

from .._mesh.endpoints import daemon_endpoint
from .._mesh.errmap import mapped, tolerated
from ..errors import ClosedError

__all__ = ["Broker", "ProxyThread", "bind_socket"]

log = logging.getLogger("aoz.discovery")

_ids = itertools.count(1)
_HWM = 100_000
_RELAY_BATCH = 1024  # messages a checking relay moves per side before polling again


def bind_socket(sock: zmq.Socket[bytes], address: str, what: str) -> str:
    """Bind ``sock`` to ``address`` (:func:`aoz._mesh.endpoints.daemon_endpoint`); return the
    bound address (the port an ephemeral bind got)."""
    with mapped(f"cannot bind the {what} to {address}"):
        sock.bind(address)
    last = sock.getsockopt(zmq.LAST_ENDPOINT)
    assert isinstance(last, bytes)
    return last.decode()


def tune(sock: zmq.Socket[bytes], heartbeat_interval: float = 1.0) -> None:
    """High-water marks that absorb discovery bursts, no linger, heartbeats."""
    sock.setsockopt(zmq.SNDHWM, _HWM)
    sock.setsockopt(zmq.RCVHWM, _HWM)
    sock.setsockopt(zmq.LINGER, 0)
    if heartbeat_interval > 0:
        ms = int(heartbeat_interval * 1000)
        sock.setsockopt(zmq.HEARTBEAT_IVL, ms)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3 * ms)
        sock.setsockopt(zmq.HEARTBEAT_TTL, 3 * ms)


class ProxyThread:
    """``zmq_proxy_steerable(xsub, xpub)`` in a daemon thread, stopped with ``TERMINATE``.

    The sockets belong to ``ctx``; after :meth:`stop` they are closed and ``ctx`` is
    terminated.
    """

    def __init__(
        self,
        ctx: zmq.Context[zmq.Socket[bytes]],
        xsub: zmq.Socket[bytes],
        xpub: zmq.Socket[bytes],
        name: str,
        *,
        check: Callable[[zmq.Frame], bool] | None = None,
    ) -> None:
        #: ``check``: judge every message from the XSUB side (single-part; its ZAP
        #: ``User-Id`` readable with ``frame.get``); False drops it. Without it libzmq's
        #: own proxy forwards everything.
        self._check = check
        self._ctx = ctx
        self._xsub = xsub
        self._xpub = xpub
        address = f"inproc://aoz-proxy-control-{next(_ids)}"
        self._control = ctx.socket(zmq.PAIR)
        self._control.bind(address)
        self._peer = ctx.socket(zmq.PAIR)
        self._peer.connect(address)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._stopped = False

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            with tolerated(f"proxy {self._thread.name} ended", "its context was terminated"):
                if self._check is None:
                    zmq.proxy_steerable(self._xsub, self._xpub, None, self._peer)
                else:
                    self._relay(self._check)
        finally:
            for sock in (self._xsub, self._xpub, self._peer):
                sock.close(linger=0)

    def _relay(self, check: Callable[[zmq.Frame], bool]) -> None:
        """The proxy with a judge on the XSUB side; subscriptions go upstream as they are."""
        xsub, xpub, peer = self._xsub, self._xpub, self._peer
        poller = zmq.Poller()
        for sock in (xsub, xpub, peer):
            poller.register(sock, zmq.POLLIN)
        while True:
            ready = dict(poller.poll())
            if peer in ready and peer.recv() == b"TERMINATE":
                return
            for _ in range(_RELAY_BATCH) if xsub in ready else ():
                try:
                    frame = xsub.recv(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                more = frame.more
                while frame.more:  # naming frames are one part: anything else is dropped
                    frame = xsub.recv(copy=False)
                if not more and check(frame):
                    xpub.send(frame, copy=False)
            for _ in range(_RELAY_BATCH) if xpub in ready else ():
                try:
                    xsub.send_multipart(xpub.recv_multipart(zmq.NOBLOCK))
                except zmq.Again:
                    break

    async def stop(self) -> None:
        """Stop forwarding, join the thread, close the sockets and the context."""
        if self._stopped:
            return
        self._stopped = True
        if self._thread.is_alive():
            self._control.send(b"TERMINATE")
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._thread.join)
        else:
            for sock in (self._xsub, self._xpub, self._peer):
                sock.close(linger=0)
        self._control.close(linger=0)
        self._ctx.term()


class Broker:
    """An XSUB/XPUB forwarder. ``pub_port``/``sub_port`` 0 (the default) pick free ports.

    ``host`` is an interface, or an ``ipc://`` address for aoz nodes on this host: the
    sockets then bind ``<host>.pub`` and ``<host>.sub`` (``Broker("ipc:///run/aoz/b")``).

    Usable as ``async with Broker() as broker:``; :attr:`pub_endpoint` is what nodes
    pass as ``broker_pub`` and :attr:`sub_endpoint` what they pass as ``broker_sub``.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        *,
        pub_port: int = 0,
        sub_port: int = 0,
        heartbeat_interval: float = 1.0,
    ) -> None:
        self.host = host
        self._pub_port = pub_port
        self._sub_port = sub_port
        self._heartbeat = heartbeat_interval
        self._proxy: ProxyThread | None = None
        self._closed = False
        self.pub_endpoint = ""
        self.sub_endpoint = ""

    async def start(self) -> None:
        """Bind both sockets and start forwarding (``async with`` calls this)."""
        if self._closed or self._proxy is not None:
            raise ClosedError("a Broker can be started once; create a new one")
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        xsub = ctx.socket(zmq.XSUB)
        xpub = ctx.socket(zmq.XPUB)
        try:
            for sock in (xsub, xpub):
                tune(sock, self._heartbeat)
            self.pub_endpoint = bind_socket(
                xsub, daemon_endpoint(self.host, self._pub_port, suffix=".pub"), "broker XSUB"
            )
            self.sub_endpoint = bind_socket(
                xpub, daemon_endpoint(self.host, self._sub_port, suffix=".sub"), "broker XPUB"
            )
        except BaseException:
            xsub.close(linger=0)
            xpub.close(linger=0)
            ctx.term()
            raise
        self._proxy = ProxyThread(ctx, xsub, xpub, name="aoz-broker")
        self._proxy.start()
        log.info("broker forwarding %s -> %s", self.pub_endpoint, self.sub_endpoint)

    async def aclose(self) -> None:
        """Stop forwarding and release the ports (idempotent)."""
        self._closed = True
        if self._proxy is not None:
            await self._proxy.stop()

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
