"""Discovery benchmarks: how fast n nodes reach a full mesh, how fast an nsd restart heals.

``python -m benchmarks.discovery N`` starts an embedded nsd and N nodes, each in its
own process, and prints one JSON line::

    {"nodes": 10, "converge_s": 0.21, "mode": "processes"}

``converge_s`` runs from the moment the last node finished starting (its own ``C``
came back) to the moment every node knows every other one (clocks: ``time.time()``
of one host). ``--inprocess`` runs the nodes in this process instead; ``--heal``
also measures an nsd restart (in-process): from the new nsd's start until the old
nodes and a node started after the restart know each other.

From code::

    seconds = await measure_convergence(10)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import AsyncExitStack
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from aoz._discovery.nsd import NamingDaemon
from aoz._mesh.node import Node, connect
from aoz.errors import AozError

__all__ = ["measure_convergence", "measure_convergence_processes", "measure_heal"]

#: discovery timers used by the benchmark (aoz defaults, faster beacons)
BENCH_SETTINGS: dict[str, Any] = {"connect_interval": 0.05, "connect_retries": 400}


async def _wait_full_mesh(nodes: list[Node], timeout: float) -> None:
    everyone = [n.uuid for n in nodes]
    with anyio.fail_after(timeout):
        for node in nodes:
            for uuid in everyone:
                await node.wait_for_peer(uuid, timeout=timeout)


async def measure_convergence(n: int, *, timeout: float = 60.0) -> float:
    """Start an nsd and ``n`` nodes in this process; seconds from last start to full mesh."""
    async with NamingDaemon(port=0) as nsd, AsyncExitStack() as stack:
        nodes: list[Node] = []
        last_start = 0.0

        async def start() -> None:
            nonlocal last_start
            node = await stack.enter_async_context(connect(naming=[nsd.endpoint], **BENCH_SETTINGS))
            nodes.append(node)
            last_start = max(last_start, time.monotonic())

        with anyio.fail_after(timeout):
            async with anyio.create_task_group() as tg:
                for _ in range(n):
                    tg.start_soon(start)
        await _wait_full_mesh(nodes, timeout)
        return time.monotonic() - last_start


async def measure_heal(n: int, *, timeout: float = 60.0) -> float:
    """Restart the nsd under ``n`` nodes, start one more; seconds until all know each other."""
    async with AsyncExitStack() as stack:
        first = NamingDaemon(port=0)
        await first.start()
        port = int(first.endpoint.rsplit(":", 1)[1])
        naming = [first.endpoint]
        nodes = [
            await stack.enter_async_context(connect(naming=naming, **BENCH_SETTINGS))
            for _ in range(n)
        ]
        await _wait_full_mesh(nodes, timeout)
        await first.aclose()
        second = await stack.enter_async_context(NamingDaemon(port=port))
        t0 = time.monotonic()
        nodes.append(await stack.enter_async_context(connect(naming=[second.endpoint])))
        await _wait_full_mesh(nodes, timeout)
        return time.monotonic() - t0


_CHILD = """
import sys, time, anyio, aoz
async def main():
    endpoint, n = sys.argv[1], int(sys.argv[2])
    async with aoz.connect(naming=[endpoint], connect_interval=0.05, connect_retries=400) as node:
        print("started", time.time(), flush=True)
        events = node.peer_events()
        while len(node.peers) < n:
            await events.__anext__()
        print("converged", time.time(), flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)  # until the parent closes stdin
anyio.run(main)
"""


async def measure_convergence_processes(
    n: int, *, timeout: float = 120.0
) -> tuple[float, float, float]:
    """Like :func:`measure_convergence` with every node in its own Python process.

    Returns ``(from_last_start, from_first_start, from_launch)`` in seconds: full mesh
    measured from the last node's start, the first node's start, and process launch.
    """
    async with NamingDaemon(port=0) as nsd, AsyncExitStack() as stack:
        launched = time.time()
        procs: list[Process] = []
        for _ in range(n):
            proc = await anyio.open_process([sys.executable, "-c", _CHILD, nsd.endpoint, str(n)])
            stack.push_async_callback(_reap, proc)
            procs.append(proc)
        started: list[float] = []
        converged: list[float] = []

        async def follow(proc: Process) -> None:
            assert proc.stdout is not None
            buffer = ""
            async for chunk in TextReceiveStream(proc.stdout):
                buffer += chunk
                while "\n" in buffer:
                    line, buffer = buffer.split("\n", 1)
                    kind, stamp = line.split()
                    (started if kind == "started" else converged).append(float(stamp))
                    if kind == "converged":
                        return
            raise AozError(f"a benchmark node exited early with status {await proc.wait()}")

        with anyio.fail_after(timeout):
            async with anyio.create_task_group() as tg:
                for proc in procs:
                    tg.start_soon(follow, proc)
        done = max(converged)
        return done - max(started), done - min(started), done - launched


async def _reap(proc: Process) -> None:
    with anyio.CancelScope(shield=True):
        if proc.stdin is not None:
            await proc.stdin.aclose()  # the child exits when its stdin closes
        with anyio.move_on_after(5):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await proc.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.discovery")
    parser.add_argument("nodes", type=int, help="number of nodes")
    parser.add_argument("--inprocess", action="store_true", help="all nodes in this process")
    parser.add_argument("--heal", action="store_true", help="also measure an nsd restart")
    args = parser.parse_args(argv)

    async def run() -> dict[str, Any]:
        result: dict[str, Any] = {"nodes": args.nodes}
        if args.inprocess:
            result["converge_s"] = await measure_convergence(args.nodes)
            result["mode"] = "inprocess"
        else:
            last, first, launch = await measure_convergence_processes(args.nodes)
            result["converge_s"] = last
            result["from_first_start_s"] = first
            result["from_launch_s"] = launch
            result["mode"] = "processes"
        if args.heal:
            result["nsd_restart_heal_s"] = await measure_heal(args.nodes)
        return result

    print(json.dumps(anyio.run(run)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
