"""Prometheus metrics for aoz nodes (needs the ``aoz[prometheus]`` extra).

:func:`register` adds a node to a collector that turns :meth:`aoz.Node.statistics`
into Prometheus metrics at every scrape; :func:`start_http_server` serves a registry on
``/metrics``::

    import aoz, aoz.metrics

    async with aoz.connect() as node:
        aoz.metrics.register(node)                           # default registry
        server = aoz.metrics.start_http_server(9464)         # http://127.0.0.1:9464/metrics
        ...
        server.close()

Every metric carries the labels ``node`` (uuid), ``program`` and ``mode``:

======================================  =======  ===========================================
metric                                  type     from ``NodeStatistics``
======================================  =======  ===========================================
``aoz_messages_received_total``         counter  ``messages_in``
``aoz_received_bytes_total``            counter  ``bytes_in``
``aoz_messages_sent_total``             counter  ``messages_out``
``aoz_sent_bytes_total``                counter  ``bytes_out``
``aoz_malformed_messages_total``        counter  ``malformed_in``
``aoz_messages_lost_total``             counter  ``lost_in`` (sequence gaps, all subscriptions)
``aoz_publishes_dropped_total``         counter  ``dropped_out`` (block node, ``block=False``)
``aoz_blocked_sends_total``             counter  ``blocked_sends`` (publishes that waited)
``aoz_requests_total``                  counter  ``requests``
``aoz_request_timeouts_total``          counter  ``request_timeouts``
``aoz_no_responders_total``             counter  ``no_responders``
``aoz_replies_dropped_total``           counter  ``replies_dropped``
``aoz_peers``                           gauge    ``peers``
``aoz_subscriptions``                   gauge    ``len(subscriptions)``
``aoz_subscription_received_total``     counter  per ``pattern``: ``received``
``aoz_subscription_dropped_total``      counter  per ``pattern``: ``dropped``
``aoz_subscription_lost_total``         counter  per ``pattern``: ``lost`` (upstream gaps)
``aoz_subscription_pending``            gauge    per ``pattern``: ``pending``
``aoz_discovery_events_total``          counter  per ``event``: ``discovery`` (reconnects...)
``aoz_memory_events_total``             counter  per ``event``: ``memory`` (history, recovery)
``aoz_publish_cache``                   gauge    per ``what``: subjects, frames, bytes cached
======================================  =======  ===========================================

A node's statistics live on its event loop; a scrape served from another thread (the
exporter's) asks that loop for the snapshot, so counters are read consistently.
Closed nodes drop out of the collector by themselves.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ._extras import missing_extra

try:
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client import start_http_server as _prom_start_http_server
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as exc:
    raise missing_extra(exc, "prometheus", "aoz.metrics") from exc

from .errors import AozError, TransportError

if TYPE_CHECKING:
    from ._mesh.node import Node, NodeStatistics

__all__ = ["MetricsServer", "NodeCollector", "register", "start_http_server", "unregister"]

_LABELS = ["node", "program", "mode"]
_SNAPSHOT_TIMEOUT = 2.0

#: (metric name without ``_total``, NodeStatistics field, help)
_COUNTERS = (
    ("aoz_messages_received", "messages_in", "Messages received by the node's data socket."),
    ("aoz_received_bytes", "bytes_in", "Bytes received by the node's data socket."),
    ("aoz_messages_sent", "messages_out", "Messages published by the node."),
    ("aoz_sent_bytes", "bytes_out", "Bytes published by the node."),
    ("aoz_malformed_messages", "malformed_in", "Received frames that could not be decoded."),
    ("aoz_messages_lost", "lost_in", "Messages known lost upstream (sequence gaps)."),
    ("aoz_publishes_dropped", "dropped_out",
     "Publishes dropped at a full subscriber queue (block node, block=False)."),
    ("aoz_blocked_sends", "blocked_sends", "Publishes that waited for a full subscriber."),
    ("aoz_requests", "requests", "Requests sent."),
    ("aoz_request_timeouts", "request_timeouts", "Requests that got no reply in time."),
    ("aoz_no_responders", "no_responders", "Requests refused because nobody subscribed."),
    ("aoz_replies_dropped", "replies_dropped", "Replies that arrived for no pending request."),
)


class NodeCollector(Collector):
    """Collects the statistics of every node added to it (one per registry)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[Node, asyncio.AbstractEventLoop | None]] = {}

    def add(self, node: Node) -> None:
        """Export ``node``; call from the node's event loop so scrapes can reach it."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            self._nodes[node.uuid] = (node, loop)

    def remove(self, node: Node) -> None:
        with self._lock:
            self._nodes.pop(node.uuid, None)

    @property
    def nodes(self) -> list[Node]:
        with self._lock:
            return [node for node, _ in self._nodes.values()]

    def _snapshots(self) -> Iterator[tuple[Node, NodeStatistics]]:
        with self._lock:
            entries = list(self._nodes.values())
        for node, loop in entries:
            if node.closed:
                self.remove(node)
                continue
            try:
                yield node, _statistics(node, loop)
            except (AozError, concurrent.futures.TimeoutError, RuntimeError):
                continue  # the node closed or its loop is stuck: skip it in this scrape

    def collect(self) -> Iterable[Metric]:
        counters = {
            name: CounterMetricFamily(name, doc, labels=_LABELS) for name, _, doc in _COUNTERS
        }
        peers = GaugeMetricFamily("aoz_peers", "Peers known through discovery.", labels=_LABELS)
        subs = GaugeMetricFamily("aoz_subscriptions", "Open subscriptions.", labels=_LABELS)
        sub_labels = [*_LABELS, "pattern"]
        sub_received = CounterMetricFamily(
            "aoz_subscription_received",
            "Messages offered to a subscription's queue.",
            labels=sub_labels,
        )
        sub_dropped = CounterMetricFamily(
            "aoz_subscription_dropped",
            "Messages a subscription's overflow policy discarded.",
            labels=sub_labels,
        )
        sub_lost = CounterMetricFamily(
            "aoz_subscription_lost",
            "Messages for a subscription known lost upstream (sequence gaps).",
            labels=sub_labels,
        )
        sub_pending = GaugeMetricFamily(
            "aoz_subscription_pending", "Messages queued, not yet consumed.", labels=sub_labels
        )
        discovery = CounterMetricFamily(
            "aoz_discovery_events",
            "Discovery and link events (reconnects, malformed naming frames...).",
            labels=[*_LABELS, "event"],
        )
        memory = CounterMetricFamily(
            "aoz_memory_events",
            "Publisher cache, history and recovery events (aoz._mesh.cache, aoz._mesh.recovery).",
            labels=[*_LABELS, "event"],
        )
        cache = GaugeMetricFamily(
            "aoz_publish_cache", "What the publisher cache holds now.",
            labels=[*_LABELS, "what"],
        )
        for node, stats in self._snapshots():
            labels = [stats.uuid, node.program, stats.mode]
            for name, field, _ in _COUNTERS:
                counters[name].add_metric(labels, getattr(stats, field))
            peers.add_metric(labels, stats.peers)
            subs.add_metric(labels, len(stats.subscriptions))
            for sub in stats.subscriptions:
                sl = [*labels, sub.pattern]
                sub_received.add_metric(sl, sub.received)
                sub_dropped.add_metric(sl, sub.dropped)
                sub_lost.add_metric(sl, sub.lost)
                sub_pending.add_metric(sl, sub.pending)
            for event, count in sorted(stats.discovery.items()):
                discovery.add_metric([*labels, event], count)
            for event, count in sorted(stats.memory.items()):
                if event in _CACHE_GAUGES:
                    cache.add_metric([*labels, event.removeprefix("cache_")], count)
                else:
                    memory.add_metric([*labels, event], count)
        yield from counters.values()
        yield from (peers, subs, sub_received, sub_dropped, sub_lost, sub_pending, discovery,
                    memory, cache)


_CACHE_GAUGES = frozenset({"cache_subjects", "cache_frames", "cache_bytes"})


def _statistics(node: Node, loop: asyncio.AbstractEventLoop | None) -> NodeStatistics:
    """``node.statistics()`` computed on the node's loop when called from another thread."""
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is None or loop is running or loop.is_closed() or not loop.is_running():
        return node.statistics()
    result: concurrent.futures.Future[NodeStatistics] = concurrent.futures.Future()

    def snapshot() -> None:
        try:
            result.set_result(node.statistics())
        except BaseException as exc:
            result.set_exception(exc)

    loop.call_soon_threadsafe(snapshot)
    return result.result(timeout=_SNAPSHOT_TIMEOUT)


