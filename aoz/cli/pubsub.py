"""``aoz pub`` and ``aoz sub``."""

import contextlib
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import msgspec
import typer

import aoz.cli._common as c

from .._mesh.message import Message
from .._protocol.codecs import Codec
from .._render import OMNM, UNDECODABLE, headers_of, message_text, message_to_dict
from ..errors import AozError, TransportError, WaitTimeout
from .templates import TemplateError, parse_duration, render

BodyCodec = Literal["text", "raw", "json", "msgpack", "omnm"]
#: the --codec choices this aoz supports (omnm where aoz.omnm is there)
CODECS = ("text", "raw", "json", "msgpack", *(("omnm",) if OMNM is not None else ()))
NATS_UNBOUNDED = 32_767  # natscli: --count below 1 publishes this many (math.MaxInt16)
PROGRESS_ABOVE = 20  # natscli shows a progress bar above this many messages

EXAMPLES = {
    "pub": """Examples:

  aoz pub MD.NYSE.IBM 'hello'

  aoz pub MD.NYSE.IBM 'tick {{Count}} at {{TimeStamp}}' --count 10 --sleep 100ms

  aoz pub LOAD.test '{{Random 100 200}}' --count 0       # 32,767 messages, as natscli

  echo '{"bid": 1.5}' | aoz pub MD.NYSE.IBM --codec json

Templates: {{Count}} {{TimeStamp}} {{Unix}} {{UnixNano}} {{Time}} {{ID}} {{Random min max}}""",
    "sub": """Examples:

  aoz sub 'MD.>'

  aoz sub 'MD.*.IBM' --count 5 --raw

  aoz sub '^MD\\.NYSE\\..*' --json | jq .data

  aoz sub FILES.in --dump out/ --raw          # one file per message, bytes as received

  aoz sub 'MD.>' --last 1                     # the last value of each subject first

  aoz sub WORK.jobs --queue workers           # share the messages with the group""",
}


# ---------------------------------------------------------------- payloads
def payload(
    body: str | bytes, n: int, codec: BodyCodec, templates: bool = True
) -> tuple[object, Codec]:
    """The value to send as message number ``n`` (templates rendered)."""
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError:
            if codec != "raw":
                raise c.UserError(
                    f"the body is not UTF-8, so it cannot be sent as {codec}; use --codec raw"
                ) from None
            return body, Codec.RAW
    try:
        text = render(body, n) if templates else body
    except TemplateError as exc:
        raise c.UserError(str(exc)) from None
    if codec == "text":
        return text, Codec.TEXT
    if codec == "raw":
        return text.encode("utf-8"), Codec.RAW
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise c.UserError(f"--codec {codec} needs a JSON body: {exc}") from None
    if codec == "omnm":  # {"name": value, "qty:U32": 7} or a list of {name, fid, type, value}
        import importlib

        omnm = importlib.import_module("aoz.omnm")
        try:
            return omnm.from_json(value, key_types=True), OMNM
        except AozError as exc:
            raise c.UserError(f"--codec omnm: {exc}") from None
    return value, Codec.JSON if codec == "json" else Codec.MSGPACK


def codec_of(value: str) -> BodyCodec:
    if value not in CODECS:
        raise typer.BadParameter("choose " + ", ".join(CODECS), param_hint="--codec")
    return value  # type: ignore[return-value]


def body_or_stdin(body: str | None) -> str | bytes:
    import sys

    if body is not None:
        return body
    if sys.stdin.isatty():
        raise typer.BadParameter("give a BODY or pipe one into stdin", param_hint="BODY")
    return sys.stdin.buffer.read()


def duration(value: str | None) -> float:
    if value is None:
        return 0.0
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--sleep") from None


def progress_bar(total: int, what: str) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    return Progress(
        f"[bold]{what}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=c.console(stderr=True),
        transient=False,
    )


