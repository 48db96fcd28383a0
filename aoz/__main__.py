"""``python -m aoz <verb>``: the same command line as the ``aoz`` console script.

``python -m aoz nsd`` runs the naming daemon even without the ``cli`` extra, and
``python -m aoz demo`` runs the market-data demo when it is there (it lives in the
repository, ``examples/marketdata``, not in the library: see :func:`run_demo`).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "demo":
        return run_demo(args[1:])
    if args and args[0] == "nsd":
        from .discovery.nsd import main as nsd_main

        return nsd_main(args[1:])
    from .cli import main as cli_main

    return cli_main(args)


def run_demo(argv: list[str]) -> int:
    """Run ``examples/marketdata`` from a clone of the repository (the current directory)."""
    import importlib
    from pathlib import Path

    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        demo = importlib.import_module("examples.marketdata.demo")
    except ImportError as exc:
        print(
            f"the demo is not installed with aoz ({exc}); it lives in the repository: "
            "git clone it and run `make demo` there",
            file=sys.stderr,
        )
        return 2
    return int(demo.main(argv) or 0)


if __name__ == "__main__":
    sys.exit(main())
