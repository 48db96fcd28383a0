"""``aoz req`` and ``aoz reply``."""

import time
from typing import Annotated, Any

import msgspec
import typer

import aoz.cli._common as c

from .._mesh.message import Message
from .._protocol import codecs
from .._protocol.codecs import Codec
from .._render import OMNM, UNDECODABLE, message_text, message_to_dict
from ..errors import DecodeError, EncodeError, NoResponders, RequestTimeout, ServiceError
from .pubsub import (
    BodyCodec,
    HeaderOpt,
    body_or_stdin,
    codec_of,
    duration,
    parse_headers,
    payload,
    show,
)

EXAMPLES = {
    "req": """Examples:

  aoz req SVC.echo hello

  aoz req SVC.quote '{"symbol": "IBM"}' --codec json --timeout 2

  aoz req SVC.time --json

  aoz req SVC.ping --replies 0 --timeout 1     # every reply within 1 s""",
    "reply": """Examples:

  aoz reply SVC.echo --echo

  aoz reply SVC.time 'reply {{Count}} at {{TimeStamp}}' --count 1

  aoz reply SVC.work --echo --queue workers    # run several: each request is answered once""",
}


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
    replies: int = 1,
    count: int = 1,
    headers: dict[str, str] | None = None,
) -> int:
    """Send requests and print the replies. 1 when none came in time, 2 when nobody
    listens, 3 when a responder answered with an error."""
    from .. import queues

    c.check_subject(subject, "req")
    payload(body, 1, codec)  # a bad body fails before connecting
    got_any = False
    async with c.open_node(conn) as node:
        if await queues.wait_for_receivers(node, subject, wait):
            # every responder (every queue-group member) should be reachable, not just
            # the first one whose subscription arrived
            await c.wait_for_mesh(node, wait, both_ways=True)
        for n in range(1, max(count, 1) + 1):
            value, cd = payload(body, n, codec)
            start = time.perf_counter()
            try:
                if replies == 1:
                    got = [await node.request(subject, value, timeout=timeout, codec=cd,
                                              headers=headers)]
                else:
                    got = []
                    stream = node.request_many(
                        subject, value, timeout=timeout, max_replies=replies or None, codec=cd,
                        headers=headers,
                    )
                    async for r in stream:
                        got.append(r)
                        _print_reply(r, start, raw=raw, as_json=as_json)
            except NoResponders:
                c.error(f"no responders on {subject!r}")
                return 2
            except RequestTimeout:
                c.error(f"no reply on {subject!r} within {timeout} s")
                return 1
            except ServiceError as exc:
                c.error(str(exc))
                return 3
            if replies == 1:
                _print_reply(got[0], start, raw=raw, as_json=as_json)
            elif not got:
                c.error(f"no reply on {subject!r} within {timeout} s")
                return 1
            else:
                c.info(f"{len(got)} replies")
            got_any = got_any or bool(got)
    return 0 if got_any else 1


def _print_reply(reply: Message, start: float, *, raw: bool, as_json: bool) -> None:
    rtt = time.perf_counter() - start
    c.info(f"Received with rtt {rtt * 1000:.3f} ms")
    if as_json:
        c.write(msgspec.json.encode(message_to_dict(reply)) + b"\n")
    elif raw:
        c.write(reply.data + b"\n")
    else:
        c.write(message_text(reply).encode() + b"\n")


async def reply(
    conn: dict[str, Any],
    subject: str,
    body: str | bytes | None,
    *,
    echo: bool = False,
    count: int = 0,
    codec: BodyCodec = "text",
    queue: str | None = None,
    sleep: float = 0.0,
) -> int:
    """Answer requests on ``subject`` with ``body`` (or their own body with ``echo``)."""
    import anyio

    c.check_subject(subject, "reply")
    if body is not None:
        payload(body, 1, codec)  # a bad body fails before connecting
    async with c.open_node(conn) as node, c.listen(node, subject, queue) as subscription:
        n = 0
        async for msg in subscription:
            if msg.reply is None:
                c.info(f"ignoring a {msg.kind.name.lower()} on {msg.subject!r}: not a request")
                continue
            n += 1
            show(msg, n, raw=False, as_json=False)
            if sleep:
                await anyio.sleep(sleep)
            # No wait for the requester's inbox here: respond() does that (bug 6).
            if echo:
                await _echo(msg)
            else:
                assert body is not None
                value, cd = payload(body, n, codec)
                await msg.respond(value, codec=cd)
            if count and n >= count:
                break
    return 0


