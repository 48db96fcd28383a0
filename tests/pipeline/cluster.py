"""A real Spark standalone cluster for tests: a master and one worker started with the
``spark-class`` that pyspark ships, on loopback, 1 core, 1 GiB (no Spark install needed,
only Java). Readiness is the master's and the worker's own log lines."""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MASTER_READY = re.compile(r"Starting Spark master at (spark://\S+)")
WORKER_READY = "Successfully registered with master"


def java_available() -> bool:
    return shutil.which("java") is not None


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def cluster_env(workdir: Path) -> dict[str, str]:
    """Environment for cluster JVMs and driver subprocesses: aoz importable everywhere."""
    here = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    return os.environ | {
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOG_DIR": str(workdir),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=false",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": path,
    }


class _Lines:
    """Lines of a process's output, read by a thread (so waits can be bounded)."""

    def __init__(self, proc: subprocess.Popen[str], log: Path) -> None:
        self.q: queue.Queue[str] = queue.Queue()
        self.log = log
        threading.Thread(target=self._pump, args=(proc,), daemon=True).start()

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        with open(self.log, "a") as f:
            for line in proc.stdout:
                f.write(line)
                self.q.put(line)

    def wait_for(self, pattern: str | re.Pattern[str], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                break
            m = re.search(pattern, line)
            if m:
                return m.group(1) if m.groups() else line
        raise TimeoutError(f"no {pattern!r} within {timeout} s; see {self.log}")


def _start(args: list[str], env: dict[str, str], log: Path) -> tuple[subprocess.Popen[str], _Lines]:
    proc = subprocess.Popen(
        [str(spark_home() / "bin" / "spark-class"), *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    return proc, _Lines(proc, log)


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextmanager
def standalone_cluster(workdir: Path, timeout: float = 90) -> Iterator[str]:
    """Start a master and one worker (1 core, 1 GiB); yield the master URL."""
    env = cluster_env(workdir)
    master, mlines = _start(
        ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
         "--webui-port", "0"], env, workdir / "master.log",
    )  # fmt: skip
    procs = [master]
    try:
        url = mlines.wait_for(MASTER_READY, timeout)
        worker, wlines = _start(
            ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
             "--cores", "1", "--memory", "1g", "--webui-port", "0",
             "--work-dir", str(workdir / "work")], env, workdir / "worker.log",
        )  # fmt: skip
        procs.append(worker)
        wlines.wait_for(WORKER_READY, timeout)
        yield url
    finally:
        for proc in reversed(procs):
            _stop(proc)
