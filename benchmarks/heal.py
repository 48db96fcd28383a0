"""How fast a long network cut heals (issue #22, item 8): time from the heal to the
first fresh message, after cuts long enough for the peer to expire.

Two naming-mode nodes and an nsd, each run in network namespaces this script creates
(root, ``ip`` and ``nft`` needed; it exits with a message otherwise):

- ``--cut data`` (default): one namespace; nftables drops the two nodes' data ports
  (both directions), naming stays up -- the peer's beacons keep arriving while its
  link is down.
- ``--cut host``: two namespaces joined by a veth pair; the nsd and the publisher in
  one, the subscriber in the other, and the subscriber's namespace drops everything
  from and to the other (data and naming are cut).

A publisher sends ``--rate`` msg/s; the subscriber reports each sequence gap (the
first fresh message after a cut) with its ``CLOCK_MONOTONIC`` time, which is the same
clock in every namespace, and its peer events. Each round: cut for ``--seconds``,
check the subscriber expired the publisher, heal, time the first fresh message, let
the flow settle. Prints min/median/max over ``--rounds`` heals and the load average::

    sudo python -m benchmarks.heal --rounds 5 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SUBJECT = "HEAL.DATA"


def _emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


# ---------------------------------------------------------------- roles (in namespaces)


async def _node(p: dict[str, Any]) -> None:
    import anyio

    import aoz

    async with aoz.connect(naming=[p["nsd"]], publish_address=p["ip"]) as node:
        _emit("ready", uuid=node.uuid, endpoint=node.endpoint)

        async def events() -> None:
            async for ev in node.peer_events(links=True):
                _emit("peer", kind=ev.kind, uuid=ev.peer.uuid, t=time.monotonic())

        async def naming() -> None:
            """Report when naming frames arrive again after a pause (> 1.5 beacons)."""
            count, last = node.statistics().discovery.get("naming_in", 0), time.monotonic()
            while True:
                await anyio.sleep(0.02)
                now, n = time.monotonic(), node.statistics().discovery.get("naming_in", 0)
                if n != count:
                    if now - last > 1.5:
                        _emit("peer", kind="naming_back", uuid="", t=now)
                    count, last = n, now

        async def stop() -> None:
            await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)

        async with anyio.create_task_group() as tg:
            tg.start_soon(events)
            tg.start_soon(naming)
            if p["role"] == "pub":
                await node.wait_for_interest(SUBJECT, timeout=30)
                _emit("subscribed")

                async def publish() -> None:
                    interval = 1.0 / p["rate"]
                    nxt = time.monotonic()
                    while True:
                        await node.publish(SUBJECT, b"x" * 100)
                        nxt += interval
                        await anyio.sleep(max(0.0, nxt - time.monotonic()))

                tg.start_soon(publish)
            else:
                sub = node.subscribe(SUBJECT)

                async def receive() -> None:
                    first = True
                    async for msg in sub:
                        if first:
                            first = False
                            _emit("flowing", t=time.monotonic())
                        if msg.gap:
                            _emit("gap", gap=msg.gap, t=time.monotonic())

                tg.start_soon(receive)
            await stop()
            tg.cancel_scope.cancel()


def _role_main(raw: str) -> None:
    import anyio

    anyio.run(_node, json.loads(raw))


# ---------------------------------------------------------------- harness


def _run(*args: str, stdin: bytes | None = None) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=10, input=stdin)


class _Proc:
    def __init__(self, ns: str, argv: list[str]) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
        self.popen = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, *argv],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env, cwd=ROOT,
        )
        self.seen: list[dict[str, Any]] = []
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def event(self, name: str, timeout: float = 30.0) -> dict[str, Any]:
        """The next event called ``name`` (blocking, bounded); every event read is kept
        in :attr:`seen`."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                err = self.popen.stderr.read() if self.popen.stderr else ""
                raise RuntimeError(f"role exited before {name!r}: {err[-2000:]}")
            ev: dict[str, Any] = json.loads(line)
            self.seen.append(ev)
            if ev["event"] == name:
                return ev
        raise TimeoutError(f"no {name!r} within {timeout} s")

    def drain(self) -> None:
        """Move every event read so far into :attr:`seen` (no waiting)."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return
            if line is not None:
                self.seen.append(json.loads(line))

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def close(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=10)


@contextmanager
def _proc(ns: str, argv: list[str]) -> Iterator[_Proc]:
    p = _Proc(ns, argv)
    try:
        yield p
    finally:
        p.close()


@contextmanager
def _namespaces(cut: str) -> Iterator[tuple[str, str, str, str]]:
    """(ns of nsd+pub, ns of sub, ip of nsd+pub, ip of sub)."""
    tag = uuid.uuid4().hex[:6]
    a, b = f"aozh-{tag}a", f"aozh-{tag}b"
    made: list[str] = []
    try:
        for ns in (a, b) if cut == "host" else (a,):
            _run("ip", "netns", "add", ns)
            made.append(ns)
            _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        if cut != "host":
            yield a, a, "127.0.0.1", "127.0.0.1"
            return
        va, vb = f"vh{tag}a", f"vh{tag}b"
        _run("ip", "link", "add", va, "netns", a, "type", "veth", "peer", "name", vb,
             "netns", b)
        _run("ip", "netns", "exec", a, "ip", "addr", "add", "10.77.0.1/24", "dev", va)
        _run("ip", "netns", "exec", b, "ip", "addr", "add", "10.77.0.2/24", "dev", vb)
        _run("ip", "netns", "exec", a, "ip", "link", "set", va, "up")
        _run("ip", "netns", "exec", b, "ip", "link", "set", vb, "up")
        yield a, b, "10.77.0.1", "10.77.0.2"
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def _nft(ns: str, script: str) -> None:
    _run("ip", "netns", "exec", ns, "nft", "-f", "-", stdin=script.encode())


def _port(endpoint: str) -> str:
    return endpoint.rsplit(":", 1)[1]


def measure(rounds: int, seconds: float, rate: int, cut: str, settle: float) -> list[float]:
    heals: list[float] = []
    with ExitStack() as stack:
        ns_a, ns_b, ip_a, ip_b = stack.enter_context(_namespaces(cut))
        nsd_port = "5756"
        nsd = stack.enter_context(_proc(ns_a, ["-m", "aoz._discovery.nsd", "--bind", ip_a,
                                               "--port", nsd_port, "--log-level", "WARNING"]))
        del nsd
        naming = f"tcp://{ip_a}:{nsd_port}"
        time.sleep(0.5)  # the nsd binds at once; nodes retry their naming connection anyway
        common = {"nsd": naming, "rate": rate}
        pub = stack.enter_context(_proc(ns_a, ["-m", "benchmarks.heal", "--role", json.dumps(
            {**common, "role": "pub", "ip": ip_a})]))
        pub_ready = pub.event("ready")
        sub = stack.enter_context(_proc(ns_b, ["-m", "benchmarks.heal", "--role", json.dumps(
            {**common, "role": "sub", "ip": ip_b})]))
        sub_ready = sub.event("ready")
        pub.event("subscribed")
        sub.event("flowing")
        if cut == "host":
            rule = f"ip saddr {ip_a} drop"
            out_rule = f"ip daddr {ip_a} drop"
        else:
            ports = "{ " + _port(pub_ready["endpoint"]) + ", " + _port(sub_ready["endpoint"]) + " }"
            rule = f"tcp dport {ports} drop\n tcp sport {ports} drop"
            out_rule = ""
        relapses = 0
        time.sleep(settle)
        for n in range(rounds):
            sub.drain()
            sub.seen.clear()
            _nft(ns_b, f"""
                table inet aozheal {{
                    chain input {{
                        type filter hook input priority 0;
                        {rule}
                    }}
                    chain output {{
                        type filter hook output priority 0;
                        {out_rule}
                    }}
                }}
            """)
            cut_at = time.monotonic()
            time.sleep(seconds)
            healed = time.monotonic()  # before the rule goes: the figure errs long
            _nft(ns_b, "delete table inet aozheal")
            try:
                gap = sub.event("gap", timeout=max(15.0, 2 * seconds))
            except TimeoutError:  # TCP carried it through: nothing was lost
                print(f"round {n + 1}: no loss (the connection outlived the cut)", flush=True)
                continue
            time.sleep(settle)  # the flow must keep going after the heal
            sub.drain()
            expired = [e for e in sub.seen if e["event"] == "peer" and e["kind"] == "expired"
                       and e["uuid"] == pub_ready["uuid"] and cut_at <= e["t"] <= healed]
            events = [f"{e.get('kind', e['event'])}@{e['t'] - cut_at:.2f}" for e in sub.seen
                      if e["event"] in ("peer", "gap") and e["t"] >= cut_at]
            later = [e for e in sub.seen if e["event"] == "gap" and e["t"] > gap["t"]]
            relapses += len(later)
            heal = gap["t"] - healed
            heals.append(heal)
            print(f"round {n + 1}: fresh data {heal:.3f} s after the heal (gap {gap['gap']}); "
                  f"expired during the cut: {bool(expired)}; gaps after the first: "
                  f"{[e['gap'] for e in later]}; sub's events (s after the cut): "
                  f"{' '.join(events)}", flush=True)
        print(f"gaps after a heal's first fresh message: {relapses}")
        for proc in (sub, pub):
            assert proc.popen.stdin is not None
            proc.popen.stdin.close()
    return heals


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each cut")
    ap.add_argument("--rate", type=int, default=1000, help="messages per second")
    ap.add_argument("--cut", choices=("data", "host"), default="data")
    ap.add_argument("--settle", type=float, default=3.0, help="flow before each cut, s")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.role:
        _role_main(args.role)
        return 0
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nft"):
        print("skipped: needs root, iproute2 (ip) and nftables (nft)")
        return 0
    load = os.getloadavg()
    heals = measure(args.rounds, args.seconds, args.rate, args.cut, args.settle)
    load_after = os.getloadavg()
    if not heals:
        print(f"no round lost data: {args.seconds:g} s cuts are too short to measure")
        return 0
    print(f"heal after {args.seconds:g} s cuts ({args.cut}), {len(heals)} rounds, "
          f"{args.rate} msg/s: min {min(heals):.3f} s, median {statistics.median(heals):.3f} s, "
          f"max {max(heals):.3f} s; load average {load[0]:.2f} before, "
          f"{load_after[0]:.2f} after ({os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
