"""Offsets into a recording and gap detection: the pure modules, no files, no Spark."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from aoz.record.gaps import Gap, GapTracker, StreamSummary
from aoz.record.offsets import (
    Position,
    RecordingFile,
    advance,
    cut,
    earliest,
    from_json,
    index_of,
    latest,
    parse_name,
    plan,
    position_at,
    rows_behind,
    split,
    to_json,
)


def files_of(
    recorder: str, rows: list[int], *, first: int = 1, stamp: int = 0
) -> list[RecordingFile]:
    return [
        RecordingFile(
            recorder, first + i, stamp + i, n, f"/r/part-{stamp + i}-{recorder}-{first + i}.parquet"
        )
        for i, n in enumerate(rows)
    ]


def rows_of(
    files: list[RecordingFile], start: dict[str, Position], end: dict[str, Position]
) -> list[tuple[str, int, int]]:
    """Every (recorder, file, row) a range holds, in order."""
    return [
        (s.file.recorder, s.file.number, r)
        for s in plan(files, start, end).slices
        for r in range(s.start, s.stop)
    ]


def everything(files: list[RecordingFile]) -> list[tuple[str, int, int]]:
    return rows_of(files, {}, latest(files))


def test_file_names_parse_and_others_do_not():
    assert parse_name("part-1764000000000000-ab12cd34-000012.parquet") == (
        1764000000000000,
        "ab12cd34",
        12,
    )
    assert parse_name(".part-1-ab-1.parquet.tmp") is None
    assert parse_name("part-00000-c000.snappy.parquet") is None


def test_positions_address_single_rows_and_round_trip_through_indexes():
    fs = files_of("a", [3, 0, 5])
    assert [index_of(fs, position_at(fs, i)) for i in range(9)] == list(range(9))
    assert position_at(fs, 3) == Position(1, 3)  # the end of file 1, not the start of 3
    assert position_at(fs, 99) == Position(3, 5)
    assert index_of(fs, Position(2, 7)) == 3  # an empty or unknown file adds nothing


def test_earliest_to_latest_holds_every_row_once_in_recording_order():
    fs = files_of("a", [2, 3], stamp=10) + files_of("b", [4], stamp=5)
    rows = everything(fs)
    assert rows[:4] == [("b", 1, r) for r in range(4)]  # b's first file is older
    assert len(rows) == len(set(rows)) == 9
    assert rows_of(fs, earliest(fs), latest(fs)) == rows


def test_a_new_file_or_recorder_after_an_offset_is_read_from_its_start():
    fs = files_of("a", [2, 3])
    end = latest(fs)
    more = fs + files_of("a", [4], first=3, stamp=5) + files_of("b", [1], stamp=9)
    assert rows_of(more, end, latest(more)) == [("a", 3, r) for r in range(4)] + [("b", 1, 0)]


def test_numbers_left_unused_by_failed_writes_are_skipped_not_lost():
    fs = files_of("a", [2]) + files_of("a", [2], first=4, stamp=4)  # 2 and 3 never appeared
    p = plan(fs, {"a": Position(1, 2)}, latest(fs))
    assert p.lost == [] and [(s.file.number, s.start, s.stop) for s in p.slices] == [(4, 0, 2)]


def test_a_start_inside_a_deleted_file_is_reported_lost():
    fs = files_of("a", [5], first=3)
    p = plan(fs, {"a": Position(2, 1)}, latest(fs))
    assert p.lost and "file 2" in p.lost[0]
    assert not plan(fs, {"a": Position(2, 0)}, latest(fs)).lost  # the end of file 1, nothing lost
    assert plan([], {"b": Position(1, 1)}, {"b": Position(2, 0)}).lost  # all of b's files gone


@given(
    sizes=st.lists(st.lists(st.integers(0, 7), min_size=1, max_size=4), min_size=1, max_size=3),
    limit=st.integers(1, 9),
)
def test_batches_of_at_most_max_rows_read_everything_exactly_once(sizes, limit):
    fs = [f for i, rows in enumerate(sizes) for f in files_of(f"r{i}", rows, stamp=10 * i)]
    start: dict[str, Position] = {}
    seen: list[tuple[str, int, int]] = []
    for _ in range(200):
        end = advance(fs, start, limit)
        batch = rows_of(fs, start, end)
        assert len(batch) <= limit
        seen += batch
        if end == start or not batch:
            break
        start = from_json(to_json(end, fs))  # through the checkpoint's JSON form
    assert sorted(seen) == sorted(everything(fs)) and len(seen) == len(set(seen))


@given(
    rows=st.lists(st.integers(0, 9), min_size=1, max_size=5),
    cuts=st.lists(st.integers(0, 45), max_size=4),
    parts=st.integers(1, 6),
)
def test_any_cut_points_and_splits_partition_the_rows(rows, cuts, parts):
    fs = files_of("a", rows)
    total = sum(rows)
    marks = sorted({0, total, *(min(c, total) for c in cuts)})
    pieces: list[tuple[str, int, int]] = []
    for lo, hi in itertools.pairwise(marks):
        start, end = {"a": position_at(fs, lo)}, {"a": position_at(fs, hi)}
        for task in split(plan(fs, start, end).slices, parts):
            pieces += [
                (s.file.recorder, s.file.number, r) for s in task for r in range(s.start, s.stop)
            ]
    assert pieces == everything(fs)


def test_cut_shows_the_files_as_they_were_at_an_offset():
    fs = files_of("a", [3, 4]) + files_of("b", [2], stamp=5)
    then = cut(fs, {"a": Position(2, 1)})
    assert [(f.recorder, f.number, f.rows) for f in then] == [("a", 1, 3), ("a", 2, 1)]
    assert latest(then) == {"a": Position(2, 1)} and cut(fs, None) == fs


def test_max_rows_is_shared_among_recorders_in_proportion():
    fs = files_of("a", [90]) + files_of("b", [10], stamp=1)
    end = advance(fs, {}, 10)
    assert end == {"a": Position(1, 9), "b": Position(1, 1)}


def test_json_offsets_and_lag():
    fs = files_of("a", [3, 4])
    j = to_json({"a": Position(2, 1)}, fs)
    assert j == {"a": {"file": 2, "row": 1, "rows": 4}}
    assert from_json(j) == {"a": Position(2, 1)}
    assert rows_behind(to_json(latest(fs), fs), j) == 3
    assert rows_behind(to_json(latest(fs), fs), None) == 7
    for bad in ({"a": 3}, {"a": {"file": -1, "row": 0}}, {"a": {"file": "x", "row": 0}}):
        try:
            from_json(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad} accepted")


# ------------------------------------------------------------------------------ gaps
def summary(first: int, last: int, count: int | None = None, subject: str = "S") -> StreamSummary:
    return StreamSummary(subject, "p1", first, last, last - first + 1 if count is None else count)


def test_consecutive_ranges_have_no_gap_and_a_jump_is_one():
    t = GapTracker()
    assert t.feed([summary(5, 10)]) == []  # a stream's first range is its start
    assert t.feed([summary(11, 20)]) == []
    assert t.feed([summary(24, 30)]) == [Gap("S", "p1", 20, 24, 3)]


def test_a_hole_inside_a_range_is_a_gap():
    assert GapTracker().feed([summary(1, 10, count=8)]) == [Gap("S", "p1", 1, 10, 2)]


def test_repeats_backwards_ranges_and_other_streams_are_not_gaps():
    t = GapTracker()
    t.feed([summary(1, 10), summary(1, 3, subject="T")])
    assert t.feed([summary(1, 10), summary(4, 6, subject="T"), summary(5, 12)]) == []
    assert t.highest == {("S", "p1"): 12, ("T", "p1"): 6}


def test_seeded_history_judges_the_boundary_only():
    t = GapTracker()
    t.seed([summary(1, 5), summary(8, 9)])  # a gap before the seed point is not reported again
    assert t.feed([summary(11, 12)]) == [Gap("S", "p1", 9, 11, 1)]


def test_wrapping_numbers_are_a_new_start_and_the_table_is_bounded():
    t = GapTracker(max_streams=2)
    t.feed([summary(2**32 - 2, 2**32 - 1)])
    assert t.feed([summary(0, 3)]) == []
    t.feed([summary(1, 1, subject="T"), summary(1, 1, subject="U")])
    assert len(t.highest) <= 2
