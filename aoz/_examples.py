"""Running the repository's examples from the library's command lines (``aoz demo``).

The demo is not part of the library: it lives in ``examples/marketdata`` of a clone. This
module (imported by both :mod:`aoz.__main__` and :mod:`aoz.cli`, so neither imports the
other) finds it from the current directory.
"""

from __future__ import annotations

import sys

__all__ = ["run_demo"]


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
