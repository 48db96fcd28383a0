"""``aoz bench``: measure *your* mesh, in the style of ``nats bench``.

Publishers and subscribers are nodes in this process that join your mesh like any
other program (naming daemon, broker or UDP settings as for every verb), so the
figures include your network and discovery setup. Throughput counts messages per
second at the publishers and at each subscriber; latency is the time from
``publish`` to a subscriber's ``async for`` (one clock: everything runs here), or
with ``--request`` the round trip of sequential requests answered by ``--sub``
responders sharing a queue group.

The repository's comparison suite (aoz against raw ZeroMQ, nats.py and zenoh) is
``python -m benchmarks`` in a clone, not this.
"""

import statistics
import struct
import time
import uuid
from contextlib import AsyncExitStack
from typing import Annotated, Any

import anyio
import msgspec
import typer

import aoz.cli._common as c

EXAMPLES = """Examples:

  aoz bench BENCH.test --pub 1 --sub 1 --msgs 100000 --size 128

  aoz bench BENCH.test --pub 2 --sub 4 --msgs 1000000 --size 16 --no-progress

  aoz bench BENCH.rpc --request --sub 3 --msgs 5000      # request/reply, 3 responders

  aoz bench BENCH.test --json > result.json"""

_STAMP = struct.Struct("<q")


class Result(msgspec.Struct, kw_only=True):
    """What ``aoz bench --json`` prints."""

    mode: str
    subject: str
    publishers: int
    subscribers: int
    messages: int
    size: int
    seconds: float
    pub_msgs_per_s: float
    sub_msgs_per_s: list[float]
    received: list[int]
    lost: int
    latency_us: dict[str, float]


def _percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {}
    s = sorted(samples)

    def q(p: float) -> float:
        return s[min(len(s) - 1, int(p * len(s)))]

    return {
        "min": s[0], "p50": q(0.50), "p90": q(0.90), "p99": q(0.99),
        "p99.9": q(0.999), "max": s[-1], "mean": statistics.fmean(s),
    }  # fmt: skip


def _progress(enabled: bool, total: int, what: str) -> Any:
    if not enabled:
        return None
    from .pubsub import progress_bar

    bar = progress_bar(total, what)
    bar.start()
    return bar


