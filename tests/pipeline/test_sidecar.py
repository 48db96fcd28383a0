"""The sink's sidecar without Spark: lossless back-pressure, refusals the task sees, the
health probe, `aoz sidecar` (ready line, probe, SIGTERM), and owners closable from
another task (the sidecar and the Recorder)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import zmq
import zmq.asyncio

from aoz.errors import TransportError, WaitTimeout
from aoz.record import Recorder
from aoz.spark.sidecar import SinkSidecar, encode_chunk, probe_sidecar

from ..ports import free_endpoint

ROOT = Path(__file__).resolve().parents[2]


def client(endpoint: str, timeout: float = 10.0, window: int = 4) -> Any:
    pytest.importorskip("pyspark")
    from aoz.spark.sink import _SidecarClient

    return _SidecarClient(endpoint, timeout, window)


def send_all(endpoint: str, chunks: int, rows: int, size: int) -> int:
    c = client(endpoint)
    try:
        for k in range(chunks):
            bodies = [k.to_bytes(4, "big") + bytes(size) for _ in range(rows)]
            c.send(encode_chunk(0, ["X.A"], [0] * rows, bodies), rows)
        return int(c.finish())
    finally:
        c.close()


async def slow_subscriber(endpoint: str) -> zmq.asyncio.Socket:
    ctx = zmq.asyncio.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 50)
    sub.setsockopt(zmq.RCVBUF, 65536)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"X.")
    sub.connect(endpoint)
    return sub


async def test_a_slow_subscriber_gets_every_row_through_back_pressure(aoz_node_factory):
    node = await aoz_node_factory(bind=["tcp://127.0.0.1:*"], send_hwm=50, send_policy="block")
    sub = await slow_subscriber(node.endpoint)
    chunks, rows = 20, 500
    try:
        async with SinkSidecar(node) as sidecar:
            await node.wait_for_interest("X.A", timeout=10)
            result: list[int] = []

            async def produce() -> None:
                result.append(
                    await anyio.to_thread.run_sync(send_all, sidecar.endpoint, chunks, rows, 4096)
                )

            async with anyio.create_task_group() as tg:
                tg.start_soon(produce)
                for _ in range(3000):  # bounded (30 s): until the sidecar has to wait
                    if sidecar.statistics().waits:
                        break
                    await anyio.sleep(0.01)
                assert sidecar.statistics().waits > 0
                got = 0
                with anyio.fail_after(60):
                    while got < chunks * rows:
                        await sub.recv()
                        got += 1
            stats = sidecar.statistics()
        assert result == [chunks * rows] and got == chunks * rows
        assert stats.rows == chunks * rows and stats.refused == 0 and stats.waits > 0
    finally:
        sub.close()


async def test_rows_the_sidecar_cannot_publish_in_time_are_refused_not_dropped(
    aoz_node_factory,
):
    node = await aoz_node_factory(bind=["tcp://127.0.0.1:*"], send_hwm=50, send_policy="block")
    sub = await slow_subscriber(node.endpoint)  # never reads
    try:
        async with SinkSidecar(node, publish_timeout=0.3) as sidecar:
            await node.wait_for_interest("X.A", timeout=10)
            with pytest.raises(TransportError, match=r"published \d+ of \d+ rows"):
                await anyio.to_thread.run_sync(send_all, sidecar.endpoint, 40, 500, 4096)
            stats = sidecar.statistics()
        assert stats.refused >= 1 and stats.waits > 0
    finally:
        sub.close()


async def test_probe_malformed_input_and_a_missing_sidecar(aoz_node_factory):
    node = await aoz_node_factory(bind=["tcp://127.0.0.1:*"], send_policy="block")
    async with SinkSidecar(node) as sidecar:
        ctx = zmq.asyncio.Context.instance()
        bad = ctx.socket(zmq.DEALER)
        bad.setsockopt(zmq.LINGER, 0)
        bad.connect(sidecar.endpoint)
        await bad.send_multipart([b"?"])  # too short
        await bad.send_multipart([b"Z", b"12345678", b"x"])  # unknown kind
        inbox = encode_chunk(0, ["_INBOX.x"], [0], [b"x"])  # a reserved subject
        await bad.send_multipart([b"P", b"12345678", *inbox])
        reply = await bad.recv_multipart()
        assert reply[0] == b"N" and b"reserved" in reply[-1]
        lying = encode_chunk(0, ["A"], [1], [b"x"])  # a row names subject #1 of 1
        await bad.send_multipart([b"P", b"12345679", *lying])
        reply = await bad.recv_multipart()
        assert reply[0] == b"N" and b"does not have" in reply[-1]
        short = encode_chunk(0, ["A"], [0, 0], [b"x", b"y"])
        short[2] = short[2][:-4]  # offsets for one row fewer
        await bad.send_multipart([b"P", b"12345680", *short])
        reply = await bad.recv_multipart()
        assert reply[0] == b"N" and b"offsets" in reply[-1]
        bad.close()
        stats = await anyio.to_thread.run_sync(probe_sidecar, sidecar.endpoint, 5.0)
        assert stats.malformed == 5 and stats.node_uuid == node.uuid and stats.rows == 0
        endpoint = sidecar.endpoint
    with pytest.raises(WaitTimeout, match="aoz sidecar --bind"):
        await anyio.to_thread.run_sync(probe_sidecar, endpoint, 0.3)


async def test_sidecar_and_recorder_open_in_one_task_and_close_in_another(
    aoz_node_factory, tmp_path
):
    node = await aoz_node_factory(bind=["tcp://127.0.0.1:*"], send_policy="block")
    opened: list[Any] = []

    async def open_them() -> None:
        sidecar = SinkSidecar(node)
        await sidecar.start()
        recorder = Recorder(node, ["R.>"], tmp_path, flush_rows=10)
        await recorder.start()
        opened.extend([sidecar, recorder])

    async with anyio.create_task_group() as tg:
        tg.start_soon(open_them)
    sidecar, recorder = opened
    await node.wait_for_interest("R.x", timeout=10)
    await node.publish("R.x", {"n": 1})
    await recorder.wait_until(received=1, timeout=10)

    async def close_them() -> None:
        await sidecar.aclose()
        await recorder.aclose()
        await recorder.aclose()  # twice is fine

    async with anyio.create_task_group() as tg:
        tg.start_soon(close_them)
    assert recorder.statistics().written == 1
    with pytest.raises(WaitTimeout):
        await anyio.to_thread.run_sync(probe_sidecar, sidecar.endpoint, 0.3)


def test_aoz_sidecar_command_ready_line_probe_and_sigterm(tmp_path):
    endpoint = free_endpoint()
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "aoz", "sidecar", "--bind", endpoint,
           "--static-bind", "tcp://127.0.0.1:*"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()  # blocks until the ready line (or exit)
        assert ready.startswith(f"aoz sidecar ready on {endpoint} (node "), ready
        probe = subprocess.run(
            [sys.executable, "-m", "aoz", "sidecar", "--probe", endpoint],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert probe.returncode == 0, probe.stderr
        assert json.loads(probe.stdout)["endpoint"] == endpoint
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert json.loads(out)["rows"] == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    missing = subprocess.run(
        [sys.executable, "-m", "aoz", "sidecar", "--probe", endpoint],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert missing.returncode == 1 and "aoz sidecar --bind" in missing.stderr


def _sink_rows(task: int, values: list[int]) -> list[bytes]:
    import msgspec

    return [msgspec.msgpack.encode({"v": v, "_aoz": ["q", 0, 0, task, i]})
            for i, v in enumerate(values)]


def _send_chunks(endpoint: str, chunks: list[tuple[list[bytes], int]]) -> int:
    c = client(endpoint)
    try:
        for parts, rows in chunks:
            c.send(parts, rows)
        return int(c.finish())
    finally:
        c.close()


async def test_packed_chunks_reach_a_deduplicator_row_by_row_exactly_once(aoz_node_factory):
    """The sidecar packs each subject's rows into few frames; the subscribing node
    unpacks them, and the Deduplicator accounts per row: the committed attempt's rows
    once, an uncommitted attempt's packed rows discarded, a replayed packed chunk
    dropped whole (every row a duplicate)."""
    import msgspec

    from aoz.spark.delivery import CommitNotice, Deduplicator

    pub = await aoz_node_factory(bind=["tcp://127.0.0.1:*"], send_policy="block")
    sub_node = await aoz_node_factory(bind=["tcp://127.0.0.1:*"], connect=[pub.endpoint])
    n = 60
    values = list(range(n))
    index = sorted(v % 3 for v in values)  # grouped by subject, as the sink's tasks send
    ordered = [v for k in range(3) for v in values if v % 3 == k]
    committed = encode_chunk(1, ["S.a", "S.b", "S.c"], index, _sink_rows(7, ordered), 8)
    failed = encode_chunk(1, ["S.a", "S.b", "S.c"], index, _sink_rows(8, ordered), 8)
    notice = CommitNotice(query_id="q", batch_id=0, rows=n, tasks=1, parts=[(0, 7, n)],
                          status="commit")
    dedup: Deduplicator[object] = Deduplicator()
    async with SinkSidecar(pub) as sidecar, sub_node.subscribe("S.>") as sub:
        await pub.wait_for_interest("S.a", timeout=10)
        acked = await anyio.to_thread.run_sync(
            _send_chunks, sidecar.endpoint,
            [(failed, n), (committed, n),
             (encode_chunk(1, ["S._COMMIT"], [0], [msgspec.msgpack.encode(notice)]), 1),
             (committed, n)],  # the replay, after the batch was released
        )
        stats = sidecar.statistics()
        delivered: list[object] = []
        with anyio.fail_after(10):
            while dedup.statistics().received < 3 * n:
                delivered += dedup.feed(await sub.next(timeout=5))
        sub_stats = sub.statistics()
    assert acked == 3 * n + 1 and stats.rows == 3 * n + 1
    assert sub_stats.received == 3 * n + 1  # rows: 3 x 60 in packed frames, and the notice
    assert sorted(m.decode()["v"] for m in delivered) == values  # type: ignore[attr-defined]
    d = dedup.statistics()
    assert (d.delivered, d.discarded, d.duplicates, d.pending) == (n, n, n, 0)


def test_the_sidecar_packs_runs_of_one_subject_in_row_order() -> None:
    from aoz._protocol.frames import decode_frame
    from aoz._protocol.packed import unpack_rows
    from aoz.spark.sidecar import chunk_frames

    bodies = [bytes([i]) for i in range(10)]
    for index, expect in (([0] * 5 + [1] * 5, [3, 2, 3, 2]),  # grouped: by bisection
                          ([0, 0, 1, 1, 1, 0, 1, 0, 0, 0], [2, 3, 1, 1, 3])):  # any order
        frames, ends = chunk_frames(encode_chunk(2, ["A", "B"], index, bodies, 3), {})
        assert ends is not None and ends[-1] == 10
        rows, subjects = [], []
        for f in frames:
            fr = decode_frame(f)
            if f[fr.payload_start] == 0x12:
                spans = [f[a:b] for _, a, b in unpack_rows(f, fr.payload_start)]
            else:
                assert f[fr.payload_start] == 2  # a run of one row: a plain frame
                spans = [f[fr.payload_start + 1 :]]
            rows += spans
            subjects += [fr.subject] * len(spans)
        assert rows == bodies
        assert subjects == [b"AB"[i : i + 1] for i in index]
        assert [b - a for a, b in zip([0, *ends], ends, strict=False)] == expect
