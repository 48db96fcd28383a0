"""The typer application: the root options and one module per group of verbs."""

from typing import Annotated

import typer

import aoz.cli._common as c

HELP = (
    "aoz: asyncio messaging over ZeroMQ, wire-compatible with OZ. "
    "Data goes to stdout, logs to stderr. --log-level works before or after the verb."
)


def build_app() -> typer.Typer:
    # each module registers its verbs (imported by name: the package imports this module)
    from .asyncapi import register as register_asyncapi
    from .bench import register as register_bench
    from .daemons import register as register_daemons
    from .peers import register as register_peers
    from .pubsub import register as register_pubsub
    from .reqrep import register as register_reqrep

    app = typer.Typer(
        name="aoz",
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        context_settings={"help_option_names": ["-h", "--help"]},
        pretty_exceptions_enable=False,
    )

    def show_version(value: bool) -> None:
        if value:
            import aoz

            print(f"aoz {aoz.__version__} (hot path: {aoz.hot_path()}, "
                  f"omnm codec: {aoz.omnm.implementation()})")
            raise typer.Exit(0)

    @app.callback()
    def _root(
        log_level: c.LogLevel = None,
        version: Annotated[
            bool,
            typer.Option(
                "--version",
                is_eager=True,
                callback=show_version,
                help="Print the version and exit.",
            ),
        ] = False,
    ) -> None:
        """Options before the verb."""

    register_pubsub(app)
    register_reqrep(app)
    register_peers(app)
    register_bench(app)
    register_daemons(app)
    register_asyncapi(app)
    return app
