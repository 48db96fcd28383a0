"""The pure part of queue groups: member subjects, parsing filters, round robin."""

from __future__ import annotations

from collections import Counter

import pytest

from aoz.errors import SubjectError
from aoz.queues import QueueTable, check_group, member_subject, parse_member


def prefix(group: str, member: str, subject: str) -> bytes:
    return member_subject(group, member, subject).encode() + b"\0"


def test_member_subject_round_trips_through_its_filter() -> None:
    s = member_subject("workers", "uuid-1", "SVC.a.b")
    assert s == "_QUEUE.workers.uuid-1.SVC.a.b"
    assert parse_member(s.encode() + b"\0") == ("workers", "uuid-1", "SVC.a.b")


@pytest.mark.parametrize(
    "bad", [b"SVC.a\0", b"_QUEUE.w.m.S", b"_QUEUE.w.m\0", b"_QUEUE..m.S\0", b"_QUEUE.w.m.\xff\0"]
)
def test_parse_member_rejects_what_is_not_a_member(bad: bytes) -> None:
    assert parse_member(bad) is None


@pytest.mark.parametrize("group", ["", "a.b", "*", ">", "x" * 65, "sp ace"])
def test_bad_group_names_say_what_is_allowed(group: str) -> None:
    with pytest.raises(SubjectError, match="queue group"):
        check_group(group)


def test_members_subscribe_to_exact_subjects_only() -> None:
    with pytest.raises(SubjectError, match="exact"):
        member_subject("w", "m", "MD.*")
    with pytest.raises(SubjectError, match="too long"):
        member_subject("w", "m" * 40, "S" * 230)


def test_round_robin_is_even_per_group_and_each_group_gets_one() -> None:
    t = QueueTable(seed=1)
    assert t.sync(
        [prefix("a", m, "S") for m in ("m1", "m2", "m3")]
        + [prefix("b", m, "S") for m in ("n1", "n2")]
        + [b"S\0", b"OTHER\0"]
    )
    counts: Counter[str] = Counter()
    for _ in range(60):
        targets = t.targets("S")
        assert len(targets) == 2  # one per group
        assert {x.split(".")[1] for x in targets} == {"a", "b"}
        counts.update(targets)
    assert {counts[member_subject("a", m, "S")] for m in ("m1", "m2", "m3")} == {20}
    assert {counts[member_subject("b", m, "S")] for m in ("n1", "n2")} == {30}
    assert t.targets("OTHER") == [] and t.targets("nothing") == []


def test_membership_changes() -> None:
    t = QueueTable(seed=2)
    p1, p2 = prefix("g", "m1", "S"), prefix("g", "m2", "S")
    assert t.add(p1) and t.add(p2)
    assert t.groups("S") == {"g": ["m1", "m2"]}
    assert t.discard(p1)
    assert not t.discard(p1)  # twice is harmless
    assert {t.targets("S")[0] for _ in range(5)} == {member_subject("g", "m2", "S")}
    assert t.discard(p2)
    assert t.groups("S") == {} and t.targets("S") == []
    assert not t.sync([])  # already empty
    assert t.sync([p1]) and t.groups("S") == {"g": ["m1"]}
    assert not t.add(b"S\0")
