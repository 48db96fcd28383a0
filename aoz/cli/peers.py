"""``aoz peers``: the mesh as a table."""

import time
from typing import Annotated, Any

import msgspec
import typer

import aoz.cli._common as c

EXAMPLES = """Examples:

  aoz peers

  aoz peers --once --wait 3

  aoz peers --once --min 4 --wait 30     # wait for a mesh of 4 to form

  aoz peers --once --json --naming tcp://10.0.0.5:5756"""


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

    async with c.open_node(conn) as node:

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
                    c.write(msgspec.json.encode(p) + b"\n")
            else:
                c.console().print(_peer_table(table))
            if len(table) < at_least:
                c.error(f"only {len(table)} peer(s) after {wait} s, expected {at_least}")
                return 1
            return 0
        from rich.live import Live

        with Live(_peer_table([]), console=c.console(), auto_refresh=False) as live:
            while True:
                live.update(_peer_table(others()))
                live.refresh()
                await anyio.sleep(interval)


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


def register(app: typer.Typer) -> None:
    @app.command("peers", epilog=EXAMPLES)
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
        log_level: c.LogLevel = None,
        naming: c.Naming = None,
        static_bind: c.StaticBind = None,
        static_connect: c.StaticConnect = None,
        config: c.Config = None,
        connect_timeout: c.ConnectTimeout = None,
    ) -> None:
        """Show the nodes of the mesh: program, host, pid, uuid, endpoint, last seen."""
        conn = c.Conn(naming, static_bind, static_connect, config, connect_timeout).kwargs("peers")
        c.run(peers(conn, once=once, wait=wait, at_least=at_least, as_json=as_json,
                    interval=interval))  # fmt: skip
