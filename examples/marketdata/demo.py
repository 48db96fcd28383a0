"""``make demo`` (``python -m examples.marketdata``): the whole pipeline on one machine.

What runs, all in this process, all on loopback:

1. an embedded naming daemon on an ephemeral port;
2. a simulated market-data **feed** publishing quotes and trades for a few dozen symbols on
   ``MD.<venue>.<symbol>`` (:mod:`examples.marketdata.feed`);
3. **wildcard subscribers**: ``MD.XNYS.*`` (one venue) and ``MD.*.AAPL`` (one symbol);
4. a **snapshot service** answering ``SNAPSHOT.<symbol>`` requests with the last quote;
5. the **recorder** writing ``MD.>`` to Parquet under ``<out>/recording``;
6. a Spark **Structured Streaming** job reading the recording as it grows, computing
   1-second OHLCV/VWAP bars per symbol, and publishing them back as ``BARS.<symbol>``
   through the ``aoz`` sink (its sidecar lives on the pipeline node);
7. a **dashboard** subscribing to ``BARS.>`` (duplicates dropped by
   :class:`~aoz.spark.delivery.Deduplicator`), printing the bars (a rich table in a terminal)
   and measuring the publish-to-bar latency; at the end it draws one symbol's bars to
   ``<out>/bars_<SYMBOL>.png`` and writes every bar to ``<out>/bars.csv``.

Options: ``--duration`` (seconds of live feed after Spark is up, default 30),
``--symbols`` (how many, default 24), ``--out`` (default ``demo-output``), ``--rate``
(events per second, default 2000), ``--master`` (Spark master, default ``local[2]``).
Exit status 0 when bars came back and the chart was written; 1 with a hint when no bar
arrived for the live feed (by ``--last-bar-wait`` seconds, default 20, after it stopped:
the first micro-batch of a cold JVM can take longer than the whole live phase on a busy
machine).
"""

from __future__ import annotations

import argparse
import csv
import logging
import shutil
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import msgspec

from .feed import DEFAULT_SYMBOLS, Bar, MarketSimulator, Quote, Trade, decode_event, run_feed

__all__ = ["main"]

log = logging.getLogger("aoz.demo")

WINDOW = "1 second"
WATERMARK = "500 milliseconds"
TRIGGER = "500 milliseconds"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m examples.marketdata", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--duration",
        type=float,
        default=30.0,
        help="seconds of live feed once the Spark job runs (default 30)",
    )
    p.add_argument(
        "--symbols",
        type=int,
        default=24,
        help=f"number of symbols, 1..{len(DEFAULT_SYMBOLS)} (default 24)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("demo-output"),
        help="output directory (default demo-output/)",
    )
    p.add_argument("--rate", type=float, default=2000.0, help="feed events per second")
    p.add_argument("--master", default="local[2]", help="Spark master URL (default local[2])")
    p.add_argument(
        "--last-bar-wait",
        type=float,
        default=20.0,
        help="once the feed stopped, wait up to this many seconds for its last bars "
        "(default 20)",
    )
    p.add_argument(
        "--spark-timeout",
        type=float,
        default=180.0,
        help="give up when Spark is not running after this many seconds",
    )
    args = p.parse_args(argv)
    if not 1 <= args.symbols <= len(DEFAULT_SYMBOLS):
        p.error(f"--symbols must be within 1..{len(DEFAULT_SYMBOLS)}")
    if args.duration <= 0 or args.rate <= 0:
        p.error("--duration and --rate must be > 0")
    return args


