"""``python -m benchmarks.scale [--patterns N] [--streams N]``: what scale costs.

The bounds in ``aoz/_protocol/sequence.py``, ``aoz/_protocol/builder.py`` and
``aoz/_mesh/sockopts.py`` (issue #22), measured:

- **Subscribing N patterns** (default 10,000) on one node, exact subjects and token
  wildcards: the time of the ``subscribe`` calls, the Python memory they hold
  (tracemalloc), the time until every filter has reached the node's own publisher
  (self-delivery: the same path a peer's publisher sees), the cost of routing the
  first frame of a subject through N wildcards (later frames hit the routing cache),
  and the time to close them all.
- **Tracking N streams** (default 100,000): the memory of a subscriber's
  ``SequenceTracker`` holding N (subject, publisher) streams, and of a publisher's
  ``FrameBuilder`` numbering N subjects (header cache bounded at 8,192; every
  subject's counter kept). Per-stream bytes give the memory at the tracker's bound.

Results go to stdout and ``benchmarks/out/scale.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

import aoz
from aoz._protocol.builder import FrameBuilder
from aoz._protocol.sequence import SequenceTracker

OUT = Path(__file__).resolve().parent / "out"


def _held(build: Callable[[], object]) -> tuple[int, object]:
    """Bytes of Python memory still held by what ``build`` returns."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = build()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return after - before, kept


async def subscribing(n: int, kind: str) -> dict[str, Any]:
    patterns = [f"SCALE.{i}" if kind == "exact" else f"SCALE.{i}.*" for i in range(n)]
    async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
        subs: list[aoz.Subscription] = []
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        t0 = time.perf_counter()
        for p in patterns:
            subs.append(node.subscribe(p))
        calls = time.perf_counter() - t0
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        # every filter at the node's own publisher (as at a peer's)
        wanted = n + 1  # and the inbox
        with anyio.fail_after(60):
            while len(node.interest) < wanted:
                await node.interest_changed(timeout=1.0)
        reached = time.perf_counter() - t0
        probe = b"SCALE.%d.x" % (n - 1) if kind != "exact" else b"SCALE.%d" % (n - 1)
        routes = node._routes
        t1 = time.perf_counter()
        rounds = 20
        for _ in range(rounds):
            routes.cache.clear()
            routes.route(probe)
        first_route = (time.perf_counter() - t1) / rounds
        t2 = time.perf_counter()
        for s in subs:
            await s.aclose()
        closed = time.perf_counter() - t2
    return {
        "kind": kind,
        "patterns": n,
        "subscribe_s": round(calls, 3),
        "per_subscribe_us": round(calls / n * 1e6, 1),
        "held_MiB": round(held / 2**20, 2),
        "held_bytes_per_pattern": held // n,
        "all_filters_at_publisher_s": round(reached, 3),
        "first_frame_route_ms": round(first_route * 1e3, 3),
        "unsubscribe_s": round(closed, 3),
    }


def tracking(n: int) -> dict[str, Any]:
    subjects = [b"MD.EXCH.SYM%06d" % i for i in range(n)]  # 16-byte subjects

    def tracker() -> SequenceTracker:
        t = SequenceTracker()
        for i, s in enumerate(subjects):
            t.check(s, 0x1234567890ABCDEF, i + 1000, 0.0)
        return t

    t_bytes, t = _held(tracker)
    assert isinstance(t, SequenceTracker) and t.count == n

    def builder() -> FrameBuilder:
        fb = FrameBuilder(aoz.Codec.MSGPACK, publisher=0x1234567890ABCDEF)
        for s in subjects:
            fb.publish(s.decode(), b"x")
        return fb

    b_bytes, _ = _held(builder)
    per_stream = t_bytes / n
    return {
        "streams": n,
        "tracker_MiB": round(t_bytes / 2**20, 2),
        "tracker_bytes_per_stream": int(per_stream),
        "tracker_MiB_at_bound": round(per_stream * SequenceTracker().max_streams / 2**20, 1),
        "builder_MiB": round(b_bytes / 2**20, 2),
        "builder_bytes_per_subject": int(b_bytes / n),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--patterns", type=int, default=10_000)
    ap.add_argument("--streams", type=int, default=100_000)
    args = ap.parse_args(argv)
    out: dict[str, Any] = {"hot_path": aoz.hot_path(), "subscribe": [], "track": None}
    for kind in ("exact", "tokens"):
        res = anyio.run(subscribing, args.patterns, kind)
        out["subscribe"].append(res)
        print(
            f"subscribe {res['patterns']:,} {kind:6}: {res['subscribe_s']:.2f} s "
            f"({res['per_subscribe_us']} us each), {res['held_MiB']} MiB held "
            f"({res['held_bytes_per_pattern']} B each), all filters at the publisher after "
            f"{res['all_filters_at_publisher_s']:.2f} s, first frame of a subject routed "
            f"in {res['first_frame_route_ms']} ms; closing them {res['unsubscribe_s']:.2f} s"
        )
    res = tracking(args.streams)
    out["track"] = res
    print(
        f"track {res['streams']:,} streams: tracker {res['tracker_MiB']} MiB "
        f"({res['tracker_bytes_per_stream']} B each; {res['tracker_MiB_at_bound']} MiB at "
        f"its bound of {SequenceTracker().max_streams:,}), publisher numbering "
        f"{res['builder_MiB']} MiB ({res['builder_bytes_per_subject']} B per subject)"
    )
    OUT.mkdir(exist_ok=True)
    (OUT / "scale.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
