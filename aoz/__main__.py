"""``python -m aoz <verb>``: the same command line as the ``aoz`` console script.

``python -m aoz nsd`` runs the naming daemon even without the ``cli`` extra, and
``python -m aoz demo`` runs the market-data demo when it is there (it lives in the
repository, ``examples/marketdata``, not in the library: see :mod:`aoz._examples`).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "demo":
        from ._examples import run_demo

        return run_demo(args[1:])
    if args and args[0] == "nsd":
        from ._discovery.nsd import main as nsd_main

        return nsd_main(args[1:])
    from .cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
