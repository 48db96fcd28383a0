"""The ``aoz`` command line (needs the ``aoz[cli]`` extra: typer + rich).

In the style of the ``nats`` CLI: the verb comes first, data goes to stdout, logs and
diagnostics to stderr, and a failure gives a non-zero exit status::

    aoz nsd --port 5756 &                      # a naming daemon
    aoz sub 'MD.>'                             # print everything under MD.
    aoz pub MD.NYSE.IBM 'bid {{Count}}' --count 3
    aoz reply SVC.echo --echo                  # answer requests with their own body
    aoz req SVC.echo hello                     # prints the reply; rtt on stderr
    aoz peers --once                           # the mesh as a table

Every networking verb takes ``--naming tcp://HOST:PORT`` (repeatable),
``--static-bind``/``--static-connect`` (repeatable; static mode, no nsd) and
``--config FILE``; otherwise settings come from ``AOZ_*`` environment variables
(``AOZ_NAMING=tcp://h1:5756,tcp://h2:5756``) as for :func:`aoz.connect`.

Exit status: 0 success, 1 failure (including ``aoz req`` timing out), 2 usage errors
and ``aoz req`` finding no responders, 130 interrupted.

typer and rich are imported only when the command line runs, so this module (and its
message-rendering helpers) can be imported without them.
"""

import asyncio
import base64
import contextlib
import importlib
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import msgspec

from . import omnm
from .errors import AozError, DecodeError, EncodeError, NoResponders, RequestTimeout, WaitTimeout
from .message import Message
from .protocol.codecs import Codec, Verbatim

__all__ = ["main", "message_to_dict", "message_text"]

log = logging.getLogger("aoz.cli")

BodyCodec = Literal["text", "raw", "json", "msgpack", "omnm"]
_EXIT_LINGER = 2.0  # seconds, see _connect_kwargs
_FLUSH_LINGER_MS = 1000  # at most this long at exit for queued frames to leave
_REPLY_PATH_WAIT = 2.0  # seconds a reply waits for the requester's inbox subscription
_COUNT = re.compile(r"\{\{\s*Count\s*\}\}")

_EXAMPLES = {
    "pub": """Examples:

  aoz pub MD.NYSE.IBM 'hello'

  aoz pub MD.NYSE.IBM 'tick {{Count}}' --count 10

  echo '{"bid": 1.5}' | aoz pub MD.NYSE.IBM --codec json

  aoz pub greet hi --static-bind tcp://127.0.0.1:5557""",
    "sub": """Examples:

  aoz sub 'MD.>'

  aoz sub 'MD.*.IBM' --count 5 --raw

  aoz sub '^MD\\.NYSE\\..*' --json | jq .data

  aoz sub greet --static-connect tcp://127.0.0.1:5557""",
    "req": """Examples:

  aoz req SVC.echo hello

  aoz req SVC.quote '{"symbol": "IBM"}' --codec json --timeout 2

  aoz req SVC.time --json""",
    "reply": """Examples:

  aoz reply SVC.echo --echo

  aoz reply SVC.time 'reply {{Count}}' --count 1

  aoz reply SVC.quote '{"bid": 1.0}' --codec json""",
    "peers": """Examples:

  aoz peers

  aoz peers --once --wait 3

  aoz peers --once --min 4 --wait 30     # wait for a mesh of 4 to form

  aoz peers --once --json --naming tcp://10.0.0.5:5756""",
    "nsd": """Examples:

  aoz nsd                          # 127.0.0.1:5756

  aoz nsd --bind 0.0.0.0 --port 5756 --advertise myhost

  aoz nsd --port 0                 # ephemeral port, printed on stderr

Options are the daemon's own: aoz nsd --help""",
    "record": """Examples:

  aoz record 'MD.>' --dir recordings                 # until Ctrl-C

  aoz record 'MD.>' 'TRADES.*' --dir rec --duration 60 --type examples.marketdata:Quote

Read it back: spark.read.parquet("recordings") or pyarrow.dataset.dataset("recordings")""",
    "bench": """Examples:

  aoz bench --quick                # run from a clone of the aoz repository""",
    "sidecar": """Examples:

  aoz sidecar --naming tcp://nsd:5756                 # on every Spark host, same port
  aoz sidecar --probe tcp://127.0.0.1:5758            # health: exit 0 and the counters""",
    "demo": """Examples:

  aoz demo""",
}


