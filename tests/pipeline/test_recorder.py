"""Recorder tests (pyarrow only, no Spark)."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import anyio
import anyio.abc
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from aoz.errors import ConfigError
from aoz.record import Recorder, arrow_schema, columns_for
from aoz.record.schema import build_tables
from examples.marketdata import MarketSimulator, Quote, Trade


def read_all(directory: Path) -> pa.Table:
    return ds.dataset(directory, format="parquet", partitioning="hive").to_table()


def visible_files(directory: Path) -> list[Path]:
    return [
        p for p in directory.rglob("*")
        if p.is_file() and not any(part.startswith((".", "_")) for part in p.parts[-2:])
    ]  # fmt: skip


async def test_every_published_message_is_recorded_across_flushes(aoz_node_factory, tmp_path):
    feed = await aoz_node_factory()
    node = await aoz_node_factory()
    n = 5_500
    async with Recorder(
        node, ["MD.>"], tmp_path, types=[Quote, Trade], flush_rows=1000, flush_interval=30
    ) as rec:
        await feed.wait_for_interest("MD.XNYS.IBM", timeout=10)
        sim = MarketSimulator(seed=3)
        for _ in range(n):
            subject, event = sim.next_event(time.time())
            await feed.publish(subject, event)
        # flush_rows=1000 and a 30 s interval: row-triggered flushes write all but < 1000.
        during = await rec.wait_until(received=n, written=n - 999, timeout=20)
    final = rec.statistics()
    assert during.files >= 2 and during.received == n
    assert final.received == final.written == n
    assert final.pending == 0 and final.dropped == 0
    table = read_all(tmp_path)
    assert table.num_rows == n
    assert sorted(table.column("sequence").to_pylist()) == list(range(1, n + 1))
    assert set(table.column("type").to_pylist()) == {"quote", "trade"}
    trades = table.filter(pa.compute.equal(table.column("type"), "trade"))
    assert trades.column("price").null_count == 0
    assert trades.column("bid").null_count == trades.num_rows


async def test_timestamps_are_microsecond_utc(aoz_node_factory, tmp_path):
    feed = await aoz_node_factory()
    node = await aoz_node_factory()
    sent_at = time.time()
    async with Recorder(node, ["T.>"], tmp_path) as rec:
        await feed.wait_for_interest("T.a", timeout=10)
        await feed.publish("T.a", {"ts": sent_at, "seq": 9, "sender": "me", "x": 1})
        await feed.publish("T.b", b"raw bytes")
        await rec.wait_until(received=2)
    table = read_all(tmp_path)
    for name in ("send_ts", "receive_ts"):
        assert table.schema.field(name).type == pa.timestamp("us", tz="UTC")
    rows = {r["subject"]: r for r in table.to_pylist()}
    a, b = rows["T.a"], rows["T.b"]
    assert a["send_ts"] == dt.datetime.fromtimestamp(round(sent_at * 1e6) / 1e6, dt.UTC)
    assert a["sequence"] == 9 and a["sender"] == "me"
    assert a["send_ts"] <= a["receive_ts"] < a["send_ts"] + dt.timedelta(seconds=10)
    assert b["send_ts"] is None and b["sequence"] is None and b["sender"] is None
    assert b["payload"] == b"\x00raw bytes"
    today = a["receive_ts"].date().isoformat()
    assert (tmp_path / f"date={today}").is_dir()
    # The file's own metadata says microseconds, adjusted to UTC (what Spark needs).
    meta = pq.read_schema(next(iter(visible_files(tmp_path))))
    assert meta.field("receive_ts").type.unit == "us"


def test_rows_are_partitioned_by_utc_receive_date() -> None:
    midnight = dt.datetime(2030, 1, 2, tzinfo=dt.UTC).timestamp()
    rows = [("A", midnight - 0.5, b"\x03x"), ("A", midnight + 0.5, b"\x03y"), ("B", midnight, b"")]
    tables, errors = build_tables(rows, columns_for([Quote]))
    assert errors == 0
    assert {k: t.num_rows for k, t in tables.items()} == {"2030-01-01": 1, "2030-01-02": 2}
    assert tables["2030-01-01"].schema == arrow_schema(columns_for([Quote]))


def test_undecodable_payload_is_kept_and_counted() -> None:
    tables, errors = build_tables([("A", 1.0, b"\x01\xc1"), ("A", 1.0, b"\x02{")])
    assert errors == 2
    (table,) = tables.values()
    assert table.column("payload").to_pylist() == [b"\x01\xc1", b"\x02{"]


async def test_files_are_never_visible_half_written(aoz_node_factory, tmp_path):
    """A watcher thread reads every visible file while the recorder writes many small ones."""
    feed = await aoz_node_factory()
    node = await aoz_node_factory()
    stop = threading.Event()
    problems: list[str] = []
    checked: set[Path] = set()

    def watch() -> None:
        deadline = time.monotonic() + 30
        while not stop.is_set() and time.monotonic() < deadline:
            for path in visible_files(tmp_path):
                if path in checked:
                    continue
                try:
                    pq.read_table(path)
                    checked.add(path)
                except Exception as exc:  # any failure to read is what this test looks for
                    problems.append(f"{path.name}: {exc!r}")

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        n = 4000
        async with Recorder(node, ["W.>"], tmp_path, flush_rows=100, flush_interval=30) as rec:
            await feed.wait_for_interest("W.x", timeout=10)
            for i in range(n):
                await feed.publish("W.x", {"seq": i, "blob": "x" * 200})
            await rec.wait_until(received=n, timeout=20)
    finally:
        stop.set()
        watcher.join(10)
    assert not problems
    files = visible_files(tmp_path)
    # Under load a flush takes everything buffered, so there are fewer files than n/100.
    assert len(files) >= 3
    assert checked <= set(files) and len(checked) >= 2  # read while the recorder was writing
    assert all(p.name.startswith("part-") and p.suffix == ".parquet" for p in files)
    assert not [p for p in tmp_path.rglob(".*")]  # no temporary left behind
    assert read_all(tmp_path).num_rows == n


_CHILD = r"""
import json, sys, anyio
from aoz.record import record_main
from examples.marketdata import Quote, Trade
stats = anyio.run(lambda: record_main(
    ["MD.>"], sys.argv[2], types=[Quote, Trade], flush_rows=1000, flush_interval=60,
    progress=False, naming=[sys.argv[1]]))
