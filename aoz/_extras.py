"""Optional dependencies: a missing one names the extra that installs it, and every
module of that extra that is missing, in one message."""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["EXTRAS", "missing_extra", "missing_modules", "require"]

#: the import names each extra of pyproject.toml brings
EXTRAS: dict[str, tuple[str, ...]] = {
    "record": ("pyarrow",),
    "spark": ("pyspark", "pyarrow", "pandas"),
    "cli": ("typer", "rich"),
    "fastapi": ("fastapi",),
    "prometheus": ("prometheus_client",),
    "otel": ("opentelemetry",),
}


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here."""
    out = []
    for name in EXTRAS[extra]:
        if name in sys.modules:
            if sys.modules[name] is None:  # blocked (tests do this)
                out.append(name)
            continue
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out


def _message(feature: str, extra: str, missing: list[str]) -> str:
    return (f"{feature} needs the '{extra}' extra: pip install 'aoz[{extra}]' "
            f"({', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing)")


def require(feature: str, extra: str) -> None:
    """Raise one ImportError naming ``extra`` and all of its missing modules, if any."""
    missing = missing_modules(extra)
    if missing:
        raise ImportError(_message(feature, extra, missing), name=missing[0])


def missing_extra(exc: ImportError, extra: str, feature: str) -> ImportError:
    """The ImportError to raise when ``feature`` cannot import its optional dependency::

        try:
            import fastapi
        except ImportError as exc:
            raise missing_extra(exc, "fastapi", "aoz.fastapi") from exc

    It names every module of the extra that is missing, not only the first.

    >>> str(missing_extra(ImportError(name="fastapi"), "fastapi", "aoz.fastapi"))[:58]
    "aoz.fastapi needs the 'fastapi' extra: pip install 'aoz[fa"
    """
    missing = missing_modules(extra) or [exc.name or "a dependency"]
    return ImportError(_message(feature, extra, missing), name=exc.name)
