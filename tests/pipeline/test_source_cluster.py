"""The ``aoz`` source on a REAL Spark standalone cluster (the suite's shared
``spark_cluster``: master + one worker from pyspark's ``spark-class``, loopback): a
streaming query reads a recording while a Recorder writes it, its driver is SIGKILLed
mid-batch and restarted from the checkpoint (and the recorder restarted too: a new
partition), and every recorded message is read exactly once; ``failOnDataLoss`` over a
recording with a gap; ``startingOffsets`` by time. Drivers are subprocesses
(``source_job.py``): one JVM each, so one can be killed."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.streams.text import TextReceiveStream

from aoz.record import Recorder
from aoz.record.offsets import Slice
from aoz.record.reading import Catalog, read_slice

from .recordings import gap_recording, timed_recording

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = Path(__file__).with_name("source_job.py")
MAX_ROWS = 1000
T0 = 1_764_000_000.0


class Driver:
    """A driver subprocess whose stdout lines are read as they come (readiness signals)."""

    def __init__(self, proc: anyio.abc.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._buffer = ""
        assert proc.stdout is not None
        self._text = TextReceiveStream(proc.stdout)

    async def expect(self, prefix: str, timeout: float) -> str:
        """The first line (from the start) starting with ``prefix``, waiting for it."""
        with anyio.fail_after(timeout):
            while True:
                for line in self.lines:
                    if line.startswith(prefix):
                        return line
                chunk = await self._text.receive()
                self._buffer += chunk
                *done, self._buffer = self._buffer.split("\n")
                self.lines += done

    async def finish(self, timeout: float) -> int:
        with anyio.fail_after(timeout):
            async for chunk in self._text:
                self._buffer += chunk
            self.lines += self._buffer.split("\n")
            return await self.proc.wait()


DRIVERS: list[anyio.abc.Process] = []


async def start_driver(env: dict[str, str], *args: str) -> Driver:
    proc = await anyio.open_process([sys.executable, str(JOB), *args], env=env, stderr=None)
    DRIVERS.append(proc)
    return Driver(proc)


async def stop_drivers() -> None:
    """Kill the drivers a failed scenario left running (their JVMs exit with them)."""
    while DRIVERS:
        proc = DRIVERS.pop()
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with anyio.move_on_after(10):
                await proc.wait()


def recorded(directory: Path) -> list[tuple[str, int]]:
    """Every message of a recording as (recorder, offset), read with pyarrow."""
    out = []
    for f in Catalog(directory).files():
        rows = sum(b.num_rows for b in read_slice(Slice(f, 0, f.rows), ["subject"]))
        out += [(f.recorder, (f.number << 32) + r) for r in range(rows)]
    return out


def batches(out: Path) -> dict[int, list[list[tuple[str, int]]]]:
    """What each run of each micro-batch read (a replayed batch has several files)."""
    got: dict[int, list[list[tuple[str, int]]]] = defaultdict(list)
    for path in out.glob("batch-*.json"):
        batch_id = int(path.name.split("-")[1])
        got[batch_id].append(sorted((r, o) for r, o in json.loads(path.read_text())))
    return got


async def publish(node: Any, prefix: str, first: int, count: int) -> None:
    for i in range(first, first + count):
        await node.publish(f"{prefix}.{i % 5}", {"n": i})


async def scenario(url: str, env: dict[str, str], base: Path) -> dict[str, Any]:
    """Record while a streaming query reads; SIGKILL its driver in batch 1; record more
    with a restarted recorder (a new run); restart the query from its checkpoint with
    ``availableNow``, and let that driver run the checks too (one JVM start less)."""
    import aoz

    rec_dir, ck, out = base / "rec", base / "ck", base / "out"
    gap_recording(base / "gap", T0)
    timed_recording(base / "timed", T0)
    start = dt.datetime.fromtimestamp(T0 + 2.995, dt.UTC).isoformat()
    async with (
        aoz.connect(bind=["tcp://127.0.0.1:*"], send_policy="block") as feed,
        aoz.connect(bind=["tcp://127.0.0.1:*"], connect=[feed.endpoint]) as node,
    ):
        async with Recorder(node, ["SRC.>"], rec_dir, flush_rows=200, flush_interval=0.1) as rec:
            await feed.wait_for_interest("SRC.0", timeout=10)
            await publish(feed, "SRC", 0, 1000)
            await rec.wait_until(written=1000, timeout=30)
            # batch 0 reads the first 1000 rows; what batch 1 reads is recorded meanwhile
            first = await start_driver(
                env, url, "stream", str(rec_dir), str(ck), str(out),
                "--max-rows", str(MAX_ROWS), "--die-at", "1",
            )  # fmt: skip
            await first.expect("batch 0 ", timeout=150)
            await publish(feed, "SRC", 1000, 1000)
            await rec.wait_until(written=2000, timeout=30)
            first_code = await first.finish(timeout=120)
        # A restarted recorder is a new run (a new partition of the source).
        async with Recorder(node, ["SRC2.>"], rec_dir, flush_rows=200, flush_interval=0.1) as rec:
            await feed.wait_for_interest("SRC2.0", timeout=10)
            await publish(feed, "SRC2", 2000, 1000)
            await rec.wait_until(written=1000, timeout=30)
    second = await start_driver(
        env, url, "stream", str(rec_dir), str(ck), str(out), "--max-rows", str(MAX_ROWS),
        "--available-now", "--checks", str(base / "gap"), str(base / "timed"), start,
        str(base / "cks"),
    )  # fmt: skip
    second_code = await second.finish(timeout=240)
    result = next((x for x in second.lines if x.startswith("result ")), "result null")
    return {
        "first": (first_code, first.lines), "second": (second_code, second.lines),
        "rec_dir": rec_dir, "out": out, "checks": json.loads(result.removeprefix("result ")),
    }  # fmt: skip


@pytest.fixture(scope="module")
def runs(spark_cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    url, env = spark_cluster
    base = tmp_path_factory.mktemp("source-runs")

    async def run() -> dict[str, Any]:
        try:
            return await scenario(url, env, base)
        finally:
            await stop_drivers()

    return anyio.run(run)


# The cluster and two driver JVMs: 166 s at load average 8-11 on a 2-core machine.
@pytest.mark.timeout(400)
def test_a_query_killed_mid_batch_and_restarted_reads_every_message_once(runs):
    code, lines = runs["first"]
    assert code == -9 and any(x.startswith("batch 1 ") for x in lines), lines  # killed in 1
    code, lines = runs["second"]
    assert code == 0, lines
    got = batches(runs["out"])
    assert len(got[1]) == 2  # batch 1 ran twice: before the kill and after the restart
    for batch in got.values():
        assert all(run == batch[0] for run in batch)  # a replayed batch reads the same rows
        assert len(batch[0]) <= MAX_ROWS
    read = [row for batch in got.values() for row in batch[0]]
    truth = recorded(runs["rec_dir"])
    assert len(truth) == 3000 and len({r for r, _ in truth}) == 2
    assert len(read) == len(set(read)) and sorted(read) == sorted(truth)


@pytest.mark.timeout(400)
def test_fail_on_data_loss_fails_a_query_over_a_gap_and_reads_on_when_off(runs):
    checks = runs["checks"]
    assert checks, runs["second"]
    gap = r"10 message(s) of publisher 0000000000001234 on G.A missing between sequence 150 and 161"
    assert checks["gap_default"]["error"] and gap in checks["gap_default"]["error"]
    assert checks["gap_off"] == {"rows": 590, "error": None}


@pytest.mark.timeout(400)
def test_starting_offsets_by_time_start_each_recorder_where_asked(runs):
    checks = runs["checks"]
    assert checks, runs["second"]
    assert checks["from_time"] == list(range(300, 600)) + list(range(1300, 1600))