# ---------------------------------------------------------------- rendering messages
def message_to_dict(msg: Message) -> dict[str, Any]:
    """A JSON-ready view of a message: subject, kind, codec, data, reply, received_at.

    ``data`` is the decoded payload for msgpack/JSON/text payloads; raw payloads are
    given as text when they are UTF-8, else base64 with ``"encoding": "base64"``.

    >>> msgspec.json.encode(message_to_dict(msg))  # doctest: +SKIP
    b'{"subject":"MD.IBM","kind":"publish","codec":"text","reply":null,...,"data":"hi"}'
    """
    out: dict[str, Any] = {
        "subject": msg.subject,
        "kind": msg.kind.name.lower(),
        "codec": msg.codec.name.lower(),
        "reply": msg.reply,
        "received_at": msg.received_at,
    }
    data, encoding = _data(msg)
    out["data"] = data
    if encoding is not None:
        out["encoding"] = encoding
    return out


def message_text(msg: Message) -> str:
    """The payload for a human: text as is, msgpack/JSON as JSON, raw bytes as UTF-8
    (undecodable bytes backslash-escaped); omnm fields one per line, like mamasubscriberc."""
    if msg.codec is Codec.OMNM:
        try:
            return omnm.format_fields(msg.decode())
        except DecodeError:
            pass  # shown as bytes below
    if msg.codec in (Codec.MSGPACK, Codec.JSON, Codec.TEXT):
        try:
            value = msg.decode()
            return value if isinstance(value, str) else msgspec.json.encode(value).decode()
        except _UNDECODABLE:
            UNDECODABLE.count += 1  # shown as bytes below
    return msg.data.decode("utf-8", errors="backslashreplace")


class _Undecodable:
    """How many payloads were shown as bytes because they could not be decoded."""

    count = 0


#: payloads that did not decode, or decoded to what JSON cannot hold (msgpack
#: extension types, tuple keys), and were shown as their bytes instead
UNDECODABLE = _Undecodable()
_UNDECODABLE = (DecodeError, TypeError, ValueError, OverflowError, msgspec.EncodeError)


def _data(msg: Message) -> tuple[Any, str | None]:
    if msg.codec in (Codec.MSGPACK, Codec.JSON, Codec.TEXT, Codec.OMNM):
        try:
            value = msg.decode()
            if msg.codec is Codec.OMNM:
                value = omnm.to_json(value)
            msgspec.json.encode(value)  # the caller will: fail here, not there
            return value, None
        except _UNDECODABLE:
            UNDECODABLE.count += 1  # a malformed payload is shown as its bytes
    raw = msg.data
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"