print(json.dumps({"received": stats.received, "written": stats.written,
                  "dropped": stats.dropped}), flush=True)
"""


@pytest.mark.slow
async def test_sigterm_mid_run_loses_nothing_received(aoz_node_factory, aoz_nsd, tmp_path):
    cmd = [sys.executable, "-c", _CHILD, aoz_nsd.endpoint, str(tmp_path)]
    async with await anyio.open_process(cmd) as child:
        try:
            feed = await aoz_node_factory()
            await feed.wait_for_interest("MD.XNYS.IBM", timeout=20)
            sim = MarketSimulator(seed=5)
            for _ in range(1500):
                subject, event = sim.next_event(time.time())
                await feed.publish(subject, event)
            # The first file (1000 rows) shows the child is consuming; the rest sits in its
            # memory (60 s flush interval). A file written by another process has no event
            # to wait on, so poll the directory, bounded.
            with anyio.fail_after(20):
                while not visible_files(tmp_path):  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            for _ in range(700):
                subject, event = sim.next_event(time.time())
                await feed.publish(subject, event)
            child.send_signal(signal.SIGTERM)
            for _ in range(300):  # still publishing while the recorder shuts down
                subject, event = sim.next_event(time.time())
                await feed.publish(subject, event)
            with anyio.fail_after(30):
                assert child.stdout is not None and child.stderr is not None
                out = (await _read_all(child.stdout)).decode()
                err = (await _read_all(child.stderr)).decode()
                code = await child.wait()
        finally:
            if child.returncode is None:
                child.kill()
    assert code == 0, err
    stats = json.loads(out.strip().splitlines()[-1])
    table = read_all(tmp_path)
    assert stats["received"] == stats["written"] == table.num_rows
    assert table.num_rows >= 1000
    # One publisher over one connection: what was received is a gap-free prefix.
    assert sorted(table.column("sequence").to_pylist()) == list(range(1, table.num_rows + 1))
    assert not list(tmp_path.rglob(".*"))
    assert all(d.startswith("date=") for d in os.listdir(tmp_path))


async def _read_all(stream: anyio.abc.ByteReceiveStream) -> bytes:
    chunks = []
    async for chunk in stream:
        chunks.append(chunk)
    return b"".join(chunks)


async def test_a_process_writer_records_every_message_as_the_thread_writer_does(
    aoz_node_factory, tmp_path
):
    feed = await aoz_node_factory()
    node = await aoz_node_factory()
    n = 2_500
    async with Recorder(
        node, ["P.>"], tmp_path, flush_rows=1000, flush_interval=30, writer="process"
    ) as rec:
        await feed.wait_for_interest("P.a", timeout=10)
        for i in range(n):
            await feed.publish(f"P.{i % 3}", {"seq": i + 1, "sender": "p"})
        during = await rec.wait_until(received=n, written=1000, timeout=30)  # by the worker
    final = rec.statistics()
    assert during.files >= 1 and final.received == final.written == n
    table = read_all(tmp_path)
    assert sorted(table.column("sequence").to_pylist()) == list(range(1, n + 1))
    assert final.last_file in {str(p) for p in visible_files(tmp_path)}


async def test_partitions_share_the_subjects_between_recorders(aoz_node_factory, tmp_path):
    from aoz.record.recorder import in_partition

    feed = await aoz_node_factory()
    node = await aoz_node_factory()
    subjects = [f"Q.S{i}" for i in range(12)]
    async with (
        Recorder(node, ["Q.>"], tmp_path / "0", partition=(0, 2)) as zero,
        Recorder(node, ["Q.>"], tmp_path / "1", partition=(1, 2)) as one,
    ):
        await feed.wait_for_interest("Q.S0", timeout=10)
        for subject in subjects:
            await feed.publish(subject, {"seq": 1})
        mine = sum(in_partition(s, 0, 2) for s in subjects)
        await zero.wait_until(received=mine)
        await one.wait_until(received=len(subjects) - mine)
    got = [set(read_all(tmp_path / str(i)).column("subject").to_pylist()) for i in (0, 1)]
    assert got[0].isdisjoint(got[1]) and got[0] | got[1] == set(subjects)
    assert got[0] == {s for s in subjects if in_partition(s, 0, 2)} and 0 < len(got[0]) < 12
    with pytest.raises(ConfigError):
        Recorder(node, ["Q.>"], tmp_path, partition=(2, 2))
