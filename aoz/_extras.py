"""Optional dependencies: a missing one names the extra that installs it."""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(exc: ImportError, extra: str, feature: str) -> ImportError:
    """The ImportError to raise when ``feature`` cannot import its optional dependency::

        try:
            import fastapi
        except ImportError as exc:
            raise missing_extra(exc, "fastapi", "aoz.fastapi") from exc

    >>> str(missing_extra(ImportError(name="fastapi"), "fastapi", "aoz.fastapi"))
    "aoz.fastapi needs the 'fastapi' extra: pip install 'aoz[fastapi]' (fastapi is missing)"
    """
    return ImportError(
        f"{feature} needs the '{extra}' extra: pip install 'aoz[{extra}]' "
        f"({exc.name or 'a dependency'} is missing)",
        name=exc.name,
    )
