"""The Prometheus exporter, scraped over HTTP on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

import aoz
import aoz.metrics
from aoz.pytest_plugin import NodeFactory

from .conftest import STEP


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    """The sample ``name`` whose labels include ``labels`` (exactly one must match)."""
    want = set(labels.items())
    found = [v for (n, lab), v in samples(text).items() if n == name and want <= lab]
    assert len(found) == 1, (name, labels, found)
    return found[0]


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def server(registry: CollectorRegistry) -> Iterator[aoz.metrics.MetricsServer]:
    with aoz.metrics.start_http_server(0, registry=registry) as srv:
        yield srv


async def scrape(url: str) -> str:
    async with httpx.AsyncClient(timeout=STEP) as client:
        response = await client.get(url)
    response.raise_for_status()
    return response.text


async def test_counters_move_after_publishing(
    aoz_node_factory: NodeFactory,
    registry: CollectorRegistry,
    server: aoz.metrics.MetricsServer,
) -> None:
    pub = await aoz_node_factory(program="metrics-pub")
    sub_node = await aoz_node_factory(program="metrics-sub")
    aoz.metrics.register(pub, registry)
    aoz.metrics.register(sub_node, registry)

    small = sub_node.subscribe("MET.>", queue_size=4)  # overflows: drop_newest
    async with small, sub_node.subscribe("MET.x") as full:
        before = await scrape(server.url)
        sent_before = value(before, "aoz_messages_sent_total", node=pub.uuid)
        recv_before = value(before, "aoz_messages_received_total", node=sub_node.uuid)
        assert value(before, "aoz_subscriptions", node=sub_node.uuid) == 2

        await pub.wait_for_interest("MET.x", timeout=STEP)
        for i in range(10):
            await pub.publish("MET.x", {"i": i})
        # each frame reaches both subscriptions at once, so once `full` has all 10,
        # `small` has seen them too (4 queued, 6 dropped)
        assert [(await full.next(timeout=STEP)).decode()["i"] for _ in range(10)] == list(range(10))
        after = await scrape(server.url)

    assert value(after, "aoz_messages_sent_total", node=pub.uuid) == sent_before + 10
    assert value(after, "aoz_messages_received_total", node=sub_node.uuid) >= recv_before + 10
    assert value(after, "aoz_sent_bytes_total", node=pub.uuid) > 0
    assert value(after, "aoz_subscription_received_total", node=sub_node.uuid,
                 pattern="MET.>") == 10
    assert value(after, "aoz_subscription_dropped_total", node=sub_node.uuid,
                 pattern="MET.>") == 6
    assert value(after, "aoz_peers", node=pub.uuid, program="metrics-pub", mode="naming") >= 1


async def test_requests_and_no_responders_are_counted(
    aoz_node: aoz.Node, registry: CollectorRegistry, server: aoz.metrics.MetricsServer
) -> None:
    aoz.metrics.register(aoz_node, registry)
    with pytest.raises(aoz.NoResponders):
        await aoz_node.request("MET.nobody", b"", timeout=0.1)
    text = await scrape(server.url)
    assert value(text, "aoz_no_responders_total", node=aoz_node.uuid) == 1


async def test_closed_nodes_leave_the_exporter(
    aoz_node_factory: NodeFactory, registry: CollectorRegistry, server: aoz.metrics.MetricsServer
) -> None:
    keep = await aoz_node_factory()
    gone = await aoz_node_factory()
    collector = aoz.metrics.register(keep, registry)
    assert aoz.metrics.register(gone, registry) is collector  # one collector per registry
    await gone.aclose()
    text = await scrape(server.url)
    nodes = {dict(lab)["node"] for (n, lab) in samples(text) if n == "aoz_messages_sent_total"}
    assert nodes == {keep.uuid}
    aoz.metrics.unregister(keep, registry)
    assert collector.nodes == []


async def test_the_publisher_cache_and_memory_events_are_exported(
    aoz_node_factory: NodeFactory, registry: CollectorRegistry,
    server: aoz.metrics.MetricsServer,
) -> None:
    node = await aoz_node_factory(program="metrics-cache", publish_cache=2)
    aoz.metrics.register(node, registry)
    for i in range(3):
        await node.publish("MEM.x", i)
    text = await scrape(server.url)
    assert value(text, "aoz_publish_cache", node=node.uuid, what="frames") == 2
    assert value(text, "aoz_publish_cache", node=node.uuid, what="subjects") == 1
    assert value(text, "aoz_memory_events_total", node=node.uuid, event="cache_evicted") == 1
    assert value(text, "aoz_memory_events_total", node=node.uuid, event="recovered") == 0