async def pubsub(
    conn: dict[str, Any], subject: str, pubs: int, subs: int, msgs: int, size: int,
    progress: bool, idle: float,
) -> Result:  # fmt: skip
    run = uuid.uuid4().hex[:8]
    per_pub = [msgs // pubs + (1 if i < msgs % pubs else 0) for i in range(pubs)]
    body = b"\0" * max(size - _STAMP.size, 0)
    received = [0] * subs
    latencies: list[list[float]] = [[] for _ in range(subs)]
    first_last: list[list[float]] = [[0.0, 0.0] for _ in range(subs)]
    expected = msgs * 1
    async with AsyncExitStack() as stack:
        sub_nodes = [
            await stack.enter_async_context(c.open_node({**conn, "program": "aoz-bench-sub"}))
            for _ in range(subs)
        ]
        pub_nodes = [
            await stack.enter_async_context(c.open_node({**conn, "program": "aoz-bench-pub"}))
            for _ in range(pubs)
        ]
        subscriptions = [
            await stack.enter_async_context(n.subscribe(subject, queue_size=max(msgs, 1024)))
            for n in sub_nodes
        ]
        ready = [
            await stack.enter_async_context(n.subscribe(f"BENCH.ready.{run}.{i}"))
            for i, n in enumerate(sub_nodes)
        ]
        for p in pub_nodes:  # every subscriber has reached every publisher
            for i in range(subs):
                await p.wait_for_interest(f"BENCH.ready.{run}.{i}", timeout=10)
        for r in ready:
            await r.aclose()
        bar = _progress(progress, expected * subs, f"{subject}: {pubs} pub, {subs} sub")
        pub_seconds: list[float] = []

        async def consume(i: int) -> None:
            sub = subscriptions[i]
            lat = latencies[i]
            now = time.perf_counter_ns
            with anyio.move_on_after(idle) as scope:
                async for m in sub:
                    t = now()
                    if received[i] == 0:
                        first_last[i][0] = t / 1e9
                    first_last[i][1] = t / 1e9
                    received[i] += 1
                    lat.append((t - _STAMP.unpack_from(m.data)[0]) / 1000)
                    if bar is not None and received[i] % 1000 == 0:
                        bar.advance(bar.task_ids[0], 1000)
                    if received[i] >= expected:
                        break
                    scope.deadline = anyio.current_time() + idle

        async def produce(node: Any, n: int) -> None:
            start = time.perf_counter()
            pack, now = _STAMP.pack, time.perf_counter_ns
            for _ in range(n):
                await node.publish(subject, pack(now()) + body)
            pub_seconds.append(time.perf_counter() - start)

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(subs):
                tg.start_soon(consume, i)
            async with anyio.create_task_group() as ptg:
                for node, n in zip(pub_nodes, per_pub, strict=True):
                    ptg.start_soon(produce, node, n)
        seconds = time.perf_counter() - t0
        if bar is not None:
            bar.stop()
    sub_rates = [
        (received[i] / (first_last[i][1] - first_last[i][0]))
        if received[i] > 1 and first_last[i][1] > first_last[i][0]
        else 0.0
        for i in range(subs)
    ]
    return Result(
        mode="pubsub", subject=subject, publishers=pubs, subscribers=subs, messages=msgs,
        size=size, seconds=seconds, pub_msgs_per_s=msgs / max(max(pub_seconds, default=0), 1e-9),
        sub_msgs_per_s=sub_rates, received=received, lost=expected * subs - sum(received),
        latency_us=_percentiles([x for lat in latencies for x in lat]),
    )  # fmt: skip


async def reqrep(
    conn: dict[str, Any], subject: str, clients: int, servers: int, msgs: int, size: int,
    progress: bool, timeout: float,
) -> Result:  # fmt: skip
    from .. import queues

    group = f"bench-{uuid.uuid4().hex[:8]}"
    body = b"\0" * size
    per_client = [msgs // clients + (1 if i < msgs % clients else 0) for i in range(clients)]
    served = [0] * servers
    rtts: list[float] = []
    lost = 0
    async with AsyncExitStack() as stack:
        srv_nodes = [
            await stack.enter_async_context(c.open_node({**conn, "program": "aoz-bench-reply"}))
            for _ in range(servers)
        ]
        cli_nodes = [
            await stack.enter_async_context(c.open_node({**conn, "program": "aoz-bench-req"}))
            for _ in range(clients)
        ]
        subs = [
            await stack.enter_async_context(queues.subscribe(n, subject, group)) for n in srv_nodes
        ]
        for n in cli_nodes:
            await queues.wait_for_members(n, subject, group, servers, timeout=10)
        bar = _progress(progress, msgs, f"{subject}: {clients} req, {servers} reply")

        async def serve(i: int) -> None:
            async for m in subs[i]:
                served[i] += 1
                await m.respond(m.data)

        async def client(node: Any, n: int) -> None:
            nonlocal lost
            for _ in range(n):
                t = time.perf_counter_ns()
                try:
                    await queues.request(node, subject, body, timeout=timeout)
                except Exception:  # a timeout: counted as lost
                    lost += 1
                    continue
                rtts.append((time.perf_counter_ns() - t) / 1000)
                if bar is not None:
                    bar.advance(bar.task_ids[0], 1)

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(servers):
                tg.start_soon(serve, i)
            async with anyio.create_task_group() as ctg:
                for node, n in zip(cli_nodes, per_client, strict=True):
                    ctg.start_soon(client, node, n)
            tg.cancel_scope.cancel()
        seconds = time.perf_counter() - t0
        if bar is not None:
            bar.stop()
    return Result(
        mode="request", subject=subject, publishers=clients, subscribers=servers,
        messages=msgs, size=size, seconds=seconds, pub_msgs_per_s=len(rtts) / seconds,
        sub_msgs_per_s=[s / seconds for s in served], received=served, lost=lost,
        latency_us=_percentiles(rtts),
    )  # fmt: skip


def _report(r: Result) -> None:
    from rich.table import Table

    con = c.console()
    what = "requests" if r.mode == "request" else "messages"
    con.print(
        f"[bold]aoz bench[/bold] {r.subject}: {r.messages:,} {what} of {r.size} B, "
        f"{r.publishers} {'requester' if r.mode == 'request' else 'publisher'}(s), "
        f"{r.subscribers} {'responder' if r.mode == 'request' else 'subscriber'}(s), "
        f"{r.seconds:.2f} s"
    )
    t = Table(title="throughput")
    t.add_column("side")
    t.add_column("msgs/s", justify="right")
    t.add_column("MiB/s", justify="right")
    t.add_column("messages", justify="right")
    mib = r.size / 2**20
    label = "requests (all)" if r.mode == "request" else "publishers (all)"
    t.add_row(
        label, f"{r.pub_msgs_per_s:,.0f}", f"{r.pub_msgs_per_s * mib:,.1f}", f"{r.messages:,}"
    )
    for i, (rate, n) in enumerate(zip(r.sub_msgs_per_s, r.received, strict=True)):
        side = "responder" if r.mode == "request" else "subscriber"
        t.add_row(f"{side} {i + 1}", f"{rate:,.0f}", f"{rate * mib:,.1f}", f"{n:,}")
    con.print(t)
    if r.latency_us:
        lt = Table(title="round trip (µs)" if r.mode == "request" else "publish to receive (µs)")
        for k in r.latency_us:
            lt.add_column(k, justify="right")
        lt.add_row(*(f"{v:,.0f}" for v in r.latency_us.values()))
        con.print(lt)
    # natscli's summary lines, which scripts and people grep for
    con.print(f"Pub stats: {r.pub_msgs_per_s:,.0f} msgs/sec ~ "
              f"{r.pub_msgs_per_s * r.size / 1e6:,.2f} MB/sec")
    if r.sub_msgs_per_s:
        total = sum(r.sub_msgs_per_s)
        con.print(f"Sub stats: {total:,.0f} msgs/sec ~ {total * r.size / 1e6:,.2f} MB/sec")
    if r.lost:
        con.print(f"[yellow]{r.lost:,} {what} lost[/yellow]")


async def bench(
    conn: dict[str, Any], subject: str, *, pubs: int, subs: int, msgs: int, size: int,
    request: bool, progress: bool, as_json: bool, timeout: float,
) -> int:  # fmt: skip
    c.check_subject(subject, "bench")
    if request:
        result = await reqrep(conn, subject, pubs, max(subs, 1), msgs, size, progress, timeout)
    else:
        result = await pubsub(conn, subject, pubs, subs, msgs, size, progress, idle=timeout)
    if as_json:
        c.write(msgspec.json.encode(result) + b"\n")
    else:
        _report(result)
    return 1 if result.lost else 0


def register(app: typer.Typer) -> None:
    @app.command("bench", epilog=EXAMPLES)
    def _bench(
        subject: Annotated[str, typer.Argument(help="Subject to benchmark on.")] = "BENCH.aoz",
        pubs: Annotated[int, typer.Option("--pub", min=1, help="Publishers (requesters).")] = 1,
        subs: Annotated[int, typer.Option("--sub", min=0, help="Subscribers (responders).")] = 1,
        msgs: Annotated[
            int, typer.Option("--msgs", min=1, help="Messages (requests) in total.")
        ] = 100_000,
        size: Annotated[
            int, typer.Option("--size", min=8, help="Message size, bytes (>= 8).")
        ] = 128,
        request: Annotated[
            bool, typer.Option("--request", help="Request/reply round trips instead of pub/sub.")
        ] = False,
        timeout: Annotated[
            float,
            typer.Option(
                "--timeout", min=0.01, help="Request timeout / idle end of a subscriber, s."
            ),
        ] = 2.0,
        progress: Annotated[
            bool | None,
            typer.Option(
                "--progress/--no-progress", help="Progress bar on stderr (default: on a terminal)."
            ),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
        log_level: c.LogLevel = None,
        naming: c.Naming = None,
        static_bind: c.StaticBind = None,
        static_connect: c.StaticConnect = None,
        config: c.Config = None,
        connect_timeout: c.ConnectTimeout = None,
    ) -> None:
        """Measure your mesh: msgs/s and latency percentiles for SUBJECT (as nats bench).

        Exit status 1 when messages or requests were lost.
        """
        import sys

        if not request and subs < 1:
            raise typer.BadParameter("pub/sub needs --sub 1 or more", param_hint="--sub")
        conn = c.Conn(naming, static_bind, static_connect, config, connect_timeout).kwargs("bench")
        conn.pop("linger", None)
        show = sys.stderr.isatty() if progress is None else progress
        c.run(bench(conn, subject, pubs=pubs, subs=subs, msgs=msgs, size=size, request=request,
                    progress=show and not as_json, as_json=as_json, timeout=timeout))  # fmt: skip
