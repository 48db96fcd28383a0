"""Subjects, subscription patterns and their ZeroMQ prefixes (SPEC §7). Pure.

Theory of operation
-------------------
A subject is 1..256 bytes of UTF-8 without NUL. A subscription is one of:

``exact``
    a plain subject (``"MD.NYSE.IBM"``). Its ZeroMQ filter is ``subject + b"\\0"``, so
    the publisher sends exactly that subject and nothing else.
``tokens``
    NATS-style wildcards: the subject splits on ``.``; a token ``*`` matches exactly
    one non-empty token and a last token ``>`` matches one or more non-empty trailing
    tokens (``"MD.*.IBM"``, ``"MD.>"``). A ``*`` or ``>`` inside a longer token is
    literal, as in NATS.
``regex``
    OZ-style regular expressions (Python :mod:`re` syntax), chosen when the pattern
    starts with ``^`` or when ``regex=True``; matched with ``re.search`` against the
    whole subject, so the pattern's own anchors decide.

ZeroMQ filters by byte prefix at the publisher, so a wildcard pattern subscribes to
the longest literal prefix that every matching subject is *guaranteed* to start with;
the subscriber then checks each message with :meth:`Pattern.matches`. A prefix that is
too long would silently lose messages (OZ's own rule does), so for regexes the prefix
comes from the standard library's regex parser and falls back to ``b""`` (everything)
whenever the pattern is not a plain anchored literal run.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any, Final, Literal

from ..errors import SubjectError

# The stdlib's regex parser is private (no stubs), so it is typed Any and every use
# is guarded: if it is missing or changes, prefixes fall back to b"" (always safe).
_sre_parse: Any
_sre_c: Any
try:
    _sre_parse = importlib.import_module("re._parser")
    _sre_c = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - other Pythons
    _sre_parse = _sre_c = None

__all__ = [
    "HIDDEN_PREFIXES",
    "MAX_SUBJECT",
    "RESERVED_PREFIXES",
    "Pattern",
    "PatternKind",
    "compile_pattern",
    "hidden_from_wildcards",
    "is_reserved",
    "subject_bytes",
]

#: longest subject, in bytes (UTF-8)
MAX_SUBJECT: Final = 256
#: subjects that belong to aoz itself; wildcard subscriptions never see them
#: (``_AOZ.``: aoz's control frames, such as publisher heartbeats)
RESERVED_PREFIXES: Final = ("_INBOX.", "_NAMING", "_AOZ.")

PatternKind = Literal["exact", "tokens", "regex"]

_WILDCARDS: Final = frozenset(("*", ">"))
_ONE_TOKEN: Final = r"[^.]+"
_REST_TOKENS: Final = r"[^.]+(?:\.[^.]+)*"


def _short(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


def subject_bytes(subject: str) -> bytes:
    """Validate a subject to publish or request on, and return it encoded (UTF-8).

    A subject is a ``str`` of 1..256 bytes once encoded, without NUL.
    Raises :class:`aoz.errors.SubjectError` naming the rule that is broken.

    >>> subject_bytes("MD.NYSE.IBM")
    b'MD.NYSE.IBM'
    """
    if not isinstance(subject, str):
        raise SubjectError(
            f"a subject must be a str, not {type(subject).__name__} ({subject!r:.80}); "
            "decode bytes first",
            subject=subject if isinstance(subject, bytes) else None,
        )
    try:
        data = subject.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SubjectError(
            f"subject {_short(subject)} cannot be encoded as UTF-8 ({exc.reason}); "
            "remove lone surrogates",
            subject=subject,
        ) from None
    n = len(data)
    if n == 0:
        raise SubjectError("the subject is empty; use 1..256 bytes, e.g. 'MD.IBM'", subject="")
    if n > MAX_SUBJECT:
        raise SubjectError(
            f"subject {_short(subject)} is {n} bytes long in UTF-8; "
            f"at most {MAX_SUBJECT} are allowed",
            subject=subject,
        )
    if b"\x00" in data:
        raise SubjectError(
            f"subject {_short(subject)} contains a NUL character, which ends subjects "
            "on the wire; remove it",
            subject=subject,
        )
    return data


#: subjects wildcard subscriptions never receive: the reserved ones and queue-group
#: member subjects (aoz.queues), which carry copies of messages sent on another subject
HIDDEN_PREFIXES: Final = (*RESERVED_PREFIXES, "_QUEUE.")


def hidden_from_wildcards(subject: str) -> bool:
    """True for subjects a wildcard or regex subscription must not receive.

    >>> hidden_from_wildcards("_QUEUE.workers.m-1.SVC.work"), hidden_from_wildcards("MD.IBM")
    (True, False)
    """
    return subject.startswith(HIDDEN_PREFIXES)


def is_reserved(subject: str) -> bool:
    """True for aoz's own subjects (reply inboxes, naming), which wildcards never receive.

    >>> is_reserved("_INBOX.3669840e-d043-11ea-adc2-fcaa146e6b01.0000000000000001")
    True
    >>> is_reserved("MD.IBM")
    False
    """
    return subject.startswith(RESERVED_PREFIXES)


class Pattern:
    """A compiled subscription pattern (immutable). Build it with :func:`compile_pattern`.

    Attributes:
        text: the pattern as the user wrote it.
        kind: ``"exact"``, ``"tokens"`` or ``"regex"``.
        zmq_prefix: the ZeroMQ SUBSCRIBE filter; every subject this pattern matches,
            followed by NUL, starts with it (``b""`` subscribes to everything).

    >>> p = compile_pattern("MD.*.IBM")
    >>> p.kind, p.zmq_prefix, p.matches("MD.NYSE.IBM"), p.matches("MD.IBM")
    ('tokens', b'MD.', True, False)
    """

    __slots__ = ("_match", "kind", "text", "zmq_prefix")

    text: str
    kind: PatternKind
    zmq_prefix: bytes
    _match: Callable[[str], Any]

    def __init__(
        self, text: str, kind: PatternKind, zmq_prefix: bytes, match: Callable[[str], Any]
    ) -> None:
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "zmq_prefix", zmq_prefix)
        object.__setattr__(self, "_match", match)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Pattern is immutable (cannot set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Pattern is immutable (cannot delete {name!r})")

    def matches(self, subject: str) -> bool:
        """True if a message on ``subject`` belongs to this subscription."""
        if self.kind == "exact":
            return subject == self.text
        return self._match(subject) is not None

    def __repr__(self) -> str:
        return f"Pattern({self.text!r}, kind={self.kind!r}, zmq_prefix={self.zmq_prefix!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Pattern):
            return NotImplemented
        return self.text == other.text and self.kind == other.kind

    def __hash__(self) -> int:
        return hash((self.text, self.kind))


def compile_pattern(pattern: str, *, regex: bool = False) -> Pattern:
    """Compile a subscription pattern.

    The kind is ``regex`` if ``regex=True`` or the pattern starts with ``^``;
    ``tokens`` if any ``.``-separated token is exactly ``*`` or ``>``; else ``exact``.
    Raises :class:`aoz.errors.SubjectError` for an invalid pattern.

    >>> compile_pattern("MD.NYSE.>").zmq_prefix
    b'MD.NYSE.'
    >>> compile_pattern(r"^MD\\.NYSE\\..*").zmq_prefix
    b'MD.NYSE.'
    >>> compile_pattern("MD.IBM").zmq_prefix
    b'MD.IBM\\x00'
    """
    if not isinstance(pattern, str):
        raise SubjectError(
            f"a subscription pattern must be a str, not {type(pattern).__name__} ({pattern!r:.80})",
            subject=pattern if isinstance(pattern, bytes) else None,
        )
    if regex or pattern.startswith("^"):
        return _compile_regex(pattern)
    tokens = pattern.split(".")
    if not _WILDCARDS.isdisjoint(tokens):
        return _compile_tokens(pattern, tokens)
    return Pattern(pattern, "exact", subject_bytes(pattern) + b"\x00", pattern.__eq__)


def _check_wildcard_text(pattern: str, what: str) -> None:
    if not pattern:
        raise SubjectError(f"the {what} pattern is empty", subject=pattern)
    if "\x00" in pattern:
        raise SubjectError(
            f"{what} pattern {_short(pattern)} contains a NUL character; remove it",
            subject=pattern,
        )
    try:
        pattern.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SubjectError(
            f"{what} pattern {_short(pattern)} cannot be encoded as UTF-8 ({exc.reason})",
            subject=pattern,
        ) from None


def _compile_tokens(pattern: str, tokens: list[str]) -> Pattern:
    _check_wildcard_text(pattern, "wildcard")
    last = len(tokens) - 1
    parts: list[str] = []
    literal: list[str] = []
    wild_seen = False
    for i, tok in enumerate(tokens):
        if tok == "":
            raise SubjectError(
                f"wildcard pattern {_short(pattern)} has an empty token (token {i + 1}); "
                "tokens are separated by single dots, e.g. 'MD.*.IBM'",
                subject=pattern,
            )
        if tok == ">":
            if i != last:
                raise SubjectError(
                    f"wildcard pattern {_short(pattern)}: '>' must be the last token "
                    "(it matches all remaining tokens); use '*' for one token",
                    subject=pattern,
                )
            parts.append(_REST_TOKENS)
            wild_seen = True
        elif tok == "*":
            parts.append(_ONE_TOKEN)
            wild_seen = True
        else:
            parts.append(re.escape(tok))
            if not wild_seen:
                literal.append(tok)
    prefix = "".join(t + "." for t in literal).encode("utf-8")
    compiled = re.compile(r"\.".join(parts), re.DOTALL)
    return Pattern(pattern, "tokens", prefix, compiled.fullmatch)


def _compile_regex(pattern: str) -> Pattern:
    _check_wildcard_text(pattern, "regex")
    try:
        compiled = re.compile(pattern)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        raise SubjectError(
            f"regex pattern {_short(pattern)} is not a valid regular expression: {exc}",
            subject=pattern,
        ) from None
    return Pattern(pattern, "regex", regex_prefix(pattern), compiled.search)


def regex_prefix(pattern: str) -> bytes:
    """The longest literal prefix that every subject matching ``pattern`` starts with.

    Only a pattern anchored at the start (``^`` or ``\\A``) followed by plain literal
    characters yields a prefix; anything else (alternation at the top, flags that change
    matching, an unusable parser) yields ``b""``, which is always safe.

    >>> regex_prefix(r"^MD\\.N(YSE|ASDAQ)")
    b'MD.N'
    >>> regex_prefix("^a|b")
    b''
    """
    if _sre_parse is None or _sre_c is None:  # pragma: no cover
        return b""
    try:
        return _literal_prefix(pattern)
    except Exception:  # the private parser changed or refused: be safe, not clever
        return b""


def _literal_prefix(pattern: str) -> bytes:
    parsed = _sre_parse.parse(pattern, 0)
    flags = parsed.state.flags
    # These make ^ match after newlines or make literals match other characters.
    if flags & (re.IGNORECASE | re.MULTILINE | re.LOCALE):
        return b""
    items = list(parsed)
    if not items:
        return b""
    op, av = items[0]
    if op is not _sre_c.AT or av not in (_sre_c.AT_BEGINNING, _sre_c.AT_BEGINNING_STRING):
        return b""
    out: list[bytes] = []
    for op, av in items[1:]:
        if op is not _sre_c.LITERAL or not isinstance(av, int) or av == 0:
            break
        try:
            out.append(chr(av).encode("utf-8"))
        except (UnicodeEncodeError, ValueError, OverflowError):
            break
    return b"".join(out)
