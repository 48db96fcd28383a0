"""One hostile frame among normal ones must not cost the Recorder its buffer (issue #11)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pyarrow.dataset as ds
import pytest

import aoz
from aoz.pytest_plugin import NodeFactory
from aoz.record import Recorder
from aoz.record.schema import build_tables


@pytest.mark.parametrize(
    ("codec", "body"),
    [
        (aoz.Codec.MSGPACK, b"\x91" * 1000 + b"\xc0"),  # [[[...]]] 1,000 deep
        (aoz.Codec.JSON, b"[" * 1000 + b"]" * 1000),
    ],
)
async def test_a_deeply_nested_frame_among_200_is_counted_and_the_rest_written(
    aoz_node_factory: NodeFactory, tmp_path: Path, codec: aoz.Codec, body: bytes
) -> None:
    feed = await aoz_node_factory()
    node = await aoz_node_factory()
    async with Recorder(node, ["REC.>"], tmp_path, flush_rows=1000, flush_interval=30) as rec:
        await feed.wait_for_interest("REC.a", timeout=10)
        for seq in range(1, 101):
            await feed.publish("REC.a", {"seq": seq, "sender": "feed"})
        await feed.publish("REC.a", msgspec.Raw(body), codec=codec)
        for seq in range(101, 201):
            await feed.publish("REC.a", {"seq": seq, "sender": "feed"})
        await rec.wait_until(received=201, timeout=20)
    stats = rec.statistics()
    assert stats.decode_errors == 1
    assert stats.written == stats.received == 201 and stats.pending == 0
    table = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    sequences = [s for s in table.column("sequence").to_pylist() if s is not None]
    assert sorted(sequences) == list(range(1, 201))  # all 200 good rows, decoded
    # the bad one is kept as it came (raw payload, no decoded fields), for forensics
    (bad,) = [r for r in table.to_pylist() if r["sequence"] is None]
    assert bad["payload"] == bytes([codec]) + body


def test_build_tables_counts_deep_nesting_as_a_decode_error() -> None:
    rows = [("A", 0.0, b"\x01" + b"\x91" * 5000 + b"\xc0"), ("A", 0.0, b"\x01\x81\xa3seq\x07")]
    tables, errors = build_tables(rows)
    assert errors == 1
    (table,) = tables.values()
    assert table.column("sequence").to_pylist() == [None, 7]


async def test_spark_sink_deduplicator_passes_a_deeply_nested_message_through(
    aoz_node_factory: NodeFactory,
) -> None:
    pytest.importorskip("pyspark")
    from aoz.spark.delivery import Deduplicator

    feed = await aoz_node_factory()
    node = await aoz_node_factory()
    dedup: Deduplicator[aoz.Message] = Deduplicator()
    async with node.subscribe("SINK.rows") as sub:
        await feed.wait_for_interest("SINK.rows", timeout=10)
        deep = msgspec.Raw(b"\x91" * 1000 + b"\xc0")
        await feed.publish("SINK.rows", deep, codec=aoz.Codec.MSGPACK)
        await feed.publish("SINK.rows", {"plain": "row"})
        bad, good = await sub.next(timeout=10), await sub.next(timeout=10)
    assert dedup.feed(bad) == [bad]  # not a sink row as far as anyone can tell: passed on
    assert dedup.feed(good) == [good]
    assert dedup.statistics().duplicates == 0 and dedup.statistics().malformed == 0