class Dashboard:
    """Collects bars and counters; renders a rich table or plain progress lines."""

    def __init__(self, symbols: Sequence[str], chart_symbol: str) -> None:
        self.symbols = list(symbols)
        self.chart_symbol = chart_symbol
        self.latest: dict[str, Bar] = {}
        self.bars: list[tuple[Bar, float]] = []  # (bar, received_at)
        self.latency: list[float] = []  # received_at - last trade's send time
        self.close_latency: list[float] = []  # received_at - window end
        self.counts: dict[str, int] = {}
        self.snapshots: list[str] = []
        self.notes: list[str] = []
        self.commits = 0
        self.started = time.monotonic()
        self.first_bar_at: float | None = None  # time.time() the first bar arrived
        self.batches: list[tuple[int, int, dict[str, int]]] = []  # Spark progress
        self._target: tuple[float, anyio.Event] | None = None

    async def wait_for_bar_ending_after(self, t: float) -> None:
        if any(b.end.timestamp() >= t for b, _ in self.bars[-500:]):
            return
        event = anyio.Event()
        self._target = (t, event)
        await event.wait()

    def note(self, text: str, echo: bool = True) -> None:
        self.notes.append(text)
        if echo:
            print(f"[{time.monotonic() - self.started:5.1f}s] {text}", flush=True)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def add_bar(self, bar: Bar, received_at: float) -> None:
        self.latest[bar.symbol] = bar
        self.bars.append((bar, received_at))
        if self.first_bar_at is None:
            self.first_bar_at = received_at
        if bar.last_ts is not None:
            self.latency.append(received_at - bar.last_ts.timestamp())
        self.close_latency.append(received_at - bar.end.timestamp())
        if self._target is not None and bar.end.timestamp() >= self._target[0]:
            self._target[1].set()
            self._target = None

    def status(self) -> str:
        c = self.counts
        lat = f"{statistics.median(self.latency[-200:]):.2f} s" if self.latency else "-"
        return (
            f"[{time.monotonic() - self.started:5.1f}s] feed {c.get('published', 0):,} | "
            f"XNYS.* {c.get('venue', 0):,} | *.AAPL {c.get('aapl', 0):,} | "
            f"recorded {c.get('recorded', 0):,} rows/{c.get('files', 0)} files | "
            f"bars {len(self.bars):,} | publish->bar median {lat}"
        )

    def table(self) -> Any:
        from rich.console import Group
        from rich.table import Table

        t = Table(title="BARS.<symbol> (1 s OHLCV/VWAP from Spark)", expand=False)
        for col in ("symbol", "start", "open", "high", "low", "close", "volume", "vwap", "trades"):
            t.add_column(col, justify="left" if col in ("symbol", "start") else "right")
        for sym in sorted(self.latest)[:30]:
            b = self.latest[sym]
            t.add_row(
                sym,
                b.start.strftime("%H:%M:%S"),
                f"{b.open:.2f}",
                f"{b.high:.2f}",
                f"{b.low:.2f}",
                f"{b.close:.2f}",
                f"{b.volume:,}",
                f"{b.vwap:.3f}",
                str(b.trades),
            )
        lines = [self.status(), *self.snapshots[-2:], *self.notes[-3:]]
        return Group(t, *lines)


# ------------------------------------------------------------------------ mesh programs
async def snapshot_service(node: Any, dash: Dashboard) -> None:
    """Keeps the last quote per symbol; answers ``SNAPSHOT.<symbol>`` requests."""
    last: dict[str, bytes] = {}

    async def track() -> None:
        async with node.subscribe("MD.>") as sub:
            async for batch in sub.batches(1024):
                for msg in batch:
                    try:
                        event = decode_event(msg.data)
                    except msgspec.ValidationError:
                        continue
                    if isinstance(event, Quote):
                        last[event.symbol] = msg.data

    async def answer() -> None:
        async with node.subscribe("SNAPSHOT.*") as requests:
            async for req in requests:
                symbol = req.subject.split(".", 1)[1]
                quote = last.get(symbol)
                if quote is None:
                    await req.respond({"error": f"no quote for {symbol} yet"})
                else:
                    await req.respond(msgspec.msgpack.decode(quote, type=Quote))
                dash.count("snapshots served")

    async with anyio.create_task_group() as tg:
        tg.start_soon(track)
        tg.start_soon(answer)


