"""Runs the roles as OS processes and pairs them up (publisher/subscriber,
replier/requester), with a readiness handshake and a hard time bound on each step.

Every process started here is stopped again (stdin closed, then SIGTERM, then SIGKILL),
also when a step fails or times out.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aoz import Settings

ROOT = Path(__file__).resolve().parent.parent

# system name -> role module (publisher and subscriber run the same module unless the
# system is one side of aoz against the raw zmq.asyncio other side)
MODULES = {
    "zmq": "zmq_sync",
    "zmq.asyncio": "zmq_async",
    "aoz": "aoz_node",
    "aoz-wild": "aoz_node",
    "aoz-batch": "aoz_node",
    "aoz-py": "aoz_node",
    "aoz-batch-py": "aoz_node",
    "aoz-drop": "aoz_node",
    "nats": "nats_client",
    "zenoh": "zenoh_peer",
    "zenoh-drop": "zenoh_peer",
}
# Receive path only: aoz subscribers fed by the raw zmq.asyncio publisher (same wire bytes),
# so the subscriber's cost is measured apart from aoz's publisher.
RX_SYSTEMS = {"aoz-rx": "iter", "aoz-batch-rx": "batch"}
# Send path only: the aoz publisher feeding the raw zmq.asyncio subscriber.
TX_SYSTEMS = {"aoz-tx"}
# Systems that may lose messages by design (a dropping policy at the publisher). They are
# measured and shown beside their loss, never used as a ratio's baseline.
DROPPING_SYSTEMS = frozenset({"aoz-drop", "zenoh-drop"})
# Lossless settings of every aoz node in a lossless pair: the publisher waits for room
# (XPUB_NODROP) and the subscription's queue stops the reader instead of dropping.
AOZ_LOSSLESS = {"send_policy": "block", "overflow": "block"}
LOSSLESS_IDLE = 3.0  # seconds a lossless subscriber waits for the next frame (else 0.5)
RAW_MODULES = ("zmq_async", "zmq_sync")
_AOZ_DEFAULTS = Settings()


# The "-py" systems run aoz's pure-Python hot path (AOZ_PURE_PYTHON=1 in every process of
# the pair); the others the default one (compiled, where it is built).
def _env_of(system: str) -> dict[str, str]:
    return {"AOZ_PURE_PYTHON": "1" if system.endswith("-py") else "0"}


def _side(module: str, lossless: bool) -> dict[str, Any]:
    """The parameters that make one role lossless (or leave it at its defaults)."""
    if module == "aoz_node":
        return {"settings": dict(AOZ_LOSSLESS)} if lossless else {}
    if module in RAW_MODULES:
        return {"nodrop": lossless}
    if module == "zenoh_peer":
        # lossless: BLOCK congestion control and a FIFO channel (blocks when full);
        # dropping: zenoh's defaults (DROP) and a callback
        return {"congestion": "block", "handler": "fifo"} if lossless else {}
    return {}


def _merge(base: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
    """``base`` updated by ``extra``; aoz ``settings`` are merged key by key."""
    out = {**base, **(extra or {})}
    if "settings" in base and extra and "settings" in extra:
        out["settings"] = {**base["settings"], **extra["settings"]}
    return out


class BenchError(Exception):
    """A role failed, exited early or did not answer in time."""


def _profiled(cmd: list[str], name: str) -> list[str]:
    """``cmd`` under ``perf record`` when ``AOZ_BENCH_PERF`` names a directory (and perf
    is installed): one ``<role>-<action>-<n>.data`` per process, call graphs at 999 Hz
    (``AOZ_BENCH_PERF_HZ`` to change it).
    Read with ``perf report -i FILE --no-children``; Python 3.11 frames show as the
    interpreter's C functions (``_PyEval_EvalFrameDefault``), libzmq, pyzmq and aoz's
    compiled hot path by name."""
    out = os.environ.get("AOZ_BENCH_PERF")
    perf = shutil.which("perf")
    if not out or perf is None:
        return cmd
    Path(out).mkdir(parents=True, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=f"{name}-", suffix=".data", dir=out)
    os.close(fd)
    hz = os.environ.get("AOZ_BENCH_PERF_HZ", "999")  # samples per second
    return [perf, "record", "-q", "-F", hz, "-g", "-o", path, "--", *cmd]


class Proc:
    """One role process; its stdout is read line by line on a thread."""

    def __init__(self, module: str, action: str, p: dict[str, Any]) -> None:
        self.name = f"{module} {action}"
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        p = dict(p)
        env = {**os.environ, **p.pop("env", {})}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env.setdefault("PYTHONUNBUFFERED", "1")
        cmd = [sys.executable, "-m", f"benchmarks.{module}", action, json.dumps(p)]
        self.popen = subprocess.Popen(
            _profiled(cmd, f"{module}-{action}"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            cwd=ROOT,
            env=env,
        )
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def stderr_tail(self, n: int = 1500) -> str:
        self._err.seek(0)
        return self._err.read().decode(errors="replace")[-n:]

    def wait_event(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError(f"{self.name}: no {event!r} within {timeout:.0f} s")
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                self.popen.wait(5)
                raise BenchError(
                    f"{self.name}: exited ({self.popen.returncode}) before {event!r}: "
                    f"{self.stderr_tail()}"
                )
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("event") == event:
                return dict(msg)

    def release(self) -> None:
        """Close stdin: the role's signal to finish."""
        if self.popen.stdin is not None and not self.popen.stdin.closed:
            with contextlib.suppress(OSError):
                self.popen.stdin.close()

    def stop(self, grace: float = 5.0) -> None:
        self.release()
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            self.popen.terminate()
            try:
                self.popen.wait(2)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(2)
        self._thread.join(2)
        self._err.close()