# ---------------------------------------------------------------- pub
async def pub(
    conn: dict[str, Any],
    subject: str,
    body: str | bytes,
    *,
    count: int = 1,
    wait: float = 2.0,
    codec: BodyCodec = "text",
    sleep: float = 0.0,
    quiet: bool = False,
    templates: bool = True,
    queue_aware: bool = True,
    headers: dict[str, str] | None = None,
) -> int:
    """Publish ``count`` messages; exit 1 if some had no subscriber (dropped)."""
    c.check_subject(subject, "pub")
    total = NATS_UNBOUNDED if count < 1 else count
    payload(body, 1, codec, templates)  # a bad body or template fails before connecting
    from .. import queues

    dropped = 0
    # a one-shot publisher waits for room at a full subscriber queue instead of dropping
    conn = {"send_policy": "block", **conn} if not os.environ.get("AOZ_SEND_POLICY") else conn
    async with c.open_node(conn) as node:
        if await queues.wait_for_receivers(node, subject, wait):
            # every subscriber, not just the first whose subscription arrived
            await c.wait_for_mesh(node, wait)
        bar = (
            progress_bar(total, f"Publishing to {subject}")
            if total > PROGRESS_ABOVE and not quiet
            else None
        )
        task = bar.add_task("pub", total=total) if bar is not None else None
        if bar is not None:
            bar.start()
        try:
            for n in range(1, total + 1):
                value, cd = payload(body, n, codec, templates)
                try:
                    if queue_aware:
                        sent = await queues.publish(node, subject, value, codec=cd,
                                                    headers=headers)
                    else:
                        sent = 1 if node.has_interest(subject) else 0
                        await node.publish(subject, value, codec=cd, headers=headers)
                except TransportError as exc:
                    c.info(f"message {n} dropped: {exc}")
                    sent = 0
                if not sent:
                    dropped += 1
                if bar is not None:
                    bar.update(task, advance=1)
                if sleep and n < total:
                    await anyio.sleep(sleep)
        finally:
            if bar is not None:
                bar.stop()
        dropped += node.statistics().dropped_out
        # one line that says what happened: nothing is "published" that nobody received
        if not quiet and dropped < total:
            c.info(f"Published {total - dropped} message(s) to {subject!r}")
    if dropped:
        c.error(f"{dropped} of {total} message(s) had no subscriber for {subject!r} "
                f"(waited {wait} s) and were dropped")
        return 1
    return 0


# ---------------------------------------------------------------- sub
async def sub(
    conn: dict[str, Any],
    pattern: str,
    *,
    count: int = 0,
    raw: bool = False,
    as_json: bool = False,
    dump: Path | None = None,
    queue: str | None = None,
    last: int = 0,
    recover: bool = False,
) -> int:
    """Print (or dump) messages matching ``pattern`` until interrupted or ``count`` arrived;
    with ``last``, first the last ``last`` cached messages of each subject."""
    if dump is not None:
        _prepare_dump(dump)
    if queue is not None and (last or recover):
        raise c.UserError("--last and --recover apply to a plain subscription, not --queue")

    async with c.open_node(conn) as node:
        if last and node.settings.mode in ("naming", "udp"):
            # the peers known so far, with their subscriptions in place: history asks them
            with contextlib.suppress(WaitTimeout):
                await node.wait_for_subscribers(None, timeout=2.0)
        async with c.listen(node, pattern, queue, history=last,
                            recover=recover) as subscription:
            n = 0
            async for msg in subscription:
                n += 1
                if dump is not None:
                    _dump(dump, msg, n, raw=raw)
                else:
                    show(msg, n, raw=raw, as_json=as_json)
                if count and n >= count:
                    break
            stats = subscription.statistics()
        if UNDECODABLE.count:
            c.info(f"{UNDECODABLE.count} payload(s) could not be decoded and were shown as bytes")
        if stats.dropped:
            c.error(f"{stats.dropped} message(s) dropped: this command could not keep up")
            return 1
    return 0


#: ``-H key:value`` (repeatable), as natscli's
HeaderOpt = Annotated[
    list[str] | None,
    typer.Option("--header", "-H", metavar="KEY:VALUE",
                 help="A message header (repeat for more), as natscli's -H."),
]


def parse_headers(items: list[str] | None) -> dict[str, str] | None:
    """``["k:v", ...]`` as a dict; a malformed item is a user error (exit 2)."""
    if not items:
        return None
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise c.UserError(f"header {item!r} is not KEY:VALUE (e.g. -H trace:abc)")
        out[key.strip()] = value.strip()
    return out


def show(msg: Message, n: int, *, raw: bool, as_json: bool) -> None:
    """One message on stdout: natscli's header and body, ``--raw`` body lines or JSON."""
    if as_json:
        c.write(msgspec.json.encode(message_to_dict(msg)) + b"\n")
    elif raw:
        c.write(msg.data + b"\n")
    else:
        head = f'[#{n}] Received on "{msg.subject}"'
        if msg.reply:
            head += f' with reply "{msg.reply}"'
        # natscli shows headers as "Key: value" lines between the title and the body
        lines = "".join(f"{k}: {v}\n" for k, v in headers_of(msg).items())
        c.write(f"{head}\n{lines}{message_text(msg)}\n\n".encode())