async def wildcard_subscribers(node: Any, dash: Dashboard) -> None:
    async def count(pattern: str, name: str) -> None:
        async with node.subscribe(pattern) as sub:
            async for batch in sub.batches(1024):
                dash.count(name, len(batch))

    async with anyio.create_task_group() as tg:
        tg.start_soon(count, "MD.XNYS.*", "venue")
        tg.start_soon(count, "MD.*.AAPL", "aapl")


async def ask_snapshots(node: Any, dash: Dashboard, symbols: Sequence[str]) -> None:
    from aoz.errors import RequestError

    i = 0
    while True:
        await anyio.sleep(2.0)
        symbol = symbols[i % len(symbols)]
        i += 1
        try:
            reply = await node.request(f"SNAPSHOT.{symbol}", timeout=1.0)
        except RequestError as exc:
            dash.snapshots.append(f"snapshot {symbol}: {exc}")
            continue
        q = reply.decode()
        if "bid" in q:
            dash.snapshots.append(
                f"snapshot {symbol}: bid {q['bid']:.2f} x {q['bid_size']} / "
                f"ask {q['ask']:.2f} x {q['ask_size']} on {q['venue']} (request/reply)"
            )
        else:
            dash.snapshots.append(f"snapshot {symbol}: {q.get('error')}")


async def bar_consumer(sub: Any, dash: Dashboard) -> None:
    from aoz.spark.delivery import Deduplicator

    dedup: Deduplicator[Any] = Deduplicator()
    async for msg in sub:
        released = dedup.feed(msg)
        if msg.subject.endswith("._COMMIT"):
            dash.commits += 1
        for row in released:
            try:
                bar = row.decode(Bar)
            except msgspec.ValidationError:
                continue
            dash.add_bar(bar, row.received_at)


# ------------------------------------------------------------------------ spark
def _start_spark(master: str, jvm_log: Path) -> Any:
    from aoz.spark.session import local_session

    return local_session(
        master, "aoz-demo", shuffle_partitions=2, jvm_log_level="ERROR", jvm_stderr=jvm_log
    )


def _start_query(spark: Any, recording: Path, checkpoint: Path, sidecar: str) -> Any:
    from aoz.spark import jobs
    from aoz.spark.session import activate

    activate(spark)
    stream = jobs.read_recording_stream(spark, str(recording), types=[Quote, Trade])
    bars = jobs.ohlcv_bars(jobs.trades(stream), window=WINDOW, watermark=WATERMARK)
    return (
        bars.writeStream.outputMode("append").format("aoz")
        .option("sidecar", sidecar)
        .option("subject_column", "symbol").option("subject_prefix", "BARS.")
        .option("checkpointLocation", str(checkpoint))
        .queryName("aoz-demo-bars")
        .trigger(processingTime=TRIGGER)
        .start()
    )  # fmt: skip


def _batch_durations(query: Any) -> list[tuple[int, int, dict[str, int]]]:
    """(batch id, input rows, durationMs) of the query's recent micro-batches."""
    import json

    out = []
    for progress in query.recentProgress:
        p = progress if isinstance(progress, dict) else json.loads(progress.json)
        out.append((p["batchId"], p["numInputRows"], dict(p.get("durationMs") or {})))
    return out


def _stop_query(query: Any) -> str | None:
    # Stopping between micro-batches avoids Spark's noisy "aborting" logs for a batch
    # cut short; a bounded wait, then stop regardless.
    deadline = time.monotonic() + 5.0
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.05)
    error = query.exception()
    query.stop()
    return None if error is None else str(error).splitlines()[0]


