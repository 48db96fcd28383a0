"""Daemons and tools: ``aoz nsd``, ``aoz broker``, ``aoz record``, ``aoz replay``,
``aoz sidecar``, ``aoz keygen`` and ``aoz demo``."""

import logging
import os
import signal
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer

import aoz.cli._common as c

from ..errors import AozError

EXAMPLES = {
    "nsd": """Examples:

  aoz nsd                                        # 127.0.0.1:5756

  aoz nsd --bind 0.0.0.0 --port 5756 --advertise myhost.example.com

  aoz nsd --port 0                               # ephemeral port, printed on stderr

  aoz nsd --bind ipc:///run/user/1000/aoz-nsd    # aoz nodes on this host only (naming=[that],
                                                 # transport="ipc"); the XSUB is <path>.xsub""",
    "keygen": """Examples:

  aoz keygen mesh            # mesh.key (secret, 0600) and mesh.pub; prints the public key""",
    "sidecar": """Examples:

  aoz sidecar --naming tcp://nsd:5756                 # on every Spark host, same port

  aoz sidecar --probe tcp://127.0.0.1:5758            # health: exit 0 and the counters""",
    "broker": """Examples:

  aoz broker --pub-port 5559 --sub-port 5560

  # nodes: aoz.connect(broker_pub="tcp://HOST:5559", broker_sub="tcp://HOST:5560")

  aoz broker --bind ipc:///tmp/aoz-broker         # binds <path>.pub and <path>.sub""",
    "record": """Examples:

  aoz record 'MD.>' --dir recordings                 # until Ctrl-C

  aoz record 'MD.>' 'TRADES.*' --dir rec --duration 60 --type mypkg.types:Quote

  aoz record 'MD.>' --dir rec --partition 0/2 & aoz record 'MD.>' --dir rec --partition 1/2

Read it back: spark.read.format("aoz").load("recordings"), aoz replay, or pyarrow""",
    "replay": """Examples:

  aoz replay 'MD.>' --dir recordings                 # all of it, at the original pace

  aoz replay 'MD.*.IBM' --dir rec --from 2026-11-25T09:00:00Z --to 2026-11-25T09:05Z

  aoz replay 'MD.>' --dir rec --from 1764061200 --speed max   # seconds; as fast as possible""",
}


def nsd_keys(
    secret_file: Path | None, allow: list[str] | None, allow_files: list[Path] | None
) -> dict[str, Any]:
    """NamingDaemon keywords for a CURVE-secured naming plane (empty when not asked)."""
    if secret_file is None and not allow and not allow_files:
        return {}
    if secret_file is None:
        raise c.UserError("--curve-allow needs --curve-secret-file (the mesh secret key)")
    from .._mesh.security import read_key, read_keys

    keys = list(allow or [])
    for path in allow_files or ():
        keys.extend(read_keys(path))
    return {"curve_server_secret": read_key(secret_file), "curve_allow": keys or None}


async def nsd(
    host: str, port: int, advertise: str | None, heartbeat: float, keys: dict[str, Any]
) -> int:
    """Run a naming daemon until SIGINT/SIGTERM, logging joins and leaves at INFO."""
    import anyio

    from .._discovery.nsd import NamingDaemon

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with (
            NamingDaemon(
                host, port, advertise=advertise, heartbeat_interval=heartbeat, **keys
            ) as d,
            anyio.create_task_group() as tg,
        ):
            secured = " curve=on" if keys else ""
            c.info(
                f"aoz nsd ready xpub={d.endpoint} xsub={d.xsub_endpoint} pid={os.getpid()}{secured}"
            )
            if not keys:  # a secured nsd only talks to nodes holding the mesh keys
                tg.start_soon(watch_mesh, d.endpoint, max(heartbeat, 1.0) * 3)
            async for _ in signals:
                break
            tg.cancel_scope.cancel()
    return 0


