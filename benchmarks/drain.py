"""``python -m benchmarks.drain``: CPU time per frame of the node's receive path.

No sockets and no second process: a stand-in socket hands the data plane's drain
(:meth:`aoz._mesh.receive.Receiver.drain`) ready-made 100 B frames, and
``time.process_time`` measures the drain (routing, sequence check, one Message,
the queue push) and then ``msg.data`` on each queued message. Cases run in
interleaved rounds; the table gives the median ns per frame and the ratios that the
redesign and the delivery work are judged by: wildcard vs exact routing, and the
sequence header's cost. Far less noisy than end-to-end rates on a shared machine,
but it leaves out libzmq and the event loop: ``benchmarks.wildcards`` and
``benchmarks.delivery`` measure those end to end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import zmq

from aoz._mesh.receive import Receiver
from aoz._mesh.routing import RoutingTable
from aoz._mesh.subscription import Subscription
from aoz._protocol.sequence import encode_header
from aoz._protocol.subjects import compile_pattern

SUBJECT = b"BENCH.DATA"
PATTERNS = {"exact": "BENCH.DATA", "tokens": "BENCH.*", ">": ">"}


class _Feed:
    """Stands in for the SUB socket: recv() returns the next frame, then Again."""

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = frames
        self.i = 0

    def recv(self, flags: int = 0) -> bytes:
        i = self.i
        if i >= len(self.frames):
            raise zmq.Again()
        self.i = i + 1
        return self.frames[i]


def measure(pattern: str, sequenced: bool, n: int) -> tuple[float, float]:
    """(drain ns per frame, msg.data ns per message)."""
    routes: RoutingTable[Subscription] = RoutingTable()
    sub = Subscription(compile_pattern(pattern), n + 1, "drop_newest", lambda: None)
    routes.add(sub.pattern, sub)
    plane = Receiver(routes, None, lambda *a: None)  # type: ignore[arg-type]
    body = b"x" * 100
    head = SUBJECT + b"\0\x01\0"
    frames = [head + (encode_header(0, 7, i + 1) if sequenced else b"\0") + body
              for i in range(n)]
    feed = _Feed(frames)
    t0 = time.process_time()
    while feed.i < n:
        plane.drain(feed)  # type: ignore[arg-type]
    t1 = time.process_time()
    for msg in sub._queue:
        _ = msg.data
    t2 = time.process_time()
    assert len(sub._queue) == n and plane.lost == 0
    return (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=200_000)
    args = ap.parse_args(argv)
    cases = [(name, seq) for name in PATTERNS for seq in (False, True)]
    drain: dict[tuple[str, bool], list[float]] = {c: [] for c in cases}
    data: dict[tuple[str, bool], list[float]] = {c: [] for c in cases}
    for _ in range(args.rounds):
        for name, seq in cases:
            d, m = measure(PATTERNS[name], seq, args.n)
            drain[(name, seq)].append(d)
            data[(name, seq)].append(m)
    print(f"{'case':22s} {'drain ns/frame':>15s} {'msg.data ns':>12s}")
    med = {c: statistics.median(v) for c, v in drain.items()}
    for (name, seq), v in med.items():
        print(f"{name + (' +seq' if seq else ''):22s} {v:15.0f} "
              f"{statistics.median(data[(name, seq)]):12.0f}")
    print()
    for seq in (False, True):
        tag = " (sequenced)" if seq else ""
        for name in ("tokens", ">"):
            print(f"{name} / exact throughput{tag}: {med[('exact', seq)] / med[(name, seq)]:.2f}x")
    cost = 100 * (med[("exact", True)] / med[("exact", False)] - 1)
    print(f"sequence header cost, exact: {cost:+.1f}% of the drain's CPU per frame")
    return 0


if __name__ == "__main__":
    sys.exit(main())
