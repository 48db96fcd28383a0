"""Long-running verbs: ``aoz nsd``, ``aoz broker``, ``aoz record``, and ``aoz demo``."""

import os
import signal
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer

import aoz.cli._common as c

EXAMPLES = {
    "nsd": """Examples:

  aoz nsd                                        # 127.0.0.1:5756

  aoz nsd --bind 0.0.0.0 --port 5756 --advertise myhost.example.com

  aoz nsd --port 0                               # ephemeral port, printed on stderr""",
    "broker": """Examples:

  aoz broker --pub-port 5559 --sub-port 5560

  # nodes: aoz.connect(broker_pub="tcp://HOST:5559", broker_sub="tcp://HOST:5560")""",
    "record": """Examples:

  aoz record 'MD.>' --dir recordings                 # until Ctrl-C

  aoz record 'MD.>' 'TRADES.*' --dir rec --duration 60 --type mypkg.types:Quote

Read it back: spark.read.parquet("recordings") or pyarrow.dataset.dataset("recordings")""",
}


async def broker(host: str, pub_port: int, sub_port: int, heartbeat: float) -> int:
    """Forward brokered-mode traffic until SIGINT/SIGTERM."""
    import anyio

    from ..discovery.broker import Broker

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with Broker(
            host, pub_port=pub_port, sub_port=sub_port, heartbeat_interval=heartbeat
        ) as b:
            c.info(
                f"aoz broker ready pub={b.pub_endpoint} sub={b.sub_endpoint} pid={os.getpid()} "
                f"(nodes: broker_pub={b.pub_endpoint} broker_sub={b.sub_endpoint})"
            )
            async for _ in signals:
                break
    return 0


async def record(
    conn: dict[str, Any],
    patterns: list[str],
    directory: Path,
    *,
    types: list[str] | None = None,
    flush_rows: int = 10_000,
    flush_interval: float = 1.0,
    duration: float | None = None,
    progress: bool | None = None,
) -> int:
    """Record ``patterns`` to Parquet under ``directory`` until SIGINT/SIGTERM or
    ``duration``; prints the final statistics as JSON on stdout."""
    try:
        from ..record import record_main, resolve_types
    except ImportError as exc:
        raise c.UserError(
            f"aoz record needs the recorder's extra: pip install 'aoz[record]' ({exc.name} missing)"
        ) from None
    _check_writable(directory)

    def ready(rec: Any) -> None:
        c.info(f"Recording {', '.join(repr(p) for p in patterns)} to {directory}")

    stats = await record_main(
        patterns, directory, types=resolve_types(types or []), flush_rows=flush_rows,
        flush_interval=flush_interval, duration=duration, progress=progress, on_ready=ready,
        **conn,
    )  # fmt: skip
    c.write(msgspec.json.encode(stats) + b"\n")
    return 0


def _check_writable(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".aoz-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise c.UserError(
            f"--dir {directory}: cannot write there ({exc.strerror}); choose another directory"
        ) from None


def register(app: typer.Typer) -> None:
    @app.command("nsd", epilog=EXAMPLES["nsd"])
    def _nsd(
        bind: Annotated[str, typer.Option("--bind", help="Interface to bind.")] = "127.0.0.1",
        port: Annotated[
            int,
            typer.Option("--port", min=0, max=65535, help="XPUB port nodes connect to (0: any)."),
        ] = 5756,
        advertise: Annotated[
            str | None,
            typer.Option(
                "--advertise",
                metavar="HOST",
                help="Host name put in the welcome when binding 0.0.0.0.",
            ),
        ] = None,
        heartbeat: Annotated[
            float,
            typer.Option("--heartbeat", min=0.0, help="ZeroMQ heartbeat interval, s (0 = off)."),
        ] = 1.0,
        log_level: c.LogLevel = None,
    ) -> None:
        """Run a naming daemon (OZ's nsd) until Ctrl-C/SIGTERM."""
        from ..discovery.nsd import main as nsd_main

        argv = ["--bind", bind, "--port", str(port), "--heartbeat", str(heartbeat)]
        if advertise:
            argv += ["--advertise", advertise]
        argv += ["--log-level", logging_level_name()]
        code = nsd_main(argv)
        if code:
            raise typer.Exit(code)

    @app.command("broker", epilog=EXAMPLES["broker"])
    def _broker(
        bind: Annotated[str, typer.Option("--bind", help="Interface to bind.")] = "127.0.0.1",
        pub_port: Annotated[
            int,
            typer.Option(
                "--pub-port", min=0, max=65535, help="Port nodes publish to (broker_pub)."
            ),
        ] = 5559,
        sub_port: Annotated[
            int,
            typer.Option(
                "--sub-port", min=0, max=65535, help="Port nodes subscribe at (broker_sub)."
            ),
        ] = 5560,
        heartbeat: Annotated[
            float, typer.Option("--heartbeat", min=0.0, help="ZeroMQ heartbeat interval, s.")
        ] = 1.0,
        log_level: c.LogLevel = None,
    ) -> None:
        """Run the brokered mode's forwarder (an XSUB/XPUB proxy) until Ctrl-C/SIGTERM."""
        c.run(broker(bind, pub_port, sub_port, heartbeat), own_signals=True)

    @app.command("record", epilog=EXAMPLES["record"])
    def _record(
        patterns: Annotated[
            list[str], typer.Argument(help="Subjects or patterns to record (one or more).")
        ],
        directory: Annotated[
            Path, typer.Option("--dir", "-o", help="Directory of the Parquet dataset.")
        ] = Path("recordings"),
        types: Annotated[
            list[str] | None,
            typer.Option(
                "--type",
                metavar="MODULE:CLASS",
                help="msgspec Struct whose fields become columns (repeatable).",
            ),
        ] = None,
        flush_rows: Annotated[
            int, typer.Option("--flush-rows", min=1, help="Write a file every N rows.")
        ] = 10_000,
        flush_interval: Annotated[
            float, typer.Option("--flush-interval", min=0.01, help="... or every S seconds.")
        ] = 1.0,
        duration: Annotated[
            float | None,
            typer.Option("--duration", min=0.0, help="Stop after S seconds (default: on signal)."),
        ] = None,
        progress: Annotated[
            bool | None,
            typer.Option(
                "--progress/--no-progress",
                help="Live progress line on stderr (default: when a terminal).",
            ),
        ] = None,
        log_level: c.LogLevel = None,
        naming: c.Naming = None,
        static_bind: c.StaticBind = None,
        static_connect: c.StaticConnect = None,
        config: c.Config = None,
        connect_timeout: c.ConnectTimeout = None,
    ) -> None:
        """Record subjects to Parquet until Ctrl-C/SIGTERM; final statistics (JSON) on stdout."""
        conn = c.Conn(naming, static_bind, static_connect, config, connect_timeout).kwargs("record")
        c.run(
            record(conn, patterns, directory, types=types, flush_rows=flush_rows,
                   flush_interval=flush_interval, duration=duration, progress=progress),
            own_signals=True,
        )  # fmt: skip

    @app.command(
        "demo",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )
    def _demo(ctx: typer.Context) -> None:
        """Run the self-contained market-data demo (nsd, feed, subscribers, recorder)."""
        import importlib

        try:
            demo = importlib.import_module("aoz.demo")
        except ModuleNotFoundError:
            c.error("the demo is not part of this installation; run it from a clone: make demo")
            raise typer.Exit(2) from None
        code = int(demo.main(list(ctx.args)) or 0)
        if code:
            raise typer.Exit(code)


def logging_level_name() -> str:
    import logging

    return logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower()


__all__ = ["broker", "record", "register"]