async def watch_mesh(endpoint: str, silent_after: float) -> None:
    """Log nodes joining (first ``C``/``c`` of a uuid), leaving (``D``) and going silent
    (no beacon for ``silent_after`` s) at INFO, by listening to the nsd like a node does.
    The daemon itself stays stateless: this is the command's view, not the proxy's."""
    import time

    import anyio
    import zmq

    from .._discovery.driver import naming_context
    from .._mesh.errmap import mapped
    from .._protocol.naming import NamingType, decode_naming

    log = logging.getLogger("aoz.nsd")
    seen: dict[str, tuple[str, float]] = {}  # uuid -> (description, last heard)
    sub = naming_context().socket(zmq.SUB)
    try:
        with mapped(f"cannot listen to the nsd at {endpoint}"):
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.SUBSCRIBE, b"_NAMING")
            sub.connect(endpoint)
        while True:
            with anyio.move_on_after(silent_after / 3):
                data = await sub.recv()
                try:
                    f = decode_naming(data)
                except AozError:
                    continue  # malformed: the nodes count it
                now = time.monotonic()
                if f.type is NamingType.WELCOME or not f.uuid:
                    continue
                who = f"{f.program}@{f.host} pid {f.pid} {f.uuid} {f.endpoint}"
                if f.type is NamingType.DISCONNECT:
                    if seen.pop(f.uuid, None) is not None:
                        log.info("node left: %s", who)
                    continue
                if f.uuid not in seen:
                    log.info("node joined: %s", who)
                seen[f.uuid] = (who, now)
            now = time.monotonic()
            for uuid, (who, last) in list(seen.items()):
                if now - last > silent_after:
                    del seen[uuid]
                    log.info("node silent for %.0f s (gone?): %s", silent_after, who)
    finally:
        sub.close(linger=0)


async def broker(host: str, pub_port: int, sub_port: int, heartbeat: float) -> int:
    """Forward brokered-mode traffic until SIGINT/SIGTERM."""
    import anyio

    from .._discovery.broker import Broker

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
    writer: str = "thread",
    partition: str | None = None,
) -> int:
    """Record ``patterns`` to Parquet under ``directory`` until SIGINT/SIGTERM or
    ``duration``; prints the final statistics as JSON on stdout."""
    part = _partition_arg(partition)
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
        writer="process" if writer == "process" else "thread", partition=part, **conn,
    )  # fmt: skip
    c.write(msgspec.json.encode(stats) + b"\n")
    return 0


async def replay(
    conn: dict[str, Any],
    patterns: list[str],
    directory: Path,
    *,
    start: str | None = None,
    end: str | None = None,
    speed: float | None = 1.0,
    wait: float = 2.0,
) -> int:
    """Publish a recorded time range again once the mesh's subscribers reached us; prints
    the statistics as JSON on stdout."""
    try:
        from ..record import replay as replay_range
        from ..record.replay import to_micros
    except ImportError as exc:
        raise c.UserError(
            f"aoz replay needs the recorder's extra: pip install 'aoz[record]' ({exc.name} missing)"
        ) from None
    from .._protocol.subjects import compile_pattern

    first, last = _time_arg("--from", start, to_micros), _time_arg("--to", end, to_micros)
    for pattern in patterns:
        try:
            compile_pattern(pattern)
        except AozError as exc:
            raise c.UserError(f"aoz replay: {exc}") from None
    # nothing lost to a slow subscriber: a replay waits for room instead of dropping
    conn = {"send_policy": "block", **conn} if not os.environ.get("AOZ_SEND_POLICY") else conn
    async with c.open_node(conn) as node:
        if not await c.wait_for_mesh(node, wait):
            c.info(f"warning: no subscriber reached us within {wait} s; replaying anyway")
        stats = await replay_range(node, directory, patterns, start=first, end=last,
                                   speed=speed)  # fmt: skip
        c.info(f"Replayed {stats.published} message(s) on {stats.subjects} subject(s)")
    c.write(msgspec.json.encode(stats) + b"\n")
    return 0


def _partition_arg(value: str | None) -> tuple[int, int] | None:
    """``--partition I/N``."""
    if value is None:
        return None
    i, sep, n = value.partition("/")
    try:
        part = (int(i), int(n))
    except ValueError:
        part = (-1, 0)
    if not sep or not 0 <= part[0] < part[1]:
        raise c.UserError(f"--partition {value!r}: I/N with 0 <= I < N, e.g. 0/2")
    return part


