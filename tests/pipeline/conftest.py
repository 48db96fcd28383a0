"""Pipeline fixtures, each made once per pytest process (`make test` runs every test that
uses Spark in one process, see tests/conftest.py): ONE SparkSession (2 cores, 1 shuffle
partition), ONE standalone Spark cluster (a master and a worker), and a small recording
made by the real Recorder."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("pyarrow")

SAMPLE_EVENTS = 3000


def _java_available() -> bool:
    return shutil.which("java") is not None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    if not _java_available():
        pytest.skip("Spark needs Java")
    from aoz.spark.session import local_session

    session = local_session("local[2]", "aoz-tests", shuffle_partitions=1)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, dict[str, str]]]:
    """A standalone cluster (see cluster.py): its master URL and the environment for
    driver subprocesses. Drivers are applications of their own: tests may share it."""
    pytest.importorskip("pyspark")
    if not _java_available():
        pytest.skip("a Spark cluster needs Java")
    from .cluster import cluster_env, standalone_cluster

    workdir = tmp_path_factory.mktemp("cluster")
    with standalone_cluster(workdir) as url:
        yield url, cluster_env(workdir)


async def record_sample(directory: Path, events: int = SAMPLE_EVENTS) -> int:
    """Publish `events` simulated quotes/trades and record them through a Recorder."""
    import aoz
    from aoz.record import Recorder
    from examples.marketdata import MarketSimulator, Quote, Trade

    async with (
        aoz.connect(bind=["tcp://127.0.0.1:*"]) as feed,
        aoz.connect(bind=["tcp://127.0.0.1:*"], connect=[feed.endpoint]) as rec_node,
    ):
        async with Recorder(
            rec_node, ["MD.>"], directory, types=[Quote, Trade], flush_rows=1000
        ) as rec:
            await feed.wait_for_interest("MD.X.Y", timeout=10)
            sim = MarketSimulator(["IBM", "AAPL", "MSFT", "GOOG"], seed=7, trade_ratio=0.5)
            # Spread send times over ~3 s of simulated clock so there are several 1-s bars.
            t0 = time.time()
            for i in range(events):
                subject, event = sim.next_event(t0 + 3.0 * i / events)
                await feed.publish(subject, event)
            await rec.wait_until(received=events, timeout=20)
        return rec.statistics().written


@pytest.fixture(scope="session")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("recording")
    written = anyio.run(record_sample, directory)
    assert written == SAMPLE_EVENTS
    return directory