@contextlib.contextmanager
def started(module: str, action: str, p: dict[str, Any]) -> Iterator[Proc]:
    proc = Proc(module, action, p)
    try:
        yield proc
    finally:
        proc.stop()


def free_port() -> int:
    """An ephemeral loopback port for roles that cannot report theirs (zenoh, aoz replies)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------- nats-server
class NatsServer:
    """nats-server on 127.0.0.1 with a random port, for the duration of a run."""

    def __init__(self) -> None:
        # PATH alone decides (no fallback paths), so a run with nats-server taken off PATH
        # behaves exactly like a fresh machine without it.
        self.binary = shutil.which("nats-server")
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.version = ""

    @property
    def available(self) -> bool:
        return self.binary is not None

    def start(self) -> None:
        assert self.binary is not None
        out = subprocess.run([self.binary, "--version"], capture_output=True, timeout=10)
        self.version = out.stdout.decode().strip()
        port = free_port()
        self.proc = subprocess.Popen(
            [self.binary, "-a", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"nats://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise BenchError("nats-server did not start")

    def rss(self) -> int:
        if self.proc is None:
            return 0
        try:
            with open(f"/proc/{self.proc.pid}/statm", "rb") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            return 0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(2)
        self.proc = None


# ---------------------------------------------------------------------------- pairs
def _pair(
    system: str, nats_url: str, lossless: bool
) -> tuple[str, str, str, dict[str, Any], dict[str, Any]]:
    """Publisher module, subscriber module, which role starts first, and the extra
    parameters of each side."""
    if system in RX_SYSTEMS:
        pub_m, sub_m = "zmq_async", "aoz_node"
    elif system in TX_SYSTEMS:
        pub_m, sub_m = "aoz_node", "zmq_async"
    else:
        pub_m = sub_m = MODULES[system]
    lossless = lossless and system not in DROPPING_SYSTEMS
    pub_p, sub_p = _side(pub_m, lossless), _side(sub_m, lossless)
    if lossless:
        # a lossless pair loses nothing, so a shortfall can only be a subscriber that
        # stopped waiting: on a loaded 2-core machine any process can stall for 0.5 s
        # (measured: raw zmq.asyncio pairs too), so it waits longer for the next frame
        sub_p["idle"] = LOSSLESS_IDLE
    # raw sockets get aoz's high-water marks (like with like)
    if pub_m in RAW_MODULES:
        pub_p["hwm"] = _AOZ_DEFAULTS.send_hwm
    if sub_m in RAW_MODULES:
        sub_p["hwm"] = _AOZ_DEFAULTS.recv_hwm
    if system in RX_SYSTEMS:
        sub_p["mode"] = RX_SYSTEMS[system]
    elif system in ("aoz-batch", "aoz-batch-py"):
        sub_p["mode"] = "batch"
    elif system == "aoz-wild":
        sub_p["pattern"] = ">"
    if system == "nats":
        pub_p["url"] = sub_p["url"] = nats_url
        return pub_m, sub_m, "sub", pub_p, sub_p
    if pub_m == "zenoh_peer":
        pub_p["port"] = sub_p["port"] = free_port()
    return pub_m, sub_m, "pub", pub_p, sub_p


def run_pubsub(
    system: str,
    size: int,
    n: int,
    timeout: float,
    nats_url: str = "",
    stall: bool = False,
    sub_extra: dict[str, Any] | None = None,
    pub_extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One publisher and one subscriber process; the result carries sent, received and
    loss. A stalled-subscriber run uses each system's dropping defaults (a lossless
    publisher would wait for the stalled subscriber forever)."""
    pub_module, sub_module, first, pub_p, sub_p = _pair(system, nats_url, not stall)
    env = _env_of(system)
    pub_p = {**_merge(pub_p, pub_extra), "size": size, "n": n, "env": env}
    sub_p = {**_merge(sub_p, sub_extra), "n": n, "deadline": timeout, "env": env}
    pub_action, sub_action = ("stallpub", "stallsub") if stall else ("pub", "sub")
    if first == "pub":
        with started(pub_module, pub_action, pub_p) as pub:
            info = pub.wait_event("ready", 30)
            with started(sub_module, sub_action, {**sub_p, **info}) as sub:
                sub.wait_event("ready", 30)
                if stall:
                    pr = pub.wait_event("result", timeout)
                    sub.release()
                    sr: dict[str, Any] = {}
                else:
                    sr = sub.wait_event("result", timeout + 15)
                    pr = pub.wait_event("result", timeout)
    else:
        with started(sub_module, sub_action, sub_p) as sub:
            info = sub.wait_event("ready", 30)
            with started(pub_module, pub_action, {**pub_p, **info}) as pub:
                pub.wait_event("ready", 30)
                if stall:
                    pr = pub.wait_event("result", timeout)
                    sub.release()
                    sr = {}
                else:
                    sr = sub.wait_event("result", timeout + 15)
                    pr = pub.wait_event("result", timeout)
    if stall:
        mib = 1024 * 1024
        return {
            "sent": pr["sent"],
            "send_s": pr["send_s"],
            "rss_before_mib": pr["rss_before"] / mib,
            "rss_growth_mib": (pr["rss_peak"] - pr["rss_before"]) / mib,
            "rss_after_mib": pr["rss_after"] / mib,
        }
    sent, received = pr["sent"], sr["received"]
    return {
        "msgs_per_s": sr["msgs_per_s"],
        "sent": sent,
        "received": received,
        "lost": sent - received,
        "loss": (sent - received) / sent if sent else 0.0,
        "lossless_config": system not in DROPPING_SYSTEMS,
        "pub_msgs_per_s": sent / pr["send_s"] if pr["send_s"] > 0 else 0.0,
        "blocked_sends": pr.get("blocked_sends", 0),
        # CPU time per message (every thread of the process), where the role measures it
        "sub_cpu_us": sr.get("cpu_us"),
        "pub_cpu_us": pr["send_cpu_s"] * 1e6 / sent if pr.get("send_cpu_s") and sent else None,
        "dropped_queue": sr.get("dropped_queue", 0),
        # aoz subscribers only: frames read, sequence gaps, still queued at the end
        **{k: sr[k] for k in ("messages_in", "lost_in", "pending") if k in sr},
        # aoz roles: each process's CPU seconds (the publisher's over its send loop)
        **({"pub_cpu_s": pr["cpu_s"]} if "cpu_s" in pr else {}),
        **({"sub_cpu_s": sr["cpu_s"]} if "cpu_s" in sr else {}),
        # aoz subscribers asked for them (sub_extra={"marks": k}): the perf_counter time
        # (CLOCK_MONOTONIC, one clock for every process) of every (n // k)-th message
        **({"marks": sr["marks"]} if "marks" in sr else {}),
    }