def _time_arg(name: str, value: str | None, check: Any) -> float | str | None:
    """``--from``/``--to``: epoch seconds or ISO 8601 text, checked before connecting."""
    if value is None:
        return None
    try:
        when: float | str = float(value)
    except ValueError:
        when = value
    try:
        check(when)
    except AozError as exc:
        raise c.UserError(f"{name}: {exc}") from None
    return when


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
        bind: Annotated[
            str,
            typer.Option(
                "--bind", help="Interface to bind, or ipc:///path (aoz nodes on this host)."
            ),
        ] = "127.0.0.1",
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
        curve_secret_file: Annotated[
            Path | None,
            typer.Option(
                "--curve-secret-file",
                metavar="FILE",
                rich_help_panel="Security",
                help="Secure the naming plane with CURVE: the mesh secret key "
                "(aoz keygen). OZ programs cannot use a secured nsd.",
            ),
        ] = None,
        curve_allow: Annotated[
            list[str] | None,
            typer.Option(
                "--curve-allow",
                metavar="KEY",
                rich_help_panel="Security",
                help="A node public key allowed in (repeatable; write --curve-allow=KEY, "
                "as a key may start with '-').",
            ),
        ] = None,
        curve_allow_file: Annotated[
            list[Path] | None,
            typer.Option(
                "--curve-allow-file",
                metavar="FILE",
                rich_help_panel="Security",
                help="File of allowed public keys, one a line (repeatable).",
            ),
        ] = None,
        curve_identity: Annotated[
            bool,
            typer.Option(
                "--curve-identity",
                rich_help_panel="Security",
                help="Relay only naming frames whose uuid the sender's key owns (nodes "
                "with curve_identity=True).",
            ),
        ] = False,
        log_level: c.LogLevel = None,
    ) -> None:
        """Run a naming daemon (OZ's nsd) until Ctrl-C/SIGTERM; joins and leaves at INFO."""
        keys = nsd_keys(curve_secret_file, curve_allow, curve_allow_file)
        if curve_identity:
            if not keys:
                raise c.UserError("--curve-identity needs --curve-secret-file and --curve-allow")
            keys["identity"] = True
        c.run(nsd(bind, port, advertise, heartbeat, keys), own_signals=True)

    @app.command("keygen", epilog=EXAMPLES["keygen"])
    def _keygen(
        name: Annotated[str, typer.Argument(help="Writes NAME.key (secret) and NAME.pub.")],
        force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
    ) -> None:
        """Write a new CURVE keypair to NAME.key and NAME.pub (mode 0600); prints the public key."""
        try:
            from .._mesh.security import write_keypair  # type: ignore[attr-defined,unused-ignore]
        except ImportError:
            raise c.UserError(
                "this aoz cannot write key files (aoz.security.write_keypair)"
            ) from None
        try:
            secret_path, public_path, public = write_keypair(name, force=force)
        except AozError as exc:
            c.error(str(exc))
            raise typer.Exit(1) from None
        c.info(f"wrote {secret_path} (secret, keep it private) and {public_path}")
        print(public, flush=True)

    @app.command("sidecar", epilog=EXAMPLES["sidecar"])
    def _sidecar(
        bind: Annotated[
            str, typer.Option("--bind", help="Where Spark tasks hand rows over.")
        ] = "tcp://127.0.0.1:5758",
        probe: Annotated[
            str | None, typer.Option("--probe", metavar="ENDPOINT", help="Health-check one.")
        ] = None,
        log_level: c.LogLevel = None,
        naming: c.Naming = None,
        static_bind: c.StaticBind = None,
        static_connect: c.StaticConnect = None,
        config: c.Config = None,
        connect_timeout: c.ConnectTimeout = None,
    ) -> None:
        """The Spark sink's sidecar (aoz.spark.sidecar): prints a ready line, stops on SIGTERM."""
        from ..spark.sidecar import sidecar_main

        conn = c.Conn(naming, static_bind, static_connect, config, connect_timeout).kwargs(
            "sidecar"
        )
        c.run(sidecar_main(conn, bind, probe=probe), own_signals=True)

    @app.command("broker", epilog=EXAMPLES["broker"])
    def _broker(
        bind: Annotated[
            str,
            typer.Option(
                "--bind", help="Interface to bind, or ipc:///path (aoz nodes on this host)."
            ),
        ] = "127.0.0.1",
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
        partition: Annotated[
            str | None,
            typer.Option(
                "--partition", metavar="I/N",
                help="Record only subjects whose hash mod N is I (N recorders share them).",
            ),
        ] = None,
        writer: Annotated[
            str,
            typer.Option("--writer", help="Decode and write in a 'thread' or a 'process'."),
        ] = "thread",
        log_level: c.LogLevel = None,
        naming: c.Naming = None,
        static_bind: c.StaticBind = None,
        static_connect: c.StaticConnect = None,
        config: c.Config = None,
        connect_timeout: c.ConnectTimeout = None,
    ) -> None:
        """Record subjects to Parquet until Ctrl-C/SIGTERM; final statistics (JSON) on stdout."""
        if writer not in ("thread", "process"):
            raise c.UserError(f"--writer {writer!r}: thread or process")
        conn = c.Conn(naming, static_bind, static_connect, config, connect_timeout).kwargs("record")
        c.run(
            record(conn, patterns, directory, types=types, flush_rows=flush_rows,
                   flush_interval=flush_interval, duration=duration, progress=progress,
                   writer=writer, partition=partition),
            own_signals=True,
        )  # fmt: skip

    @app.command("replay", epilog=EXAMPLES["replay"])
    def _replay(
        patterns: Annotated[
            list[str], typer.Argument(help="Subjects or patterns to replay (one or more).")
        ],
        directory: Annotated[
            Path, typer.Option("--dir", "-d", help="Directory of the recording.")
        ] = Path("recordings"),
        start: Annotated[
            str | None,
            typer.Option("--from", help="First receive time: ISO 8601 (UTC if naive) or epoch s."),
        ] = None,
        end: Annotated[
            str | None, typer.Option("--to", help="End of the range (excluded), as --from.")
        ] = None,
        speed: Annotated[
            str,
            typer.Option("--speed", help="1 = original pace, 2 = twice as fast, max = no pauses."),
        ] = "1",
        wait: Annotated[
            float, typer.Option("--wait", min=0.0, help="Seconds to wait for subscribers first.")
        ] = 2.0,
        log_level: c.LogLevel = None,
        naming: c.Naming = None,
        static_bind: c.StaticBind = None,
        static_connect: c.StaticConnect = None,
        config: c.Config = None,
        connect_timeout: c.ConnectTimeout = None,
    ) -> None:
        """Publish recorded messages again, on their own subjects, at their pace or faster;
        statistics (JSON) on stdout."""
        if speed.strip().lower() == "max":
            pace = None
        else:
            try:
                pace = float(speed)
            except ValueError:
                pace = 0.0
            if not pace > 0:
                raise c.UserError(f"--speed {speed!r}: a number > 0, or max")
        if not directory.is_dir():
            raise c.UserError(f"--dir {directory}: no such directory")
        conn = c.Conn(naming, static_bind, static_connect, config, connect_timeout).kwargs("replay")
        c.run(replay(conn, patterns, directory, start=start, end=end, speed=pace, wait=wait))

    # The demo lives in a clone of the repository (examples/), not in the wheel: listed
    # in `aoz --help` only where it can run; elsewhere `aoz demo` says where to get it.
    in_clone = (Path.cwd() / "examples" / "marketdata" / "demo.py").is_file()

    @app.command(
        "demo",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
        hidden=not in_clone,
    )
    def _demo(ctx: typer.Context) -> None:
        """Run the market-data demo of a repository clone (nsd, feed, subscribers,
        recorder, Spark bars)."""
        from .._examples import run_demo

        code = run_demo(list(ctx.args))
        if code:
            raise typer.Exit(code)


__all__ = ["broker", "nsd", "record", "register", "replay", "watch_mesh"]
