"""What every verb shares: output, connection options, running a verb, user errors.

Imported only when the command line runs (it imports typer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from .._mesh.tasks import unwrap
from ..errors import AozError, WaitTimeout

log = logging.getLogger("aoz.cli")

EXIT_LINGER = 2.0  # seconds, see connect_kwargs
FLUSH_LINGER_MS = 1000  # at most this long at exit for queued frames to leave
WAITING_NOTICE = 1.0  # seconds before "waiting for the naming daemon" is said (once)
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class UserError(Exception):
    """A mistake in the command line or its environment: a message, exit status 2."""


# ---------------------------------------------------------------- output
def info(text: str) -> None:
    """A diagnostic line on stderr (data goes to stdout)."""
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def error(text: str) -> None:
    print(f"aoz: error: {text}", file=sys.stderr, flush=True)


def write(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def console(stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Not a terminal (a pipe, a test): wide enough that uuids and endpoints stay whole.
    return Console(stderr=stderr) if stream.isatty() else Console(stderr=stderr, width=200)


# ---------------------------------------------------------------- options
Naming = Annotated[
    list[str] | None,
    typer.Option(
        "--naming",
        metavar="tcp://HOST:PORT",
        help="Naming daemon address (repeatable). Default: AOZ_NAMING or tcp://127.0.0.1:5756.",
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
ConnectTimeout = Annotated[
    float | None,
    typer.Option(
        "--connect-timeout",
        min=0.1,
        metavar="SECONDS",
        help="How long to wait for a naming daemon (default: the settings', 10 s).",
        rich_help_panel="Connection",
    ),
]
LogLevel = Annotated[
    str | None,
    typer.Option(
        "--log-level",
        metavar="LEVEL",
        help="debug, info, warning, error or critical (before or after the verb).",
    ),
]


class Conn:
    """The connection options every networking verb takes."""

    def __init__(
        self,
        naming: list[str] | None = None,
        static_bind: list[str] | None = None,
        static_connect: list[str] | None = None,
        config: Path | None = None,
        connect_timeout: float | None = None,
    ) -> None:
        self.naming = naming
        self.static_bind = static_bind
        self.static_connect = static_connect
        self.config = config
        self.connect_timeout = connect_timeout

    def kwargs(self, verb: str) -> dict[str, Any]:
        """Keywords for :func:`aoz.connect`."""
        out: dict[str, Any] = {"program": f"aoz-{verb}"}
        if not os.environ.get("AOZ_LINGER"):
            # A command exits right after its last publish or reply: give ZeroMQ time to
            # hand it to the kernel (linger only waits while frames are still queued).
            out["linger"] = EXIT_LINGER
        if self.naming:
            out["naming"] = list(self.naming)
        if self.static_bind:
            out["bind"] = list(self.static_bind)
        if self.static_connect:
            out["connect"] = list(self.static_connect)
        if self.config is not None:
            if not self.config.is_file():
                raise UserError(f"--config {self.config}: no such file")
            out["config"] = str(self.config)
        if self.connect_timeout is not None:
            interval = 0.1
            out["connect_interval"] = interval
            out["connect_retries"] = max(1, math.ceil(self.connect_timeout / interval))
        return out


@contextlib.asynccontextmanager
async def open_node(conn: dict[str, Any]) -> AsyncIterator[Any]:
    """``aoz.connect(**conn)``, saying once on stderr when it waits for a naming daemon."""
    import aoz

    node = aoz.connect(**conn)
    async with anyio.create_task_group() as tg:

        async def notice() -> None:
            await anyio.sleep(WAITING_NOTICE)
            s = node.settings
            if s.mode == "naming":
                limit = s.connect_retries * s.connect_interval
                info(
                    f"waiting for a naming daemon at {', '.join(s.naming)} "
                    f"(up to {limit:.0f} s; --connect-timeout)"
                )

        tg.start_soon(notice)
        try:
            await node.start()
        finally:
            tg.cancel_scope.cancel()
    try:
        yield node
    finally:
        with anyio.CancelScope(shield=True):
            await node.aclose()


async def wait_for_interest(node: Any, subject: str, wait: float) -> bool:
    if wait <= 0:
        return bool(node.has_interest(subject))
    try:
        await node.wait_for_interest(subject, timeout=wait)
    except WaitTimeout:
        return False
    return True


async def wait_for_mesh(node: Any, timeout: float, *, both_ways: bool = False) -> int:
    """Wait (at most ``timeout`` s) until every peer discovery knows has its
    subscriptions at our publisher (:meth:`aoz.Node.wait_for_subscribers`); how many
    peers, 0 when they did not all arrive in time (the verb goes on regardless).

    For verbs that want every receiver (``pub``, ``req --replies``), not just the first.
    ``both_ways`` also waits for our side of each link (``node.links``): a requester
    that collects every reply needs each responder's publisher connected to us too.
    """
    with anyio.move_on_after(timeout):
        try:
            peers = int(await node.wait_for_subscribers(None, timeout))
        except WaitTimeout:
            return 0
        if not both_ways:
            return peers
        events = node.peer_events(links=True, current=True)
        try:
            up = {uuid for uuid, is_up in node.links.items() if is_up}
            while not set(node.links) <= up:
                ev = await events.__anext__()
                if ev.kind == "link_up":
                    up.add(ev.peer.uuid)
                elif ev.kind in ("link_down", "left", "expired"):
                    up.discard(ev.peer.uuid)
            return peers
        finally:
            await events.aclose()
    return 0


def listen(node: Any, pattern: str, queue: str | None, *, history: int = 0,
           recover: bool = False) -> Any:
    """``node.subscribe(pattern)``, or a queue-group membership; says it is listening."""
    from .. import queues

    if queue is None:
        subscription: Any = node.subscribe(pattern, history=history, recover=recover)
    else:
        try:
            subscription = queues.subscribe(node, pattern, queue)
        except AozError as exc:
            raise UserError(f"--queue: {exc}") from None
    where = f" in queue group {queue!r}" if queue else ""
    info(f"Listening on {pattern!r}{where}")
    return subscription


def check_subject(subject: str, verb: str) -> str:
    """A concrete subject to send on: no wildcards, no empty tokens."""
    tokens = subject.split(".")
    if "" in tokens:
        raise UserError(
            f"aoz {verb}: subject {subject!r} has an empty token; "
            "use dot-separated names such as MD.NYSE.IBM"
        )
    if "*" in tokens or ">" in tokens or subject.startswith("^"):
        raise UserError(
            f"aoz {verb}: subject {subject!r} is a pattern; {verb} needs a concrete subject "
            "such as MD.NYSE.IBM (patterns are for aoz sub)"
        )
    return subject


# ---------------------------------------------------------------- running a verb
def run(coro: Coroutine[Any, Any, int], *, own_signals: bool = False) -> None:
    """Run a verb's coroutine; exit with its status (typer.Exit when non-zero)."""
    code = arun(coro, own_signals=own_signals)
    if code:
        raise typer.Exit(code)


