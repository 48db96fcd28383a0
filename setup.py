"""Builds aoz's optional compiled modules: the data plane's hot path (aoz/_mesh/_speedups.pyx)
and the omnm codec (aoz/omnm/_fast.pyx); everything else is in pyproject.toml. Where
one cannot be built (no C compiler, no Cython), the build goes on without it and aoz
runs its pure-Python twin, which behaves the same. Each is built (or not) on its own.
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
        f"WARNING: an aoz compiled module was not built ({exc}); aoz will use its "
        "pure-Python twin, which behaves the same, only slower",
        file=sys.stderr,
    )


#: (module, source) of each compiled twin
EXTENSIONS = (
    ("aoz._mesh._speedups", "aoz/_mesh/_speedups.pyx"),
    ("aoz.omnm._fast", "aoz/omnm/_fast.pyx"),
)


def _extensions() -> list[Extension]:
    if os.environ.get("AOZ_NO_EXTENSIONS", "") not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError as exc:
        _warn(exc)
        return []
    out: list[Extension] = []
    for name, source in EXTENSIONS:
        try:  # one by one: a Cython error in one module leaves the other built
            out += cythonize(
                [Extension(name, [source], extra_compile_args=["-g0"])],
                compiler_directives={"language_level": "3"},
                quiet=True,
            )
        except Exception as exc:  # a Cython error means "no extension"
            _warn(exc)
    return out

setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
