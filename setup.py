"""Builds aoz's optional compiled hot path (aoz/_speedups.pyx); everything else is in
pyproject.toml. Where the extension cannot be built (no C compiler, no Cython), the
build goes on without it and aoz runs its pure-Python hot path, which behaves the same.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed compile into a warning."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # any build failure means "no extension"
            _warn(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            _warn(exc)


def _warn(exc: BaseException) -> None:
    print(
        f"WARNING: aoz's compiled hot path was not built ({exc}); aoz will use its "
        "pure-Python hot path, which behaves the same, only slower",
        file=sys.stderr,
    )


def _extensions() -> list[Extension]:
    if os.environ.get("AOZ_NO_EXTENSIONS", "") not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError as exc:
        _warn(exc)
        return []
    try:
        return cythonize(
            [Extension("aoz._speedups", ["aoz/_speedups.pyx"], extra_compile_args=["-g0"])],
            compiler_directives={"language_level": "3"},
            quiet=True,
        )
    except Exception as exc:  # a Cython error means "no extension"
        _warn(exc)
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