def arun(coro: Coroutine[Any, Any, int], *, own_signals: bool = False) -> int:
    """Run a verb; aoz errors and user errors become a message and exit 1 / 2, SIGTERM a
    clean shutdown (unless the verb handles signals itself: ``own_signals``)."""

    async def guarded() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        terminated = False

        def on_sigterm() -> None:
            nonlocal terminated
            terminated = True
            task.cancel()

        # SIGTERM cancels like Ctrl-C does, so the node still says goodbye.
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
    except Exception as exc:
        code = report(exc)
        if code is None:
            raise
        return code
    finally:
        flush_zmq()


def report(exc: BaseException) -> int | None:
    """Print a user-facing error for ``exc``; its exit status, or None for a bug."""
    err = unwrap(exc)
    if isinstance(err, UserError):
        error(str(err))
        return 2
    if isinstance(err, AozError):
        error(str(err))
        return 1
    if isinstance(err, OSError):  # an unwritable directory, a full disk...
        where = f": {err.filename}" if getattr(err, "filename", None) else ""
        error(f"{err.strerror or err}{where}")
        return 1
    return None


def flush_zmq() -> None:
    """Let the naming goodbye (``D``) leave before the process exits. A node's data
    sockets (a reply, the last publish) are flushed when the node closes: each node
    terminates its own context; the naming sockets share aoz's naming context."""
    from .._discovery.driver import flush_naming

    flush_naming(FLUSH_LINGER_MS)
