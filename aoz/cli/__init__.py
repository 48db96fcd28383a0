"""The ``aoz`` command line (needs the ``aoz[cli]`` extra: typer + rich).

In the style of the ``nats`` CLI: the verb comes first, data goes to stdout, logs and
diagnostics to stderr, and a failure gives a non-zero exit status::

    aoz nsd --port 5756 &                      # a naming daemon
    aoz sub 'MD.>'                             # print everything under MD.
    aoz pub MD.NYSE.IBM 'bid {{Count}}' --count 3
    aoz reply SVC.echo --echo --queue workers  # answer requests (a queue group member)
    aoz req SVC.echo hello                     # prints the reply; rtt on stderr
    aoz peers --once                           # the mesh as a table
    aoz bench BENCH.test --pub 1 --sub 2       # measure your mesh

One module per group of verbs: :mod:`.pubsub` (pub, sub), :mod:`.reqrep` (req,
reply), :mod:`.peers`, :mod:`.bench`, :mod:`.daemons` (nsd, broker, record, demo);
:mod:`._common` holds the shared options and error handling, :mod:`.templates` the
natscli body templates.

Exit status: 0 success, 1 failure (a timeout, dropped messages, an aoz error), 2 usage
errors (also ``aoz req`` finding no responders), 130 interrupted, 143 terminated.

typer and rich are imported only when the command line runs.
"""

from __future__ import annotations

import logging
import sys

from .._render import UNDECODABLE, message_text, message_to_dict

__all__ = ["UNDECODABLE", "main", "message_text", "message_to_dict"]

_LEVELS = ("debug", "info", "warning", "error", "critical")
_DAEMONS = ("nsd", "broker")  # they log joins, leaves and readiness at INFO by default


def _error(text: str) -> None:
    print(f"aoz: error: {text}", file=sys.stderr, flush=True)


def _take_log_level(args: list[str]) -> tuple[list[str], str | None]:
    """Remove ``--log-level X`` / ``--log-level=X`` from anywhere before ``--``."""
    out: list[str] = []
    level: str | None = None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            out += args[i:]
            break
        if a == "--log-level":
            if i + 1 >= len(args):
                raise ValueError("--log-level needs a value: " + ", ".join(_LEVELS))
            level = args[i + 1]
            i += 2
            continue
        if a.startswith("--log-level="):
            level = a.split("=", 1)[1]
            i += 1
            continue
        out.append(a)
        i += 1
    if level is not None and level.lower() not in _LEVELS:
        raise ValueError(f"--log-level {level!r} is not a level; use one of: " + ", ".join(_LEVELS))
    return out, level


def main(argv: list[str] | None = None) -> int:
    """Run the ``aoz`` command line with ``argv`` (default: ``sys.argv[1:]``); returns
    the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        args, level = _take_log_level(args)
    except ValueError as exc:
        _error(str(exc))
        return 2
    if args in (["--version"], ["-V"]):  # needs no extra (typer, rich)
        import aoz

        print(f"aoz {aoz.__version__} (hot path: {aoz.hot_path()}, "
              f"omnm codec: {aoz.omnm.implementation()})")
        return 0
    verb = next((a for a in args if not a.startswith("-")), "")
    default = "info" if verb in _DAEMONS else "warning"
    logging.basicConfig(
        stream=sys.stderr,
        level=(level or default).upper(),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        import rich  # noqa: F401
        import typer
    except ImportError as exc:
        if verb == "nsd":  # the daemon needs no extras
            from .._discovery.nsd import main as nsd_main

            rest = args[args.index("nsd") + 1 :]
            return nsd_main([*rest, "--log-level", level or default])
        _error(f"the aoz command line needs its extra: pip install 'aoz[cli]' ({exc.name} missing)")
        return 2
    from .app import build_app

    app = build_app()
    try:
        app(args=args, prog_name="aoz", standalone_mode=True)
    except SystemExit as exc:
        return _exit_code(exc.code)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a user error raised while parsing options
        from ._common import report

        code = report(exc)
        if code is None:
            raise
        return code
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
