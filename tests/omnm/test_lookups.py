"""Message lookups by name and fid: first match as OpenMAMA's getters, through an index
built on the first lookup (O(1) afterwards), whichever codec made the message."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aoz import omnm
from aoz.omnm import Field, FieldType, Message, _codec

try:
    from aoz.omnm import _fast
except ImportError:  # pragma: no cover - the build could not compile it
    _fast = None  # type: ignore[assignment]

DECODERS = [_codec.decode] + ([_fast.decode] if _fast is not None else [])
FT = FieldType


def first(fields: list[Field], key: Any) -> Field | None:
    """The model: a linear scan, as OpenMAMA's getters do."""
    for f in fields:
        if (f.name if isinstance(key, str) else f.fid) == key:
            return f
    return None


small_fields = st.lists(
    st.builds(Field, st.sampled_from([None, "a", "b", "c"]), st.integers(0, 3),
              st.just(FT.U8), st.integers(0, 255)).filter(lambda f: f.name or f.fid),
    max_size=8,
)
keys = st.one_of(st.sampled_from(["a", "b", "c", "d", ""]), st.integers(-1, 5))


@given(small_fields, st.lists(keys, max_size=6), st.sampled_from(DECODERS))
def test_lookups_find_the_first_match(fields: list[Field], probe: list[Any], decode: Any) -> None:
    for msg in (Message(fields), decode(omnm.encode(fields))):
        for key in probe:
            f = first(fields, key)
            assert msg.field(key) == f
            assert msg.get(key, "none") == ("none" if f is None else f.value)
            assert (key in msg) == (f is not None)
            if f is None:
                with pytest.raises(KeyError):
                    msg[key]
            else:
                assert msg[key] == f.value


@given(small_fields, small_fields, st.lists(keys, min_size=1, max_size=6))
def test_the_index_follows_appends_adds_and_assignments(
    before: list[Field], after: list[Field], probe: list[Any]
) -> None:
    msg = Message(before)
    for key in probe:  # builds the index
        msg.get(key)
    for f in after[: len(after) // 2]:
        msg.fields.append(f)
    for f in after[len(after) // 2 :]:
        msg.add(f.name, f.value, fid=f.fid, type=f.type)
    for key in probe:
        assert msg.field(key) == first(before + after, key)
    msg.fields = list(after)
    for key in probe:
        assert msg.field(key) == first(after, key)


def test_a_field_replaced_in_place_is_found_once_assigned_back() -> None:
    msg = Message([Field("a", 1, FT.U8, 1), Field("b", 2, FT.U8, 2)])
    assert msg["a"] == 1
    msg.fields[0] = Field("z", 9, FT.U8, 3)
    assert msg.get("a") is None  # the index notices a stale hit
    msg.fields = msg.fields
    assert msg["z"] == 3 and msg[9] == 3


def test_odd_keys() -> None:
    msg = Message([Field("a", 1, FT.U8, 1)])
    assert msg.get([1]) is None  # type: ignore[arg-type]  # unhashable: no match
    assert msg.get(1.0) == 1  # type: ignore[arg-type]  # equal to the fid, as before
    assert msg.get(None) is None  # type: ignore[arg-type]
    assert "a" in msg and 1 in msg and None not in msg
    junk = Message([Field(["x"], [1], FT.U8, 1), Field("a", 2, FT.U8, 2)])  # type: ignore[arg-type]
    assert junk["a"] == 2 and junk[2] == 2 and junk.get("x") is None


def test_lookups_index_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """200 fields read by name and by fid: the index is built once, not per lookup."""
    msg = omnm.decode(omnm.encode(
        [Field(f"field{i}", i + 1, FT.U32, i) for i in range(200)]
    ))
    built = []
    original = Message._reindex

    def counting(self: Message) -> Any:
        built.append(1)
        return original(self)

    monkeypatch.setattr(Message, "_reindex", counting)
    assert [msg[f"field{i}"] for i in range(200)] == list(range(200))
    assert [msg[i + 1] for i in range(200)] == list(range(200))
    assert len(built) == 1