def _prepare_dump(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise c.UserError(
            f"--dump {directory}: cannot create the directory ({exc.strerror})"
        ) from None


def _dump(directory: Path, msg: Message, n: int, *, raw: bool) -> None:
    """natscli's --dump: one file per message; with --raw the body's exact bytes."""
    if raw:
        (directory / f"{n}.raw").write_bytes(msg.data)
    else:
        (directory / f"{n}.json").write_bytes(msgspec.json.encode(message_to_dict(msg)))


# ---------------------------------------------------------------- typer commands
def register(app: typer.Typer) -> None:
    CodecOpt = Annotated[
        str,
        typer.Option(
            "--codec",
            help="Payload codec of the body: text, raw, json, msgpack or omnm "
            '(the others parse the body as JSON; omnm types keys like "qty:U32").',
        ),
    ]

    @app.command("pub", epilog=EXAMPLES["pub"])
    def _pub(
        subject: Annotated[str, typer.Argument(help="Subject to publish on (no wildcards).")],
        body: Annotated[
            str | None,
            typer.Argument(help="Message body; read from stdin when absent. Templates apply."),
        ] = None,
        count: Annotated[
            int,
            typer.Option(
                "--count", "-c", help="Messages to publish (below 1: 32,767, as natscli)."
            ),
        ] = 1,
        sleep: Annotated[
            str | None,
            typer.Option(
                "--sleep", metavar="DURATION", help="Pause between messages: 0.5, 100ms, 2s."
            ),
        ] = None,
        wait: Annotated[
            float, typer.Option("--wait", min=0.0, help="Seconds to wait for a subscriber first.")
        ] = 2.0,
        codec: CodecOpt = "text",
        quiet: Annotated[
            bool, typer.Option("--quiet", "-q", help="No progress or summary.")
        ] = False,
        templates: Annotated[
            bool, typer.Option("--templates/--no-templates", help="Render {{...}} templates.")
        ] = True,
        header: HeaderOpt = None,
        log_level: c.LogLevel = None,
        naming: c.Naming = None,
        static_bind: c.StaticBind = None,
        static_connect: c.StaticConnect = None,
        config: c.Config = None,
        connect_timeout: c.ConnectTimeout = None,
    ) -> None:
        """Publish a message (COUNT times) once a subscriber is reachable.

        Exit status 1 when messages were dropped because nobody subscribed.
        """
        conn = c.Conn(naming, static_bind, static_connect, config, connect_timeout).kwargs("pub")
        c.run(pub(conn, subject, body_or_stdin(body), count=count, wait=wait,
                  codec=codec_of(codec), sleep=duration(sleep), quiet=quiet,
                  templates=templates, headers=parse_headers(header)))  # fmt: skip

    @app.command("sub", epilog=EXAMPLES["sub"])
    def _sub(
        pattern: Annotated[
            str, typer.Argument(help="Subject, NATS-style pattern (A.*.C, A.>) or ^regex.")
        ],
        count: Annotated[
            int, typer.Option("--count", "-c", min=0, help="Exit after COUNT messages (0 = never).")
        ] = 0,
        raw: Annotated[
            bool,
            typer.Option(
                "--raw", "-r", help="Bodies only, one per line (with --dump: exact bytes)."
            ),
        ] = False,
        as_json: Annotated[
            bool, typer.Option("--json", help="One JSON object per message.")
        ] = False,
        dump: Annotated[
            Path | None,
            typer.Option(
                "--dump", metavar="DIR", help="Write each message to DIR/N.json (N.raw with --raw)."
            ),
        ] = None,
        queue: Annotated[
            str | None,
            typer.Option(
                "--queue",
                metavar="GROUP",
                help="Join a queue group: each message goes to one member.",
            ),
        ] = None,
        last: Annotated[
            int,
            typer.Option("--last", min=0, metavar="N",
                         help="First the last N cached messages of each subject (publishers "
                              "with publish_cache), then live ones."),
        ] = 0,
        recover: Annotated[
            bool,
            typer.Option("--recover", help="Ask the publisher's cache for messages a gap "
                                           "says are missing."),
        ] = False,
        log_level: c.LogLevel = None,
        naming: c.Naming = None,
        static_bind: c.StaticBind = None,
        static_connect: c.StaticConnect = None,
        config: c.Config = None,
        connect_timeout: c.ConnectTimeout = None,
    ) -> None:
        """Print messages matching PATTERN ("Listening on ..." on stderr once subscribed)."""
        conn = c.Conn(naming, static_bind, static_connect, config, connect_timeout).kwargs("sub")
        c.run(sub(conn, pattern, count=count, raw=raw, as_json=as_json, dump=dump, queue=queue,
                  last=last, recover=recover))