# ---------------------------------------------------------------- small helpers
def _info(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def _error(text: str) -> None:
    print(f"aoz: error: {text}", file=sys.stderr, flush=True)


def _write(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _payload(body: str | bytes, n: int, codec: BodyCodec) -> tuple[object, Codec]:
    """The value to publish for message number ``n`` (``{{Count}}`` replaced)."""
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError:
            if codec != "raw":
                raise AozError(
                    f"the body is not UTF-8, so it cannot be sent as {codec}; use --codec raw"
                ) from None
            return body, Codec.RAW
    text = _COUNT.sub(str(n), body)
    if codec == "text":
        return text, Codec.TEXT
    if codec == "raw":
        return text.encode("utf-8"), Codec.RAW
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise AozError(f"--codec {codec} needs a JSON body: {exc}") from None
    if codec == "omnm":  # {"name": value, "qty:U32": 7} or a list of {name, fid, type, value}
        return omnm.from_json(value, key_types=True), Codec.OMNM
    return value, Codec.JSON if codec == "json" else Codec.MSGPACK


def _connect_kwargs(
    verb: str,
    naming: list[str] | None,
    static_bind: list[str] | None,
    static_connect: list[str] | None,
    config: Path | None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"program": f"aoz-{verb}"}
    if not os.environ.get("AOZ_LINGER"):
        # A command exits right after its last publish or reply: give ZeroMQ time to
        # hand it to the kernel (linger only waits while frames are still queued).
        out["linger"] = _EXIT_LINGER
    if naming:
        out["naming"] = list(naming)
    if static_bind:
        out["bind"] = list(static_bind)
    if static_connect:
        out["connect"] = list(static_connect)
    if config is not None:
        out["config"] = str(config)
    return out


def _connect(conn: dict[str, Any]) -> Any:
    import aoz

    return aoz.connect(**conn)


async def _wait_for_interest(node: Any, subject: str, wait: float) -> bool:
    if wait <= 0:
        return bool(node.has_interest(subject))
    try:
        await node.wait_for_interest(subject, timeout=wait)
    except WaitTimeout:
        return False
    return True


# ---------------------------------------------------------------- verbs (async, no typer)
async def pub(
    conn: dict[str, Any],
    subject: str,
    body: str | bytes,
    *,
    count: int = 1,
    wait: float = 2.0,
    codec: BodyCodec = "text",
) -> int:
    """Publish ``count`` messages on ``subject`` once a subscriber is reachable."""
    payloads = [_payload(body, n, codec) for n in range(1, count + 1)]
    async with _connect(conn) as node:
        if not await _wait_for_interest(node, subject, wait):
            _info(f"warning: no subscriber for {subject!r} after {wait} s; the message(s) are lost")
        for value, c in payloads:
            await node.publish(subject, value, codec=c)
        _info(f"Published {count} message(s) to {subject!r}")
    return 0


async def sub(
    conn: dict[str, Any],
    pattern: str,
    *,
    count: int = 0,
    raw: bool = False,
    as_json: bool = False,
) -> int:
    """Print messages matching ``pattern`` until interrupted or ``count`` arrived."""
    async with _connect(conn) as node, node.subscribe(pattern) as subscription:
        _info(f"Listening on {pattern!r}")
        n = 0
        async for msg in subscription:
            n += 1
            _show(msg, n, raw=raw, as_json=as_json)
            if count and n >= count:
                break
    if UNDECODABLE.count:
        _info(f"{UNDECODABLE.count} payload(s) could not be decoded and were shown as bytes")
    return 0


def _show(msg: Message, n: int, *, raw: bool, as_json: bool) -> None:
    if as_json:
        _write(msgspec.json.encode(message_to_dict(msg)) + b"\n")
    elif raw:
        _write(msg.data + b"\n")
    else:
        head = f'[#{n}] Received on "{msg.subject}"'
        if msg.reply:
            head += f' with reply "{msg.reply}"'
        _write(f"{head}\n{message_text(msg)}\n\n".encode())


async def req(
    conn: dict[str, Any],
    subject: str,
    body: str | bytes,
    *,
    timeout: float = 1.0,
    wait: float = 2.0,
    codec: BodyCodec = "text",
    raw: bool = False,
    as_json: bool = False,
) -> int:
    """Send one request; print the reply. 1 on timeout, 2 when nobody listens."""
    value, c = _payload(body, 1, codec)
    async with _connect(conn) as node:
        await _wait_for_interest(node, subject, wait)
        start = time.perf_counter()
        try:
            reply = await node.request(subject, value, timeout=timeout, codec=c)
        except NoResponders:
            _error(f"no responders on {subject!r}")
            return 2
        except RequestTimeout:
            _error(f"no reply on {subject!r} within {timeout} s")
            return 1
        rtt = time.perf_counter() - start
        _info(f"Received with rtt {rtt * 1000:.3f} ms")
        if as_json:
            _write(msgspec.json.encode(message_to_dict(reply)) + b"\n")
        elif raw:
            _write(reply.data + b"\n")
        else:
            _write(message_text(reply).encode() + b"\n")
    return 0


async def reply(
    conn: dict[str, Any],
    subject: str,
    body: str | bytes | None,
    *,
    echo: bool = False,
    count: int = 0,
    codec: BodyCodec = "text",
) -> int:
    """Answer requests on ``subject`` with ``body`` (or their own body with ``echo``)."""
    async with _connect(conn) as node, node.subscribe(subject) as subscription:
        _info(f"Listening on {subject!r}")
        n = 0
        async for msg in subscription:
            if msg.reply is None:
                _info(f"ignoring a {msg.kind.name.lower()} on {msg.subject!r}: not a request")
                continue
            n += 1
            _show(msg, n, raw=False, as_json=False)
            # A requester that has just joined may not be subscribed to its inbox on
            # this node yet; a reply sent before that would be dropped by ZeroMQ.
            await _wait_for_interest(node, msg.reply, _REPLY_PATH_WAIT)
            if echo:
                await _echo(msg)
            else:
                assert body is not None
                value, c = _payload(body, n, codec)
                await msg.respond(value, codec=c)
            if count and n >= count:
                break
    return 0


async def _echo(msg: Message) -> None:
    if msg.codec in (Codec.MSGPACK, Codec.JSON, Codec.TEXT):
        try:
            await msg.respond(msg.decode(), codec=msg.codec)
            return
        except (DecodeError, EncodeError):
            UNDECODABLE.count += 1  # echo the bytes
    if msg.codec in (Codec.OMNM, Codec.UNKNOWN):  # no aoz byte: echo the payload verbatim
        await msg.respond(Verbatim(msg.payload))
        return
    await msg.respond(msg.data, codec=Codec.RAW)


async def peers(
    conn: dict[str, Any],
    *,
    once: bool = False,
    wait: float = 1.5,
    at_least: int = 0,
    as_json: bool = False,
    interval: float = 1.0,
) -> int:
    """Show the mesh's peers: once, or live until interrupted.

    ``once`` collects for ``wait`` seconds, or until ``at_least`` peers are known when
    that is given (exit status 1 if they do not show up in time).
    """
    import anyio

    async with _connect(conn) as node:

        def others() -> list[Any]:
            return [p for p in node.peers if p.uuid != node.uuid]

        if once or as_json:
            # Peers answer a newcomer's announcement at once and beacon afterwards;
            # collect for a while (or until enough are known), then report.
            events = node.peer_events()
            try:
                with anyio.move_on_after(wait):
                    if not (at_least and len(others()) >= at_least):
                        async for _ in events:
                            if at_least and len(others()) >= at_least:
                                break
            finally:
                await events.aclose()
            table = others()
            if as_json:
                for p in table:
                    _write(msgspec.json.encode(p) + b"\n")
            else:
                _console().print(_peer_table(table))
            if len(table) < at_least:
                _error(f"only {len(table)} peer(s) after {wait} s, expected {at_least}")
                return 1
            return 0
        from rich.live import Live

        with Live(_peer_table([]), console=_console(), auto_refresh=False) as live:
            while True:
                live.update(_peer_table(others()))
                live.refresh()
                await anyio.sleep(interval)


def _console() -> Any:
    from rich.console import Console

    # Not a terminal (a pipe, a test): wide enough that uuids and endpoints stay whole.
    return Console() if sys.stdout.isatty() else Console(width=200)


def _peer_table(rows: list[Any]) -> Any:
    from rich.table import Table

    now = time.time()
    table = Table(title=f"aoz peers ({len(rows)})")
    for name in ("program", "host", "pid", "uuid", "endpoint", "last seen"):
        table.add_column(name, no_wrap=True)
    for p in sorted(rows, key=lambda p: (p.program, p.host, p.pid)):
        ago = max(0.0, now - p.last_seen)
        table.add_row(p.program, p.host, str(p.pid), p.uuid, p.endpoint, f"{ago:.1f} s ago")
    return table


# ---------------------------------------------------------------- pass-through verbs
def _run_nsd(argv: list[str]) -> int:
    from .discovery.nsd import main as nsd_main

    return nsd_main(argv)


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
        from .record import record_main, resolve_types
    except ImportError as exc:
        _error(f"aoz record needs the recorder's extra (pip install 'aoz[record]'): {exc}")
        return 2

    def ready(rec: Any) -> None:
        _info(f"Recording {', '.join(repr(p) for p in patterns)} to {directory}")

    stats = await record_main(
        patterns, directory, types=resolve_types(types or []), flush_rows=flush_rows,
        flush_interval=flush_interval, duration=duration, progress=progress, on_ready=ready,
        **conn,
    )  # fmt: skip
    _write(msgspec.json.encode(stats) + b"\n")
    return 0


def _run_bench(argv: list[str]) -> int:
    def load() -> Callable[[list[str]], int]:
        module = importlib.import_module("benchmarks.__main__")
        return cast(Callable[[list[str]], int], module.main)

    try:
        bench_main = load()
    except ModuleNotFoundError as exc:
        if exc.name not in ("benchmarks", "benchmarks.__main__"):
            _error(f"the benchmarks need the 'bench' extra (pip install 'aoz[bench]'): {exc}")
            return 2
        # The console script does not put the working directory on sys.path; a clone does.
        if not (Path.cwd() / "benchmarks" / "__main__.py").is_file():
            _error(
                "aoz bench runs the benchmarks package of the aoz repository; "
                "run it from a clone of the repository (or use: python -m benchmarks)"
            )
            return 2
        sys.path.insert(0, str(Path.cwd()))
        bench_main = load()
    return int(bench_main(argv) or 0)


def _run_demo(argv: list[str]) -> int:
    from ._examples import run_demo

    return run_demo(argv)


# ---------------------------------------------------------------- typer application
def _build_app() -> Any:
    import typer

    app = typer.Typer(
        name="aoz",
        help="aoz: asyncio messaging over ZeroMQ, wire-compatible with OZ. "
        "Data goes to stdout, logs to stderr.",
        no_args_is_help=True,
        add_completion=False,
        context_settings={"help_option_names": ["-h", "--help"]},
        pretty_exceptions_enable=False,
    )

    Naming = Annotated[
        list[str] | None,
        typer.Option(
            "--naming",
            metavar="tcp://HOST:PORT",
            help="Naming daemon address (repeatable). Default: AOZ_NAMING or "
            "tcp://127.0.0.1:5756.",
            rich_help_panel="Connection",
        ),
    ]
    StaticBind = Annotated[
        list[str] | None,
        typer.Option(
            "--static-bind",
            metavar="ENDPOINT",
            help="Static mode: bind the data PUB here (repeatable), e.g. tcp://127.0.0.1:5557.",
            rich_help_panel="Connection",
        ),
    ]
    StaticConnect = Annotated[
        list[str] | None,
        typer.Option(
            "--static-connect",
            metavar="ENDPOINT",
            help="Static mode: connect the data SUB here (repeatable).",
            rich_help_panel="Connection",
        ),
    ]
    Config = Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help="TOML/JSON settings file (default: AOZ_CONFIG).",
            rich_help_panel="Connection",
        ),
    ]
    Wait = Annotated[
        float,
        typer.Option("--wait", min=0.0, help="Seconds to wait for a subscriber first."),
    ]
    CodecOpt = Annotated[
        str,
        typer.Option(
            "--codec",
            help="Payload codec of the body: text, raw, json, msgpack or omnm "
            "(the others parse the body as JSON; omnm types keys like \"qty:U32\").",
        ),
    ]
    Count = Annotated[int, typer.Option("--count", "-c", min=0)]

    def codec_of(value: str) -> BodyCodec:
        if value not in ("text", "raw", "json", "msgpack", "omnm"):
            raise typer.BadParameter(
                "choose text, raw, json, msgpack or omnm", param_hint="--codec"
            )
        return value  # type: ignore[return-value]

    def body_or_stdin(body: str | None) -> str | bytes:
        if body is not None:
            return body
        if sys.stdin.isatty():
            raise typer.BadParameter("give a BODY or pipe one into stdin", param_hint="BODY")
        return sys.stdin.buffer.read()

    def run(coro: Coroutine[Any, Any, int], *, own_signals: bool = False) -> None:
        code = _arun(coro, own_signals=own_signals)
        if code:
            raise typer.Exit(code)

    @app.callback()
    def _root(
        log_level: Annotated[
            str, typer.Option("--log-level", help="Log level of aoz's logs on stderr.")
        ] = "WARNING",
        version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
    ) -> None:
        if version:
            from importlib.metadata import version as dist_version

            print(dist_version("aoz"))
            raise typer.Exit(0)
        logging.basicConfig(
            stream=sys.stderr,
            level=log_level.upper(),
            format="%(asctime)s %(name)s %(levelname)s %(message)s",
        )

    @app.command("pub", epilog=_EXAMPLES["pub"])
    def _pub(
        subject: Annotated[str, typer.Argument(help="Subject to publish on.")],
        body: Annotated[
            str | None,
            typer.Argument(help="Message body; read from stdin when absent. "
                           "{{Count}} becomes the message number."),
        ] = None,
        count: Count = 1,
        wait: Wait = 2.0,
        codec: CodecOpt = "text",
        naming: Naming = None,
        static_bind: StaticBind = None,
        static_connect: StaticConnect = None,
        config: Config = None,
    ) -> None:
        """Publish a message (COUNT times) once a subscriber is reachable."""
        conn = _connect_kwargs("pub", naming, static_bind, static_connect, config)
        run(pub(conn, subject, body_or_stdin(body), count=max(count, 1), wait=wait,
                codec=codec_of(codec)))

    @app.command("sub", epilog=_EXAMPLES["sub"])
    def _sub(
        pattern: Annotated[
            str, typer.Argument(help="Subject, NATS-style pattern (A.*.C, A.>) or ^regex.")
        ],
        count: Annotated[int, typer.Option("--count", "-c", min=0,
                                           help="Exit after COUNT messages (0 = never).")] = 0,
        raw: Annotated[bool, typer.Option("--raw", help="Print bodies only.")] = False,
        as_json: Annotated[
            bool, typer.Option("--json", help="One JSON object per message.")
        ] = False,
        naming: Naming = None,
        static_bind: StaticBind = None,
        static_connect: StaticConnect = None,
        config: Config = None,
    ) -> None:
        """Print messages matching PATTERN ("Listening on ..." on stderr once subscribed)."""
        conn = _connect_kwargs("sub", naming, static_bind, static_connect, config)
        run(sub(conn, pattern, count=count, raw=raw, as_json=as_json))

    @app.command("req", epilog=_EXAMPLES["req"])
    def _req(
        subject: Annotated[str, typer.Argument(help="Subject of the request.")],
        body: Annotated[
            str | None, typer.Argument(help="Request body; read from stdin when absent.")
        ] = None,
        timeout: Annotated[
            float, typer.Option("--timeout", "-t", min=0.0, help="Seconds to wait for a reply.")
        ] = 1.0,
        wait: Wait = 2.0,
        codec: CodecOpt = "text",
        raw: Annotated[bool, typer.Option("--raw", help="Print the reply's bytes.")] = False,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print the reply as a JSON object.")
        ] = False,
        naming: Naming = None,
        static_bind: StaticBind = None,
        static_connect: StaticConnect = None,
        config: Config = None,
    ) -> None:
        """Send a request and print the reply (round-trip time on stderr).

        Exit status 1 when no reply comes in time, 2 when nobody subscribes to SUBJECT.
        """
        conn = _connect_kwargs("req", naming, static_bind, static_connect, config)
        run(req(conn, subject, body_or_stdin(body), timeout=timeout, wait=wait,
                codec=codec_of(codec), raw=raw, as_json=as_json))

    @app.command("reply", epilog=_EXAMPLES["reply"])
    def _reply(
        subject: Annotated[str, typer.Argument(help="Subject to answer requests on.")],
        body: Annotated[
            str | None,
            typer.Argument(help="Reply body ({{Count}} becomes the request number)."),
        ] = None,
        echo: Annotated[
            bool, typer.Option("--echo", help="Answer with the request's own body.")
        ] = False,
        count: Annotated[int, typer.Option("--count", "-c", min=0,
                                           help="Exit after COUNT requests (0 = never).")] = 0,
        codec: CodecOpt = "text",
        naming: Naming = None,
        static_bind: StaticBind = None,
        static_connect: StaticConnect = None,
        config: Config = None,
    ) -> None:
        """Answer requests on SUBJECT with BODY (or --echo)."""
        if body is None and not echo:
            raise typer.BadParameter("give a BODY or --echo", param_hint="BODY")
        conn = _connect_kwargs("reply", naming, static_bind, static_connect, config)
        run(reply(conn, subject, body, echo=echo, count=count, codec=codec_of(codec)))

    @app.command("peers", epilog=_EXAMPLES["peers"])
    def _peers(
        once: Annotated[
            bool, typer.Option("--once", help="Print the table once and exit (for scripts).")
        ] = False,
        wait: Annotated[
            float,
            typer.Option("--wait", min=0.0, help="With --once: seconds to collect peers first."),
        ] = 1.5,
        at_least: Annotated[
            int,
            typer.Option(
                "--min",
                min=0,
                help="With --once: stop as soon as MIN peers are known; exit 1 if they "
                "are not within --wait seconds.",
            ),
        ] = 0,
        as_json: Annotated[
            bool, typer.Option("--json", help="One JSON object per peer (implies --once).")
        ] = False,
        interval: Annotated[
            float, typer.Option("--interval", min=0.1, help="Live refresh period, seconds.")
        ] = 1.0,
        naming: Naming = None,
        static_bind: StaticBind = None,
        static_connect: StaticConnect = None,
        config: Config = None,
    ) -> None:
        """Show the nodes of the mesh: program, host, pid, uuid, endpoint, last seen."""
        conn = _connect_kwargs("peers", naming, static_bind, static_connect, config)
        run(peers(conn, once=once, wait=wait, at_least=at_least, as_json=as_json,
                  interval=interval))

    passthrough = {
        "context_settings": {"allow_extra_args": True, "ignore_unknown_options": True},
        "add_help_option": False,
    }

    @app.command("nsd", epilog=_EXAMPLES["nsd"], **passthrough)  # type: ignore[arg-type]
    def _nsd(ctx: typer.Context) -> None:
        """Run a naming daemon (aoz nsd --help for its options)."""
        code = _run_nsd(list(ctx.args))
        if code:
            raise typer.Exit(code)

    @app.command("keygen")
    def _keygen(
        name: Annotated[str, typer.Argument(help="Writes NAME.key (secret) and NAME.pub.")],
        force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
    ) -> None:
        """Write a new CURVE keypair to NAME.key and NAME.pub (mode 0600); prints the public key."""
        from .security import write_keypair

        try:
            secret_path, public_path, public = write_keypair(name, force=force)
        except AozError as exc:
            _error(str(exc))
            raise typer.Exit(1) from None
        _info(f"wrote {secret_path} (secret, keep it private) and {public_path}")
        print(public, flush=True)

    @app.command("record", epilog=_EXAMPLES["record"])
    def _record(
        patterns: Annotated[
            list[str], typer.Argument(help="Subjects or patterns to record (one or more).")
        ],
        directory: Annotated[
            Path, typer.Option("--dir", "-o", help="Directory of the Parquet dataset.")
        ] = Path("recordings"),
        types: Annotated[
            list[str] | None,
            typer.Option("--type", metavar="MODULE:CLASS",
                         help="msgspec Struct whose fields become columns (repeatable)."),
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
            typer.Option("--progress/--no-progress",
                         help="Live progress line on stderr (default: when a terminal)."),
        ] = None,
        naming: Naming = None,
        static_bind: StaticBind = None,
        static_connect: StaticConnect = None,
        config: Config = None,
    ) -> None:
        """Record subjects to Parquet until Ctrl-C/SIGTERM; final statistics (JSON) on stdout."""
        conn = _connect_kwargs("record", naming, static_bind, static_connect, config)
        run(
            record(conn, patterns, directory, types=types, flush_rows=flush_rows,
                   flush_interval=flush_interval, duration=duration, progress=progress),
            own_signals=True,
        )  # fmt: skip

    @app.command("sidecar", epilog=_EXAMPLES["sidecar"])
    def _sidecar(
        bind: Annotated[str, typer.Option("--bind", help="Where Spark tasks hand rows over.")]
        = "tcp://127.0.0.1:5758",
        probe: Annotated[
            str | None, typer.Option("--probe", metavar="ENDPOINT", help="Health-check one.")
        ] = None,
        naming: Naming = None,
        static_bind: StaticBind = None,
        static_connect: StaticConnect = None,
        config: Config = None,
    ) -> None:
        """The Spark sink's sidecar (aoz.spark.sidecar): prints a ready line, stops on SIGTERM."""
        from .spark.sidecar import sidecar_main

        conn = _connect_kwargs("sidecar", naming, static_bind, static_connect, config)
        run(sidecar_main(conn, bind, probe=probe), own_signals=True)

    @app.command("bench", epilog=_EXAMPLES["bench"], **passthrough)  # type: ignore[arg-type]
    def _bench(ctx: typer.Context) -> None:
        """Run the repository's benchmarks (aoz bench --help for their options)."""
        code = _run_bench(list(ctx.args))
        if code:
            raise typer.Exit(code)

    @app.command("demo", epilog=_EXAMPLES["demo"], **passthrough)  # type: ignore[arg-type]
    def _demo(ctx: typer.Context) -> None:
        """Run the self-contained demo (nsd, publishers, subscribers)."""
        code = _run_demo(list(ctx.args))
        if code:
            raise typer.Exit(code)

    return app


