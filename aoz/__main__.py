"""``python -m aoz <verb>``: the same command line as the ``aoz`` console script.

``python -m aoz nsd`` runs the naming daemon even without the ``cli`` extra, and
``python -m aoz demo`` runs :func:`aoz.demo.main`; both are imported only when asked for.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "demo":
        from . import demo

        return int(demo.main(args[1:]) or 0)
    if args and args[0] == "nsd":
        from .discovery.nsd import main as nsd_main

        return nsd_main(args[1:])
    from .cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