_collectors: weakref.WeakKeyDictionary[CollectorRegistry, NodeCollector] = (
    weakref.WeakKeyDictionary()
)
_collectors_lock = threading.Lock()


def register(node: Node, registry: CollectorRegistry | None = None) -> NodeCollector:
    """Export ``node``'s statistics through ``registry`` (default: prometheus' global one).

    Call it from the node's event loop. Several nodes may share one registry; each is
    told apart by its ``node`` label. Returns the registry's :class:`NodeCollector`.

    >>> collector = aoz.metrics.register(node, CollectorRegistry())  # doctest: +SKIP
    """
    reg = REGISTRY if registry is None else registry
    with _collectors_lock:
        collector = _collectors.get(reg)
        if collector is None:
            collector = NodeCollector()
            reg.register(collector)
            _collectors[reg] = collector
    collector.add(node)
    return collector


def unregister(node: Node, registry: CollectorRegistry | None = None) -> None:
    """Stop exporting ``node`` (closed nodes are dropped automatically)."""
    reg = REGISTRY if registry is None else registry
    with _collectors_lock:
        collector = _collectors.get(reg)
    if collector is not None:
        collector.remove(node)


class MetricsServer:
    """A running ``/metrics`` HTTP endpoint (a daemon thread); :meth:`close` stops it."""

    def __init__(self, port: int, addr: str, registry: CollectorRegistry) -> None:
        try:
            self._server, self._thread = _prom_start_http_server(port, addr, registry=registry)
        except OSError as exc:
            raise TransportError(
                f"cannot serve metrics on {addr}:{port}: {exc.strerror}; choose another "
                "port (or 0 for an ephemeral one)"
            ) from exc
        self.addr = addr
        self.port: int = self._server.server_port

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_http_server(
    port: int = 0, addr: str = "127.0.0.1", registry: CollectorRegistry | None = None
) -> MetricsServer:
    """Serve ``registry`` on ``http://addr:port/metrics`` from a daemon thread.

    ``port=0`` picks a free port (read it from ``.port``). Scraping is safe while the
    node's loop runs: statistics are read on that loop.
    """
    return MetricsServer(port, addr, REGISTRY if registry is None else registry)
