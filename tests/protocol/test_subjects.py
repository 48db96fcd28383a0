"""Subjects and subscription patterns (SPEC §7): validation, matching, safe ZeroMQ prefixes."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from aoz._protocol.subjects import (
    RESERVED_PREFIXES,
    Pattern,
    compile_pattern,
    is_reserved,
    subject_bytes,
)
from aoz.errors import SubjectError

# ---------------------------------------------------------------- subjects


def test_subject_bytes_encodes_utf8() -> None:
    assert subject_bytes("MD.NYSE.IBM") == b"MD.NYSE.IBM"
    assert subject_bytes("prix.€") == "prix.€".encode()


def test_subject_limit_is_256_encoded_bytes() -> None:
    assert len(subject_bytes("x" * 256)) == 256
    assert len(subject_bytes("€" * 85)) == 255  # 3 bytes each
    with pytest.raises(SubjectError, match="257 bytes"):
        subject_bytes("x" * 257)
    with pytest.raises(SubjectError, match="258 bytes"):
        subject_bytes("€" * 86)


@pytest.mark.parametrize(
    ("subject", "rule"),
    [
        ("", "empty"),
        ("a\x00b", "NUL"),
        ("a\ud800", "UTF-8"),
        (b"A.B", "must be a str"),
        (None, "str"),
    ],
)
def test_subject_bytes_names_the_broken_rule(subject: object, rule: str) -> None:
    with pytest.raises(SubjectError, match=rule):
        subject_bytes(subject)  # type: ignore[arg-type]


def test_reserved_subjects() -> None:
    assert RESERVED_PREFIXES == ("_INBOX.", "_NAMING", "_AOZ.")  # _AOZ.CACHE: aoz._mesh.cache
    assert is_reserved("_INBOX.3669840e-d043-11ea-adc2-fcaa146e6b01")
    assert is_reserved("_NAMING")
    assert not is_reserved("_INBOX")
    assert not is_reserved("MD._INBOX.x")


# ---------------------------------------------------------------- kinds and prefixes


@pytest.mark.parametrize(
    ("text", "kind", "prefix"),
    [
        ("MD.NYSE.IBM", "exact", b"MD.NYSE.IBM\x00"),
        ("a*", "exact", b"a*\x00"),
        ("a.b>", "exact", b"a.b>\x00"),
        ("MD.*.IBM", "tokens", b"MD."),
        ("MD.NYSE.>", "tokens", b"MD.NYSE."),
        ("*", "tokens", b""),
        (">", "tokens", b""),
        ("*.a.>", "tokens", b""),
        ("^MD\\.NYSE\\..*", "regex", b"MD.NYSE."),
        ("^abc", "regex", b"abc"),
        ("^ab*", "regex", b"a"),
        ("^ab?c", "regex", b"a"),
        ("^ab{0,2}", "regex", b"a"),
        ("^a(b|c)", "regex", b"a"),
        ("^a[bc]", "regex", b"a"),
        ("^a.b", "regex", b"a"),
        ("^a|b", "regex", b""),
        ("^ab$", "regex", b"ab"),
        ("^(?i:ab)", "regex", b""),
        ("^a(?i:b)", "regex", b"a"),
        ("^", "regex", b""),
        ("^€x", "regex", "€x".encode()),
    ],
)
def test_kind_and_zmq_prefix(text: str, kind: str, prefix: bytes) -> None:
    p = compile_pattern(text)
    assert (p.text, p.kind, p.zmq_prefix) == (text, kind, prefix)


def test_regex_flag_compiles_unanchored_patterns_with_empty_prefix() -> None:
    p = compile_pattern("IBM$", regex=True)
    assert (p.kind, p.zmq_prefix) == ("regex", b"")
    assert p.matches("MD.NYSE.IBM")
    assert not p.matches("MD.IBM.X")
    q = compile_pattern(r"\AMD\.", regex=True)
    assert q.zmq_prefix == b"MD."


@pytest.mark.parametrize(
    ("text", "prefix"),
    [("(?i)^ab", b""), ("(?m)^ab", b""), ("(?s)^ab", b"ab"), ("(?x)^ a b", b"ab")],
)
def test_global_flags(text: str, prefix: bytes) -> None:
    p = compile_pattern(text, regex=True)
    assert (p.kind, p.zmq_prefix) == ("regex", prefix)


def test_multiline_caret_would_match_after_newline() -> None:
    # why (?m) must give b"": the subject does not start with "ab" yet matches
    p = compile_pattern("(?m)^ab", regex=True)
    assert p.matches("x\nab")
    assert p.zmq_prefix == b""


# ---------------------------------------------------------------- matching


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("MD.IBM", "MD.IBM", True),
        ("MD.IBM", "MD.IBMX", False),
        ("MD.*.IBM", "MD.NYSE.IBM", True),
        ("MD.*.IBM", "MD.IBM", False),
        ("MD.*.IBM", "MD..IBM", False),
        ("MD.*", "MD.a.b", False),
        ("MD.>", "MD.a.b", True),
        ("MD.>", "MD", False),
        ("MD.>", "MD.", False),
        ("a*.b", "a*.b", True),
        ("a*.*", "ax.b", False),
        ("*", "x\ny", True),
        ("^MD\\.", "MD.x", True),
        ("^MD\\.", "xMD.x", False),
        ("^a.*z$", "abcz", True),
        ("^a.*z$", "abczx", False),
    ],
)
def test_matches(pattern: str, subject: str, expected: bool) -> None:
    assert compile_pattern(pattern).matches(subject) is expected


@pytest.mark.parametrize(
    ("pattern", "regex", "rule"),
    [
        ("", False, "empty"),
        ("a..*", False, "empty token"),
        (".*", False, "empty token"),
        ("*.", False, "empty token"),
        ("a.>.b", False, "last token"),
        ("a.*\x00", False, "NUL"),
        ("^(", False, "not a valid regular expression"),
        ("^a\x00", False, "NUL"),
        ("", True, "empty"),
        ("x" * 257, False, "257 bytes"),
    ],
)
def test_invalid_patterns(pattern: str, regex: bool, rule: str) -> None:
    with pytest.raises(SubjectError, match=rule) as info:
        compile_pattern(pattern, regex=regex)
    assert info.value.subject == pattern


def test_pattern_must_be_str() -> None:
    with pytest.raises(SubjectError, match="must be a str"):
        compile_pattern(b"A.B")  # type: ignore[arg-type]


def test_pattern_is_immutable_and_hashable() -> None:
    p = compile_pattern("A.*")
    with pytest.raises(AttributeError):
        p.text = "B"
    assert p == compile_pattern("A.*")
    assert len({p, compile_pattern("A.*"), compile_pattern("A.>")}) == 2
    assert "A.*" in repr(p)
    assert isinstance(p, Pattern)


# ---------------------------------------------------------------- properties

TOKEN_ALPHABET = "ab*>"
tokens_lit = st.text(alphabet="ab", min_size=1, max_size=2)
subject_tokens = st.lists(st.text(alphabet="ab*>", min_size=0, max_size=2), min_size=1, max_size=5)
pattern_tokens = st.lists(
    st.one_of(tokens_lit, st.just("*"), st.text(alphabet="ab*", min_size=2, max_size=2)),
    min_size=1,
    max_size=4,
).flatmap(lambda ts: st.sampled_from([ts, [*ts, ">"]]))


def reference_token_match(pattern: str, subject: str) -> bool:
    """NATS semantics written the plain way: walk both token lists."""
    pts = pattern.split(".")
    sts = subject.split(".")
    for i, pt in enumerate(pts):
        if pt == ">":
            rest = sts[i:]
            return len(rest) >= 1 and all(rest)
        if i >= len(sts):
            return False
        if pt == "*":
            if not sts[i]:
                return False
        elif pt != sts[i]:
            return False
    return len(pts) == len(sts)


def _safe(p: Pattern, subject: str) -> bool:
    return (subject.encode() + b"\x00").startswith(p.zmq_prefix)


@settings(max_examples=300)
@given(pattern_tokens, subject_tokens)
def test_token_matching_agrees_with_reference(ptoks: list[str], stoks: list[str]) -> None:
    text = ".".join(ptoks)
    subject = ".".join(stoks)
    p = compile_pattern(text)
    expected = reference_token_match(text, subject) if p.kind == "tokens" else text == subject
    assert p.matches(subject) is expected
    if p.matches(subject):
        assert _safe(p, subject)


@settings(max_examples=200)
@given(pattern_tokens)
def test_token_subjects_built_from_the_pattern_match_and_pass_the_prefix(
    ptoks: list[str],
) -> None:
    # replace each wildcard with concrete tokens: the result must match (covers the True side)
    concrete = [("x" if t == "*" else "y.z" if t == ">" else t) for t in ptoks]
    subject = ".".join(concrete)
    p = compile_pattern(".".join(ptoks))
    assert p.matches(subject)
    assert _safe(p, subject)


# random regexes from a small grammar
_atom = st.sampled_from(["a", "b", "c", ".", r"\.", "[ab]", "[^a]", "x"])


def _regex(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, children).map("".join),
        st.tuples(children, st.sampled_from(["*", "+", "?", "{0,2}", "*?"])).map(
            lambda t: f"(?:{t[0]}){t[1]}"
        ),
        st.tuples(children, children).map(lambda t: f"({t[0]}|{t[1]})"),
        st.tuples(children, children).map(lambda t: f"{t[0]}|{t[1]}"),
        children.map(lambda c: f"^{c}"),
        children.map(lambda c: f"{c}$"),
    )


regexes = st.recursive(_atom, _regex, max_leaves=8)
regex_patterns = st.one_of(
    regexes.map(lambda r: "^" + r),
    st.tuples(st.sampled_from(["(?i)", "(?m)", "(?s)", "(?x)", ""]), regexes).map(
        lambda t: t[0] + "^" + t[1]
    ),
    regexes,
)
regex_subjects = st.text(alphabet="abcxAB.\n", min_size=1, max_size=8)


@settings(max_examples=300)
@given(regex_patterns, st.lists(regex_subjects, min_size=1, max_size=10))
def test_regex_prefix_never_excludes_a_match(text: str, subjects: list[str]) -> None:
    p = compile_pattern(text, regex=True)
    assert p.kind == "regex"
    for subject in subjects:  # bounded: at most 10
        assert p.matches(subject) is (re.search(text, subject) is not None)
        if p.matches(subject):
            assert _safe(p, subject), (text, subject, p.zmq_prefix)


# (regex, subject) pairs where the subject matches the regex by construction; no inner
# anchors, so "^" + regex matches the subject. This exercises the "matches" side often.
_pair_atom = st.sampled_from(
    [
        ("a", "a"),
        ("b", "b"),
        ("x", "x"),
        (".", "b"),
        (".", "."),
        (r"\.", "."),
        ("[ab]", "a"),
        ("[ab]", "b"),
        ("[^a]", "x"),
        ("[^a]", "."),
    ]
)
Pair = tuple[str, str]


def _pairs(children: st.SearchStrategy[Pair]) -> st.SearchStrategy[Pair]:
    def rep(op: str, lo: int, hi: int) -> st.SearchStrategy[Pair]:
        return st.tuples(children, st.integers(lo, hi)).map(
            lambda t: (f"(?:{t[0][0]}){op}", t[0][1] * t[1])
        )

    return st.one_of(
        st.tuples(children, children).map(lambda t: (t[0][0] + t[1][0], t[0][1] + t[1][1])),
        rep("*", 0, 2),
        rep("+", 1, 2),
        rep("?", 0, 1),
        rep("{0,2}", 0, 2),
        rep("*?", 0, 2),
        st.tuples(children, children, st.booleans()).map(
            lambda t: (f"({t[0][0]}|{t[1][0]})", t[0][1] if t[2] else t[1][1])
        ),
    )


regex_pairs = st.recursive(_pair_atom, _pairs, max_leaves=8)


@settings(max_examples=300)
@given(regex_pairs, st.sampled_from(["", "$", "(?s)"]), st.text(alphabet="ab.", max_size=3))
def test_regex_prefix_safe_on_constructed_matches(pair: Pair, extra: str, tail: str) -> None:
    regex, subject = pair
    pattern = f"(?s)^{regex}" if extra == "(?s)" else f"^{regex}{extra}"
    if extra == "$":
        assume(subject)  # "" is not a subject
    else:
        subject += tail or "z"  # an unanchored end lets anything follow
    p = compile_pattern(pattern, regex=True)
    assert p.matches(subject), (pattern, subject)
    assert _safe(p, subject), (pattern, subject, p.zmq_prefix)


literal_chars = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x00"),
    min_size=1,
    max_size=30,
)


@settings(max_examples=250)
@given(literal_chars, st.sampled_from(["", ".*", "(x|y)", "[ab]+", "$", "?"]))
def test_literal_regex_prefix_is_the_whole_literal_run(literal: str, tail: str) -> None:
    p = compile_pattern("^" + re.escape(literal) + tail)
    if tail == "?":  # the last literal is optional, so it is not part of the prefix
        assert p.zmq_prefix == literal[:-1].encode()
    else:
        assert p.zmq_prefix == literal.encode()
    assert p.matches(literal + ("x" if tail == "(x|y)" else "a" if tail == "[ab]+" else ""))