def run_reqrep(
    system: str, size: int, n_seq: int, n_pipe: int, timeout: float, nats_url: str = ""
) -> dict[str, Any]:
    module = MODULES[system]
    req_p: dict[str, Any] = {
        "size": size,
        "n_seq": n_seq,
        "n_pipe": n_pipe,
        "window": 64,
        "deadline": timeout,
    }
    rep_p: dict[str, Any] = {"env": _env_of(system)}
    req_p["env"] = rep_p["env"]
    if system == "nats":
        rep_p["url"] = req_p["url"] = nats_url
    elif system == "zenoh":
        rep_p["port"] = req_p["port"] = free_port()
    elif system in ("aoz", "aoz-py"):
        bind = f"tcp://127.0.0.1:{free_port()}"
        rep_p["peer"] = req_p["bind"] = bind
    with started(module, "rep", rep_p) as rep:
        info = rep.wait_event("ready", 30)
        info.pop("event", None)
        with started(module, "req", {**req_p, **info}) as req:
            r = req.wait_event("result", timeout + 30)
    return {
        "p50_us": r["p50_us"],
        "p99_us": r["p99_us"],
        "rtps": r["rtps"],
        "rps64": r["pipelined_rps"],
    }


def run_idle(system: str, count: int, nats_url: str = "") -> dict[str, Any]:
    p: dict[str, Any] = {"count": count}
    if system == "nats":
        p["url"] = nats_url
    with started(MODULES[system], "idle", p) as proc:
        r = proc.wait_event("result", 30 + count * 2)
    mib = 1024 * 1024
    sizes = r["rss"]
    per = (sizes[-1] - sizes[0]) / (len(sizes) - 1) / 1024 if len(sizes) > 1 else 0.0
    return {
        "rss_one_mib": sizes[0] / mib,
        "rss_per_extra_kib": per,
        "rss_imports_mib": r["base"] / mib,
    }


