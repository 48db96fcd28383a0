"""natscli's body templates and durations, for ``aoz pub``/``req``/``reply``. Pure.

=====================  ===============================================
``{{Count}}``          the message number (1, 2, ...)
``{{TimeStamp}}``      the current time, RFC 3339 (UTC)
``{{Unix}}``           seconds since 1970 (UTC)
``{{UnixNano}}``       nanoseconds since 1970 (UTC)
``{{Time}}``           the current time of day, ``HH:MM:SS``
``{{ID}}``             a unique id (22 characters)
``{{Random a b}}``     a random string of ``a`` to ``b`` letters and digits
=====================  ===============================================

Spaces inside the braces and natscli's Go-template dot (``{{.Count}}``) are accepted.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import secrets
import string
import time
from collections.abc import Callable

__all__ = ["TemplateError", "parse_duration", "render"]

_TOKEN = re.compile(r"\{\{\s*\.?\s*([A-Za-z]+)((?:\s+\d+)*)\s*\}\}")
_ALNUM = string.ascii_letters + string.digits
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|ms|s|m|h)?\s*$")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class TemplateError(ValueError):
    """A template that cannot be rendered (unknown function, bad arguments)."""


def _random(args: list[int], rng: random.Random) -> str:
    if len(args) != 2 or args[0] > args[1]:
        raise TemplateError(
            "{{Random min max}} needs two numbers, min <= max, e.g. {{Random 10 100}}"
        )
    return "".join(rng.choices(_ALNUM, k=rng.randint(args[0], args[1])))


def render(
    template: str,
    count: int,
    *,
    now: Callable[[], float] = time.time,
    rng: random.Random | None = None,
) -> str:
    """Replace the template functions in ``template`` for message number ``count``.

    >>> render("tick {{Count}} of {{ .Count }}", 3)
    'tick 3 of 3'
    >>> render("{{Unix}}", 1, now=lambda: 1700000000.5)
    '1700000000'
    """
    if "{{" not in template:
        return template
    rng = rng or random.Random()

    def one(m: re.Match[str]) -> str:
        name, raw_args = m.group(1), m.group(2).split()
        args = [int(a) for a in raw_args]
        if name == "Random":
            return _random(args, rng)
        if args:
            raise TemplateError(f"{{{{{name}}}}} takes no arguments")
        if name == "Count":
            return str(count)
        t = now()
        if name == "TimeStamp":
            return (
                dt.datetime.fromtimestamp(t, dt.UTC)
                .isoformat(timespec="seconds")
                .replace("+00:00", "Z")
            )
        if name == "Unix":
            return str(int(t))
        if name == "UnixNano":
            return str(int(t * 1e9))
        if name == "Time":
            return time.strftime("%H:%M:%S", time.localtime(t))
        if name == "ID":
            return secrets.token_urlsafe(16)[:22]
        raise TemplateError(
            f"unknown template function {{{{{name}}}}}; use Count, TimeStamp, Unix, UnixNano, "
            "Time, ID or Random min max"
        )

    return _TOKEN.sub(one, template)


def parse_duration(text: str) -> float:
    """Seconds from ``"0.5"``, ``"100ms"``, ``"2s"``, ``"1m"`` (natscli's Go durations).

    >>> parse_duration("100ms"), parse_duration("1.5"), parse_duration("2m")
    (0.1, 1.5, 120.0)
    """
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a duration; use e.g. 0.5, 100ms, 2s or 1m")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]