# ------------------------------------------------------------------------ outputs
def write_outputs(dash: Dashboard, out: Path) -> Path | None:
    """bars.csv with every bar; a PNG chart (candles, VWAP, volume) of the chart symbol."""
    with open(out / "bars.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "symbol",
                "start",
                "end",
                "open",
                "high",
                "low",
                "close",
                "volume",
                "vwap",
                "trades",
                "last_trade_ts",
                "received_at",
            ]
        )
        for bar, received in dash.bars:
            w.writerow(
                [
                    bar.symbol,
                    bar.start.isoformat(),
                    bar.end.isoformat(),
                    bar.open,
                    bar.high,
                    bar.low,
                    bar.close,
                    bar.volume,
                    bar.vwap,
                    bar.trades,
                    bar.last_ts.isoformat() if bar.last_ts else "",
                    received,
                ]
            )
    bars = sorted((b for b, _ in dash.bars if b.symbol == dash.chart_symbol), key=lambda b: b.start)
    if not bars:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, (ax, axv) = plt.subplots(
        2, 1, figsize=(10, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    t0 = bars[0].start
    xs = [(b.start - t0).total_seconds() for b in bars]
    for x, b in zip(xs, bars, strict=True):
        color = "tab:green" if b.close >= b.open else "tab:red"
        ax.vlines(x + 0.5, b.low, b.high, color=color, linewidth=1)
        body = max(abs(b.close - b.open), 1e-6)
        ax.add_patch(Rectangle((x + 0.2, min(b.open, b.close)), 0.6, body, color=color))
        axv.bar(x + 0.5, b.volume, width=0.6, color=color)
    ax.plot([x + 0.5 for x in xs], [b.vwap for b in bars], color="tab:blue", label="VWAP")
    ax.set_title(
        f"{dash.chart_symbol}: 1-second bars from Spark via aoz ({t0:%Y-%m-%d %H:%M:%S} UTC +)"
    )
    ax.set_ylabel("price")
    ax.legend(loc="upper left")
    axv.set_ylabel("volume")
    axv.set_xlabel("seconds")
    ax.autoscale_view()
    fig.tight_layout()
    path = out / f"bars_{dash.chart_symbol}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------ main
async def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from aoz import NamingDaemon, connect
    from aoz.record import Recorder
    from aoz.spark.sidecar import SinkSidecar

    # Off a terminal (a log, CI): plain lines, never wrapped at 80 columns.
    console = Console(soft_wrap=True, highlight=False)
    out: Path = args.out
    recording, checkpoint = out / "recording", out / "checkpoint"
    symbols = list(DEFAULT_SYMBOLS[: args.symbols])
    chart_symbol = "AAPL" if "AAPL" in symbols else symbols[0]
    dash = Dashboard(symbols, chart_symbol)
    interactive = console.is_terminal
    say = console.print

    say(
        f"[bold]aoz demo[/]: {len(symbols)} symbols at {args.rate:,.0f} events/s, "
        f"{args.duration:g} s of live feed, output in {out}/"
    )
    spark: Any = None
    query: Any = None
    async with AsyncExitStack() as stack:
        # Spark's JVM takes 10-20 s to start: begin now, in a thread, while the mesh starts.
        spark_ready = anyio.Event()
        spark_box: list[Any] = []
        spark_error: list[BaseException] = []

        async def boot_spark() -> None:
            try:
                spark_box.append(
                    await anyio.to_thread.run_sync(_start_spark, args.master, out / "spark-jvm.log")
                )
            except Exception as exc:  # reported below, with the demo's own message
                spark_error.append(exc)
            finally:
                spark_ready.set()

        tg = await stack.enter_async_context(anyio.create_task_group())
        tg.start_soon(boot_spark)

        nsd = await stack.enter_async_context(NamingDaemon(host="127.0.0.1", port=0))
        say(f"naming daemon at {nsd.endpoint}")
        naming = [nsd.endpoint]
        feed = await stack.enter_async_context(connect(program="feed", naming=naming))
        services = await stack.enter_async_context(connect(program="services", naming=naming))
        pipeline = await stack.enter_async_context(
            connect(program="pipeline", naming=naming, send_policy="block")
        )
        screen = await stack.enter_async_context(connect(program="dashboard", naming=naming))

        rec = await stack.enter_async_context(
            Recorder(pipeline, ["MD.>"], recording, types=[Quote, Trade],
                     flush_rows=5000, flush_interval=0.25)
        )  # fmt: skip
        sidecar = await stack.enter_async_context(SinkSidecar(pipeline))
        bars_sub = await stack.enter_async_context(screen.subscribe("BARS.>"))

        work = await stack.enter_async_context(anyio.create_task_group())
        work.start_soon(snapshot_service, services, dash)
        work.start_soon(wildcard_subscribers, services, dash)
        work.start_soon(bar_consumer, bars_sub, dash)
        for subject in ("MD.XNYS.AAPL", "SNAPSHOT.AAPL"):
            await feed.wait_for_interest(subject, timeout=10)
        await screen.wait_for_interest("SNAPSHOT.AAPL", timeout=10)
        await pipeline.wait_for_interest("BARS.AAPL", timeout=10)
        work.start_soon(ask_snapshots, screen, dash, symbols)

        sim = MarketSimulator(symbols, seed=42, sender="sim-feed")
        feed_done = anyio.Event()
        feed_stop = anyio.CancelScope()

        async def feed_task() -> None:
            with feed_stop:
                await run_feed(feed, sim, rate=args.rate)
            dash.counts["published"] = sim.seq
            feed_done.set()

        work.start_soon(feed_task)
        say("feed, subscribers, snapshot service and recorder running; starting Spark...")

        async def refresh() -> None:
            while True:
                dash.counts["published"] = sim.seq
                st = rec.statistics()
                dash.counts["recorded"], dash.counts["files"] = st.written, st.files
                await anyio.sleep(0.25)

        work.start_soon(refresh)

        live: Live | None = None
        if interactive:
            live = Live(dash.table(), console=console, refresh_per_second=4)
            stack.enter_context(live)

        async def show() -> None:
            while True:
                await anyio.sleep(0.5 if live else 2.0)
                if live is not None:
                    live.update(dash.table())
                else:
                    say(dash.status())

        work.start_soon(show)

        main_scope = anyio.CancelScope()

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    dash.note("interrupted: stopping", echo=not interactive)
                    main_scope.cancel()
                    return

        work.start_soon(stop_on_signal)

        echo = not interactive
        spark_failure: str | None = None
        live_bars = 0
        with main_scope:
            with anyio.move_on_after(args.spark_timeout):
                await spark_ready.wait()
            if spark_error or not spark_box:
                why = spark_error[0] if spark_error else "timed out"
                dash.note(f"Spark did not start: {why}", echo=True)
                main_scope.cancel()
            else:
                spark = spark_box[0]
                boot = time.monotonic() - dash.started
                dash.note(f"Spark up after {boot:.1f} s; starting the streaming bars job", echo)
                query = await anyio.to_thread.run_sync(
                    _start_query, spark, recording, checkpoint, sidecar.endpoint
                )
                dash.note(
                    "Structured Streaming query running: recording -> 1 s bars -> "
                    "aoz sink -> BARS.<symbol>",
                    echo,
                )
                await anyio.sleep(args.duration)  # the live part of the demo
            # Stop the feed, let the recorder write its tail, let Spark emit the last bars
            # (a window is emitted once the watermark passes its end).
            feed_stop.cancel()
            await feed_done.wait()
            last_send = time.time()
            await rec.flush()
            if query is not None:
                dash.note("feed stopped; waiting for the last bars", echo)
                with anyio.move_on_after(args.last_bar_wait):
                    await dash.wait_for_bar_ending_after(last_send - 2.0)
                live_bars = len(dash.bars)  # bars of the live feed, up to its last window
        # ---- shutdown, also after Ctrl-C: Spark first, then the mesh (exit stack) ----
        with anyio.CancelScope(shield=True):
            work.cancel_scope.cancel()
            if live is not None:
                live.update(dash.table())
            if query is not None:
                dash.batches = await anyio.to_thread.run_sync(_batch_durations, query)
                spark_failure = await anyio.to_thread.run_sync(_stop_query, query)
            if spark is not None:
                await anyio.to_thread.run_sync(spark.stop)
    # Everything is closed now: nodes, nsd, the recorder (its final flush) and the sidecar.
    chart = write_outputs(dash, out)
    _report(dash, rec.statistics(), say)
    if spark_failure:
        say(f"[red]Spark query failed: {spark_failure}[/]")
    if (
        not live_bars
        and not spark_failure
        and not any(n.startswith("interrupted") for n in dash.notes)
    ):
        say(
            f"[red]no bar arrived for the {args.duration:g} s of live feed[/] (nor in the "
            f"{args.last_bar_wait:g} s after it): Spark's "
            "micro-batches did not keep up (a busy machine, or a cluster whose executors "
            "cannot reach the sidecar). Try a longer --duration (e.g. 60) or a lower --rate, "
            "and see README 'Running on a Spark cluster'."
        )
        return 1
    if chart is None:
        say("[red]no bars arrived, so there is no chart[/]")
        return 130 if any(n.startswith("interrupted") for n in dash.notes) else 1
    say(f"chart: {chart}   every bar: {out / 'bars.csv'}")
    return 1 if spark_failure else 0


def _percentiles(values: Sequence[float]) -> str:
    v = sorted(values)

    def at(q: float) -> float:
        return v[min(len(v) - 1, int(q * len(v)))]

    return f"median {at(0.5):.2f} s, p90 {at(0.9):.2f} s, max {v[-1]:.2f} s ({len(v)} bars)"


def _report(dash: Dashboard, st: Any, say: Any) -> None:
    say(dash.status())
    say(
        f"recorder: {st.written:,} rows in {st.files} files ({st.bytes / 1e6:.1f} MB), "
        f"{st.dropped} dropped, {st.written / max(st.elapsed, 1e-9):,.0f} rows/s"
    )
    say(
        f"snapshot service answered {dash.counts.get('snapshots served', 0)} requests; "
        f"wildcard subscribers saw {dash.counts.get('venue', 0):,} (MD.XNYS.*) and "
        f"{dash.counts.get('aapl', 0):,} (MD.*.AAPL) messages"
    )
    if not dash.bars:
        return
    # Steady state: bars of trades published after the first bar came back, i.e. once the
    # first micro-batch (JVM warm-up plus the backlog recorded while Spark started) is done.
    steady = [
        (lat, close)
        for (bar, _), lat, close in zip(dash.bars, dash.latency, dash.close_latency, strict=False)
        if dash.first_bar_at is not None and bar.start.timestamp() >= dash.first_bar_at
    ]
    say(
        f"[bold]end-to-end latency, trade published -> its bar received[/] "
        f"(window {WINDOW}, watermark {WATERMARK}, trigger {TRIGGER}):"
    )
    if steady:
        say(
            f"  steady state: {_percentiles([x for x, _ in steady])}; "
            f"window close -> bar: {_percentiles([y for _, y in steady])}"
        )
    say(f"  all bars (incl. the backlog while Spark started): {_percentiles(dash.latency)}")
    data = [d.get("triggerExecution", 0) / 1000 for _, rows, d in dash.batches if rows]
    if data:
        say(
            f"  Spark micro-batches with data: {len(data)}; the first took {data[0]:.1f} s, "
            f"the others {statistics.median(data[1:] or data):.2f} s (median)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns the process exit status."""
    args = _parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in ("recording", "checkpoint"):  # the demo's own directories from an earlier run
        shutil.rmtree(args.out / stale, ignore_errors=True)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return anyio.run(_run, args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