def discovery_available() -> bool:
    try:
        return importlib.util.find_spec("benchmarks.discovery") is not None
    except ImportError:
        return False


def run_discovery(n: int, timeout: float) -> dict[str, Any]:
    """``python -m benchmarks.discovery N``: prints JSON with the convergence time."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.discovery", str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        os.killpg(proc.pid, 15)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=5)
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.communicate(timeout=5)
        raise BenchError(f"discovery bench with {n} nodes timed out after {timeout:.0f} s") from exc
    if proc.returncode != 0:
        raise BenchError(f"discovery bench exited {proc.returncode}: {err.decode()[-800:]}")
    data: dict[str, Any] | None = None
    for line in out.decode().splitlines():
        with contextlib.suppress(ValueError):
            obj = json.loads(line)
            if isinstance(obj, dict):
                data = obj
    if data is None:
        raise BenchError(f"discovery bench printed no JSON: {out.decode()[-400:]}")
    seconds = _convergence_seconds(data)
    if seconds is None:
        raise BenchError(f"no convergence time in discovery bench output: {data}")
    return {"seconds": seconds, "raw": data}


def _convergence_seconds(data: dict[str, Any]) -> float | None:
    for key in (
        "converge_s",
        "convergence_s",
        "seconds",
        "converged_s",
        "converge_after_last_s",
        "after_last_start_s",
        "time_s",
    ):
        v = data.get(key)
        if isinstance(v, int | float):
            return float(v)
    for key in ("converge_ms", "convergence_ms", "ms"):
        v = data.get(key)
        if isinstance(v, int | float):
            return float(v) / 1000.0
    return None