def _arun(coro: Coroutine[Any, Any, int], *, own_signals: bool = False) -> int:
    """Run a verb; map aoz errors to exit 1 and SIGTERM to a clean shutdown (unless the
    verb handles signals itself: ``own_signals``)."""

    async def guarded() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        terminated = False

        def on_sigterm() -> None:
            nonlocal terminated
            terminated = True
            task.cancel()

        # SIGTERM cancels like Ctrl-C does, so the node still says goodbye (D).
        if not own_signals:
            with contextlib.suppress(NotImplementedError, RuntimeError):  # Windows
                loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        try:
            return await coro
        except asyncio.CancelledError:
            return 143 if terminated else 130
        finally:
            if not own_signals:
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(signal.SIGTERM)

    try:
        return asyncio.run(guarded())
    except AozError as exc:
        _error(str(exc))
        return 1
    finally:
        _flush_zmq()


def _flush_zmq() -> None:
    """Let ZeroMQ deliver what closed sockets still queue (a reply, the last publish)
    before the process exits: without terminating the context, exit discards it."""
    import zmq

    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    if not ctx.closed:
        ctx.destroy(linger=_FLUSH_LINGER_MS)


def main(argv: list[str] | None = None) -> int:
    """Run the ``aoz`` command line with ``argv`` (default: ``sys.argv[1:]``); returns
    the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        import rich  # noqa: F401
        import typer
    except ImportError as exc:
        if args and args[0] == "nsd":  # the daemon needs no extras
            return _run_nsd(args[1:])
        _error(f"the aoz command line needs its extra: pip install 'aoz[cli]' ({exc.name} missing)")
        return 2
    app = _build_app()
    try:
        app(args=args, prog_name="aoz", standalone_mode=True)
    except SystemExit as exc:
        return _exit_code(exc.code)
    except KeyboardInterrupt:
        return 130
    except typer.Exit as exc:  # pragma: no cover - standalone mode turns Exit into SystemExit
        return exc.exit_code
    return 0


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