async def _echo(msg: Message) -> None:
    if msg.codec is Codec.UNKNOWN or (OMNM is not None and msg.codec is OMNM):
        # no aoz codec byte to choose: echo the payload verbatim, where aoz can
        verbatim = getattr(codecs, "Verbatim", None)
        if verbatim is not None:
            await msg.respond(verbatim(msg.payload))
            return
    if msg.codec in (Codec.MSGPACK, Codec.JSON, Codec.TEXT):
        try:
            await msg.respond(msg.decode(), codec=msg.codec)
            return
        except (DecodeError, EncodeError, RecursionError):
            UNDECODABLE.count += 1  # echo the bytes
    await msg.respond(msg.data, codec=Codec.RAW)


def register(app: typer.Typer) -> None:
    CodecOpt = Annotated[
        str,
        typer.Option(
            "--codec", help="Payload codec of the body: text, raw, json, msgpack or omnm."
        ),
    ]

    @app.command("req", epilog=EXAMPLES["req"])
    def _req(
        subject: Annotated[str, typer.Argument(help="Subject of the request.")],
        body: Annotated[
            str | None, typer.Argument(help="Request body (templates apply); stdin when absent.")
        ] = None,
        timeout: Annotated[
            float, typer.Option("--timeout", "-t", min=0.0, help="Seconds to wait for replies.")
        ] = 1.0,
        replies: Annotated[
            int,
            typer.Option(
                "--replies", min=0, help="Wait for N replies (0: every reply until --timeout)."
            ),
        ] = 1,
        count: Annotated[
            int, typer.Option("--count", "-c", min=1, help="Send COUNT requests.")
        ] = 1,
        wait: Annotated[
            float, typer.Option("--wait", min=0.0, help="Seconds to wait for a responder first.")
        ] = 2.0,
        codec: CodecOpt = "text",
        raw: Annotated[bool, typer.Option("--raw", "-r", help="Print the replies' bytes.")] = False,
        header: HeaderOpt = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print replies as JSON objects.")
        ] = False,
        log_level: c.LogLevel = None,
        naming: c.Naming = None,
        static_bind: c.StaticBind = None,
        static_connect: c.StaticConnect = None,
        config: c.Config = None,
        connect_timeout: c.ConnectTimeout = None,
    ) -> None:
        """Send a request and print the reply (round-trip time on stderr).

        Exit status 1 when no reply comes in time, 2 when nobody subscribes to SUBJECT,
        3 when a responder answered with an error. Queue groups are reached too (one
        member per group answers).
        """
        conn = c.Conn(naming, static_bind, static_connect, config, connect_timeout).kwargs("req")
        c.run(req(conn, subject, body_or_stdin(body), timeout=timeout, wait=wait,
                  codec=codec_of(codec), raw=raw, as_json=as_json, replies=replies,
                  count=count, headers=parse_headers(header)))  # fmt: skip

    @app.command("reply", epilog=EXAMPLES["reply"])
    def _reply(
        subject: Annotated[str, typer.Argument(help="Subject to answer requests on.")],
        body: Annotated[
            str | None, typer.Argument(help="Reply body ({{Count}} is the request number).")
        ] = None,
        echo: Annotated[
            bool, typer.Option("--echo", help="Answer with the request's own body.")
        ] = False,
        queue: Annotated[
            str | None,
            typer.Option(
                "--queue",
                metavar="GROUP",
                help="Join a queue group: each request is answered by one member.",
            ),
        ] = None,
        count: Annotated[
            int, typer.Option("--count", "-c", min=0, help="Exit after COUNT requests (0 = never).")
        ] = 0,
        sleep: Annotated[
            str | None, typer.Option("--sleep", metavar="DURATION", help="Pause before each reply.")
        ] = None,
        codec: CodecOpt = "text",
        log_level: c.LogLevel = None,
        naming: c.Naming = None,
        static_bind: c.StaticBind = None,
        static_connect: c.StaticConnect = None,
        config: c.Config = None,
        connect_timeout: c.ConnectTimeout = None,
    ) -> None:
        """Answer requests on SUBJECT with BODY (or --echo)."""
        if body is None and not echo:
            raise typer.BadParameter("give a BODY or --echo", param_hint="BODY")
        conn = c.Conn(naming, static_bind, static_connect, config, connect_timeout).kwargs("reply")
        c.run(reply(conn, subject, body, echo=echo, count=count, codec=codec_of(codec),
                    queue=queue, sleep=duration(sleep)))  # fmt: skip
