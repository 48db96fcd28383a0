"""Helpers shared by the benchmark roles (each role runs in its own OS process).

A role is started as ``python -m benchmarks.<system> <action> '<params as JSON>'``.
It writes JSON lines on stdout: ``{"event": "ready", ...}`` once it can be used (with
whatever the other side needs, e.g. an endpoint) and ``{"event": "result", ...}`` at
the end. Roles that must outlive their peer (a publisher whose queued messages are still
in flight) wait for the harness to close their stdin ("release"), bounded in time.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import select
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

SUBJECT = "BENCH.DATA"
RR_SUBJECT = "BENCH.RR"
# Reply handle used by the raw baselines: same length as aoz's (SPEC §2).
RAW_UUID = "00000000-0000-4000-8000-000000000000"

_PAGE = os.sysconf("SC_PAGE_SIZE")


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def params(argv: list[str] | None = None) -> tuple[str, dict[str, Any]]:
    args = sys.argv[1:] if argv is None else argv
    action = args[0]
    p: dict[str, Any] = json.loads(args[1]) if len(args) > 1 else {}
    return action, p


def run_role(argv: list[str] | None, actions: dict[str, Callable[[dict[str, Any]], Any]]) -> int:
    """Run the action named on the command line; coroutine results are run with asyncio.

    ``stallpub``/``stallsub`` call the ``pub``/``sub`` action with ``stall=True``.
    """
    action, p = params(argv)
    stall = action in ("stallpub", "stallsub")
    fn = actions.get(action[len("stall"):] if stall else action)
    if fn is None:
        raise SystemExit(f"unknown action {action!r}")
    result = fn(p, stall=True) if stall else fn(p)  # type: ignore[call-arg]
    if inspect.iscoroutine(result):
        asyncio.run(result)
    return 0


def rss() -> int:
    """Resident set size of this process in bytes (cheap: /proc/self/statm)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE


def wire_publish(subject: str, payload: bytes) -> bytes:
    """A publish frame exactly as aoz puts it on the wire for a raw-bytes payload
    (SPEC §1: subject NUL 0x01 NUL, then the codec byte 0x00 and the payload)."""
    return subject.encode() + b"\0\x01\0" + b"\0" + payload


def raw_handle(serial: int) -> bytes:
    return f"_INBOX.{RAW_UUID}.{serial:016x}".encode()


def wire_request(subject: str, handle: bytes, payload: bytes) -> bytes:
    return subject.encode() + b"\0\x02" + handle + b"\0" + b"\0" + payload


def wire_reply(handle: bytes, payload: bytes) -> bytes:
    return handle + b"\0\x03\0" + b"\0" + payload


def wait_release_sync(timeout: float) -> None:
    """Block until the harness closes our stdin (or ``timeout`` seconds pass)."""
    fd = sys.stdin.fileno()
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        r, _, _ = select.select([fd], [], [], remaining)
        if r and not os.read(fd, 4096):
            return


async def wait_release(timeout: float) -> None:
    """Like :func:`wait_release_sync`, but lets the event loop run meanwhile."""
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    fd = sys.stdin.fileno()

    def on_read() -> None:
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        if not data:
            done.set()

    loop.add_reader(fd, on_read)
    try:
        await asyncio.wait_for(done.wait(), timeout)
    except TimeoutError:
        pass
    finally:
        loop.remove_reader(fd)


class Receiver:
    """Counts arrivals and times first-to-last for a throughput subscriber.

    Every subscriber loop does the same per-message bookkeeping: a local count, and a
    call of :meth:`mark` only on the first message, every :data:`MARK_EVERY`-th and
    the ``n``-th (``next_mark`` says when), so no system pays for a clock read per
    message that another does not. ``n`` is what arrived; the rate is taken over the
    marked span (first to last mark). ``cpu_us`` is the process's CPU time (every
    thread: the library's I/O threads too) from the first message to the result,
    per message.
    """

    __slots__ = ("cpu_first", "first", "last", "marked", "n")

    def __init__(self) -> None:
        self.n = 0
        self.marked = 0
        self.first = 0.0
        self.last = 0.0
        self.cpu_first = 0.0

    def mark(self, got: int) -> None:
        """``got`` messages have arrived (the first mark starts the clocks)."""
        now = time.perf_counter()
        if not self.marked:
            self.first = now
            self.cpu_first = time.process_time()
        self.n = self.marked = got
        self.last = now

    def next_mark(self, got: int, expected: int) -> int:
        """The count at which to call :meth:`mark` next: every :data:`MARK_EVERY`-th,
        or more often in a short run (at least 64 marks in ``expected``), so that a
        system that loses the tail still has a span to take its rate over."""
        return min(got + max(1, min(MARK_EVERY, expected // 64)), expected)

    def result(self, expected: int, **extra: Any) -> dict[str, Any]:
        span = self.last - self.first
        rate = (self.marked - 1) / span if self.marked > 1 and span > 0 else 0.0
        cpu = time.process_time() - self.cpu_first if self.marked else 0.0
        return {
            "received": self.n,
            "expected": expected,
            "span_s": span,
            "msgs_per_s": rate,
            "cpu_us": cpu * 1e6 / self.n if self.n else 0.0,
            **extra,
        }


MARK_EVERY = 256


def latency_summary(samples_ns: list[int], total_s: float) -> dict[str, Any]:
    s = sorted(samples_ns)
    n = len(s)
    if n == 0:
        return {"n": 0, "p50_us": 0.0, "p99_us": 0.0, "rtps": 0.0}

    def pct(q: float) -> float:
        return s[min(n - 1, int(q * n))] / 1000.0

    return {"n": n, "p50_us": pct(0.50), "p99_us": pct(0.99), "rtps": n / total_s}


async def measure_requests(
    request: Callable[..., Awaitable[Any]], subject: str, payload: bytes, p: dict[str, Any]
) -> None:
    """Warm up, then time sequential round trips and ``window`` requests in flight, and
    emit the result. ``request(subject, payload, timeout=...)`` is the client's call."""
    for _ in range(p.get("warmup", 200)):
        await request(subject, payload, timeout=2.0)
    clock = time.perf_counter_ns
    samples: list[int] = []
    t0 = time.perf_counter()
    for _ in range(p["n_seq"]):
        t = clock()
        await request(subject, payload, timeout=2.0)
        samples.append(clock() - t)
    seq = latency_summary(samples, time.perf_counter() - t0)

    n, window = p["n_pipe"], p.get("window", 64)
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await request(subject, payload, timeout=5.0)

    t0 = time.perf_counter()
    async with asyncio.timeout(p.get("deadline", 60.0)):
        await asyncio.gather(*(worker() for _ in range(window)))
    pipe_s = time.perf_counter() - t0
    emit("result", **seq, pipelined=n, pipelined_rps=n / pipe_s)
