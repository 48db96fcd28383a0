"""omnm's value model: field types, TIME and PRICE values, fields and messages. Pure."""

from __future__ import annotations

import datetime as _dt
import enum
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import itemgetter
from typing import Any, ClassVar, Final, NamedTuple, TypeAlias

import msgspec

from ..errors import EncodeError, UsageError

__all__ = [
    "Field",
    "FieldType",
    "Message",
    "OpenMamaCompatWarning",
    "Price",
    "Time",
    "Typed",
    "field_from_value",
    "narrowest_int_type",
]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_U32_MAX = 0xFFFF_FFFF


class OpenMamaCompatWarning(UserWarning):
    """A message aoz can write and read, but that OpenMAMA programs would misread."""


class FieldType(enum.IntEnum):
    """The type byte of an omnm field: OpenMAMA's ``MAMA_FIELD_TYPE_*`` numbers."""

    MSG = 1
    OPAQUE = 7
    STRING = 8
    BOOL = 9
    CHAR = 10
    I8 = 14
    U8 = 15
    I16 = 16
    U16 = 17
    I32 = 18
    U32 = 19
    I64 = 20
    U64 = 21
    F32 = 24
    F64 = 25
    TIME = 26
    PRICE = 27
    VECTOR_BOOL = 29
    VECTOR_CHAR = 30
    VECTOR_I8 = 34
    VECTOR_U8 = 35
    VECTOR_I16 = 36
    VECTOR_U16 = 37
    VECTOR_I32 = 38
    VECTOR_U32 = 39
    VECTOR_I64 = 40
    VECTOR_U64 = 41
    VECTOR_F32 = 44
    VECTOR_F64 = 45
    VECTOR_STRING = 46
    VECTOR_MSG = 47
    VECTOR_TIME = 48
    VECTOR_PRICE = 49

    @property
    def is_vector(self) -> bool:
        """True for the ``VECTOR_*`` types (their values are lists)."""
        return self.value >= 29


class Time(msgspec.Struct, frozen=True):
    """An OpenMAMA ``mamaDateTime`` as omnm carries it (a TIME field).

    ``seconds`` since the Unix epoch (or since midnight when ``hints`` lacks HAS_DATE),
    ``microseconds`` (omnm keeps no finer digits), ``precision`` (OpenMAMA's
    ``mamaDateTimePrecision``: 6 = microseconds, 15 = unknown) and ``hints`` (bit 1
    HAS_DATE, bit 2 HAS_TIME). OpenMAMA writers only express seconds in 0..2**32-1.

    >>> Time.from_datetime(_dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=_dt.UTC))
    Time(seconds=1700000000, microseconds=0, precision=6, hints=3)
    """

    seconds: int
    microseconds: int = 0
    precision: int = 6
    hints: int = 3

    HAS_DATE: ClassVar[int] = 1
    HAS_TIME: ClassVar[int] = 2

    @classmethod
    def from_datetime(cls, value: _dt.datetime) -> Time:
        """A TIME with microsecond precision and date+time hints, from an aware datetime.

        A naive datetime is refused (omnm carries no time zone, so local time would be
        silently read as UTC by the other side).
        """
        if value.tzinfo is None or value.utcoffset() is None:
            raise UsageError(
                f"{value!r} has no time zone; omnm TIME is UTC, so pass an aware datetime "
                "(datetime.now(timezone.utc), dt.replace(tzinfo=timezone.utc), ...)"
            )
        delta = value - _EPOCH
        seconds = delta.days * 86400 + delta.seconds
        return cls(seconds, delta.microseconds, 6, cls.HAS_DATE | cls.HAS_TIME)

    def to_datetime(self) -> _dt.datetime:
        """The instant as an aware UTC datetime (seconds count from the epoch)."""
        return _EPOCH + _dt.timedelta(seconds=self.seconds, microseconds=self.microseconds)


class Price(msgspec.Struct, frozen=True):
    """An OpenMAMA ``mamaPrice`` as omnm carries it (a PRICE field).

    ``hints``: low 5 bits the ``mamaPricePrecision`` (2 = hundredths, 16 = integer,
    19 = eighths...), bit 0x20 "valid price". omnm drops the currency.

    >>> Price(123.45, 2).precision
    2
    """

    value: float
    hints: int = 0x20

    VALID: ClassVar[int] = 0x20

    @property
    def precision(self) -> int:
        """OpenMAMA's ``mamaPricePrecision``: the low 5 bits of ``hints``."""
        return self.hints & 0x1F


class Field(NamedTuple):
    """One omnm field: ``name`` (``None`` when sent without one), ``fid``, ``type``, ``value``.

    Values by type: BOOL ``bool`` (other byte values as ``int``), CHAR a 1-character
    ``str``, integers ``int``, F32/F64 ``float``, STRING ``str``, OPAQUE ``bytes``,
    TIME :class:`Time`, PRICE :class:`Price`, MSG :class:`Message`, vectors ``list``.

    >>> Field("qty", 12, FieldType.U32, 100)
    Field(name='qty', fid=12, type=<FieldType.U32: 19>, value=100)
    """

    name: str | None
    fid: int
    type: FieldType
    value: Any


class Typed(NamedTuple):
    """A value with its omnm type fixed, for dicts and :meth:`Message.add`.

    >>> encode({"qty": Typed(FieldType.I64, 100)})[-8:]  # doctest: +SKIP
    """

    type: FieldType
    value: Any


FieldsLike: TypeAlias = "Message | Mapping[str, Any] | Iterable[Field]"


class Message:
    """An omnm message: fields in wire order; duplicate names and fids allowed.

    Lookups return the FIRST matching field, as OpenMAMA's getters do: ``msg["bid"]``
    by name, ``msg[22]`` by fid (an ``int`` key is always a fid). Iteration yields
    every :class:`Field`, in order.

    Lookups cost O(1): the first one builds an index of the names and fids (first match
    kept), and later ones use it. The index follows :meth:`add`, appends to ``fields``
    and assignments of ``fields``; after replacing or removing fields of the list in
    place, assign it back (``msg.fields = msg.fields``) to have it rebuilt.

    >>> m = Message({"symbol": "IBM", "bid": 135.25})
    >>> m.add("qty", 100, fid=12, type=FieldType.U32)["qty"], m[12], m.field("bid").type
    (100, 100, <FieldType.F64: 25>)
    """

    __slots__ = ("_fields", "_index")

    _fields: list[Field]
    # (first position of each name, first position of each fid, len(fields) indexed)
    _index: tuple[dict[Any, int], dict[Any, int], int] | None

    def __init__(self, fields: FieldsLike | None = None) -> None:
        self._index = None
        if fields is None:
            self._fields = []
        elif type(fields) is list and set(map(type, fields)) <= _FIELD_TYPES:
            self._fields = fields.copy()  # ready Fields, the common case
        elif isinstance(fields, Message):
            self._fields = list(fields._fields)
        elif isinstance(fields, Mapping):
            self._fields = [field_from_value(k, 0, v) for k, v in fields.items()]
        else:
            lst = list(fields)
            if not set(map(type, lst)) <= _FIELD_TYPES:
                lst = [f if isinstance(f, Field) else Field(*f) for f in lst]
            self._fields = lst

    @property
    def fields(self) -> list[Field]:
        """The fields in wire order (a list: append to it, or assign a new one)."""
        return self._fields

    @fields.setter
    def fields(self, fields: list[Field]) -> None:
        self._fields = fields
        self._index = None

    @classmethod
    def _of(cls, fields: list[Field]) -> Message:
        # the decoder's constructor: the fields are already checked Field values
        m = cls.__new__(cls)
        m._fields = fields
        m._index = None
        return m

    def add(
        self, name: str | None, value: Any, *, fid: int = 0, type: FieldType | None = None
    ) -> Message:
        """Append a field; its type is inferred from ``value`` unless ``type`` is given.

        Returns the message, so calls chain.
        """
        v = value if type is None else Typed(type, value)
        self._fields.append(field_from_value(name, fid, v))
        return self

    def _reindex(self) -> tuple[dict[Any, int], dict[Any, int], int]:
        fields = self._fields
        n = len(fields)
        # built from the last field to the first, so that the first of a name wins
        backwards = fields[::-1]
        where = range(n - 1, -1, -1)
        try:
            index = (
                dict(zip(map(_NAME, backwards), where, strict=True)),
                dict(zip(map(_FID, backwards), where, strict=True)),
                n,
            )
        except TypeError:  # an unhashable name or fid, which no key can match: left out
            names: dict[Any, int] = {}
            fids: dict[Any, int] = {}
            for i, f in enumerate(fields):
                for table, key in ((names, f[0]), (fids, f[1])):
                    try:
                        table.setdefault(key, i)
                    except TypeError:
                        pass
            index = (names, fids, n)
        self._index = index
        return index

    def field(self, key: str | int) -> Field | None:
        """The first field named ``key`` (``str``) or with fid ``key`` (``int``), or None."""
        fields = self._fields
        index = self._index
        if index is None or index[2] != len(fields):
            index = self._reindex()
        by_name = isinstance(key, str)  # else by fid
        try:
            i = (index[0] if by_name else index[1]).get(key)
        except TypeError:  # unhashable: no field has it
            return None
        if i is None:
            return None
        f = fields[i]
        if (f[0] if by_name else f[1]) == key:
            return f
        # a field was replaced in place: index again (once)
        index = self._reindex()
        i = (index[0] if by_name else index[1]).get(key)
        return None if i is None else fields[i]

    def get(self, key: str | int, default: Any = None) -> Any:
        """The value of the first field matching ``key`` (see :meth:`field`), or ``default``."""
        f = self.field(key)
        return default if f is None else f[3]

    def __getitem__(self, key: str | int) -> Any:
        # field(), inlined for the common case: a current index and a hit by name
        index = self._index
        if index is not None and type(key) is str and index[2] == len(self._fields):
            i = index[0].get(key)
            if i is not None:
                hit = self._fields[i]
                if hit[0] == key:
                    return hit[3]
        f = self.field(key)
        if f is None:
            raise KeyError(key)
        return f[3]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str | int) and self.field(key) is not None

    def __iter__(self) -> Iterator[Field]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return self._fields == other._fields

    __hash__ = None  # type: ignore[assignment]  # mutable

    def to_dict(self, *, plain: bool = False) -> dict[str, Any]:
        """Values by name (first field wins; nameless fields keyed by their fid).

        Nested messages become dicts too. TIME/PRICE stay :class:`Time`/:class:`Price`,
        or with ``plain=True`` become an aware ``datetime`` (when it has a date) and the
        price's ``float`` value, as tables and dataframes want them.
        """
        out: dict[str, Any] = {}
        for f in self.fields:
            key = (printable(f.name) if plain else f.name) if f.name else str(f.fid)
            if key not in out:
                out[key] = _plain(f.value, plain)
        return out

    def __repr__(self) -> str:
        inner = ", ".join(
            f"{f.name if f.name is not None else '#' + str(f.fid)}:{f.type.name}={f.value!r}"
            for f in self.fields
        )
        return f"omnm.Message({inner})"


#: Message.__init__ as written above: aoz.omnm._backend may install the compiled one
#: (for a list of ready Fields), which hands every other argument to this one
PURE_MESSAGE_INIT: Final = Message.__init__


def printable(text: str) -> str:
    """``text`` as valid Unicode: bytes that were not UTF-8 on the wire become ``\\xNN``.

    Decoding keeps such bytes (as surrogate escapes) so re-encoding is exact; JSON,
    terminals and Arrow need real text.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text


def _plain(value: Any, plain: bool) -> Any:
    if isinstance(value, Message):
        return value.to_dict(plain=plain)
    if isinstance(value, list) and value and isinstance(value[0], Message):
        return [m.to_dict(plain=plain) for m in value]
    if plain:
        if isinstance(value, str):
            return printable(value)
        if isinstance(value, Price):
            return value.value
        if isinstance(value, Time) and value.hints & Time.HAS_DATE:
            try:
                return value.to_datetime()
            except (OverflowError, ValueError):
                return None
    return value


_FT = FieldType
_FIELD_TYPES: Final = frozenset({Field})
_NAME: Final = itemgetter(0)
_FID: Final = itemgetter(1)
# Field(...) without NamedTuple's Python-level __new__ (hot in decoding and inference)
new_field: Final[Callable[[type[Field], tuple[Any, ...]], Field]] = tuple.__new__

_INT_RANGES: Final = (
    (_FT.U8, 0, 0xFF), (_FT.U16, 0, 0xFFFF), (_FT.U32, 0, _U32_MAX), (_FT.U64, 0, 2**64 - 1),
    (_FT.I8, -(2**7), 2**7 - 1), (_FT.I16, -(2**15), 2**15 - 1),
    (_FT.I32, -(2**31), 2**31 - 1), (_FT.I64, -(2**63), 2**63 - 1),
)
_TO_VECTOR: Final = {
    _FT.BOOL: _FT.VECTOR_BOOL, _FT.CHAR: _FT.VECTOR_CHAR, _FT.I8: _FT.VECTOR_I8,
    _FT.U8: _FT.VECTOR_U8, _FT.I16: _FT.VECTOR_I16, _FT.U16: _FT.VECTOR_U16,
    _FT.I32: _FT.VECTOR_I32, _FT.U32: _FT.VECTOR_U32, _FT.I64: _FT.VECTOR_I64,
    _FT.U64: _FT.VECTOR_U64, _FT.F32: _FT.VECTOR_F32, _FT.F64: _FT.VECTOR_F64,
    _FT.STRING: _FT.VECTOR_STRING, _FT.MSG: _FT.VECTOR_MSG, _FT.TIME: _FT.VECTOR_TIME,
    _FT.PRICE: _FT.VECTOR_PRICE,
}


# ----------------------------------------------------------------------------- inference
def narrowest_int_type(lo: int, hi: int | None = None) -> FieldType:
    """The narrowest omnm integer type holding ``lo..hi``: unsigned unless negative.

    OpenMAMA's numeric getters accept any field no wider than themselves (``getI64``
    reads a U8), so the narrowest type is the one every reader accepts.

    >>> narrowest_int_type(100), narrowest_int_type(-1), narrowest_int_type(0, 70000)
    (<FieldType.U8: 15>, <FieldType.I8: 14>, <FieldType.U32: 19>)
    """
    hi = lo if hi is None else hi
    for t, a, b in _INT_RANGES:
        if a <= lo and hi <= b:
            return t
    raise EncodeError(
        f"integer {lo if lo < -(2**63) else hi} does not fit in 64 bits; omnm has no wider "
        "integer type (send it as a STRING or F64)"
    )


def _scalar_type(value: Any) -> FieldType:
    if isinstance(value, bool):
        return _FT.BOOL
    if isinstance(value, int):
        return narrowest_int_type(value)
    if isinstance(value, float):
        return _FT.F64
    if isinstance(value, str):
        return _FT.STRING
    if isinstance(value, bytes | bytearray | memoryview):
        return _FT.OPAQUE
    if isinstance(value, Time | _dt.datetime):
        return _FT.TIME
    if isinstance(value, Price):
        return _FT.PRICE
    if isinstance(value, Message | Mapping):
        return _FT.MSG
    if value is None:
        raise EncodeError("omnm has no null value; leave the field out instead")
    raise EncodeError(
        f"cannot infer an omnm type for a {type(value).__name__}; use bool, int, float, str, "
        "bytes, datetime, Time, Price, dict/Message, a list of those, or Typed(type, value)"
    )


def _vector_type(values: list[Any] | tuple[Any, ...]) -> FieldType:
    if not values:
        return _FT.VECTOR_I8  # any vector type reads an empty vector; pick the smallest
    kinds = {_scalar_type(v) for v in values}
    ints = {_FT.I8, _FT.U8, _FT.I16, _FT.U16, _FT.I32, _FT.U32, _FT.I64, _FT.U64}
    if kinds <= ints:
        return _TO_VECTOR[narrowest_int_type(min(values), max(values))]
    if kinds <= ints | {_FT.F64}:
        return _FT.VECTOR_F64
    if len(kinds) == 1:
        (k,) = kinds
        if k in _TO_VECTOR and k is not _FT.OPAQUE:
            return _TO_VECTOR[k]
    names = ", ".join(sorted(k.name for k in kinds))
    raise EncodeError(
        f"a list becomes an omnm vector, whose elements share one type; this one mixes {names}"
    )


def field_from_value(name: str | None, fid: int, value: Any) -> Field:
    """A :class:`Field` for a Python value, its type inferred unless ``value`` is :class:`Typed`.

    ``bool`` -> BOOL, ``int`` -> the narrowest integer type, ``float`` -> F64, ``str`` ->
    STRING, ``bytes`` -> OPAQUE, aware ``datetime``/:class:`Time` -> TIME, :class:`Price`
    -> PRICE, ``dict``/:class:`Message` -> MSG, ``list`` -> the matching vector.
    """
    tv = type(value)
    if tv is str or tv is float:  # the common cases, without the general dispatch
        return new_field(Field, (name, fid, _FT.STRING if tv is str else _FT.F64, value))
    if tv is int:
        if 0 <= value <= 0xFFFF_FFFF:
            t = _FT.U8 if value <= 0xFF else _FT.U16 if value <= 0xFFFF else _FT.U32
        else:
            t = narrowest_int_type(value)
        return new_field(Field, (name, fid, t, value))
    if isinstance(value, Typed):
        try:
            t = FieldType(value.type)
        except ValueError:
            raise EncodeError(f"{value.type!r} is not an omnm field type") from None
        value = value.value
    elif isinstance(value, list) or type(value) is tuple:  # not Time/Price (named tuples)
        t = _vector_type(value)
    else:
        t = _scalar_type(value)
    return Field(name, fid, t, _normalise(t, value))


def _normalise(t: FieldType, value: Any) -> Any:
    if t is _FT.MSG:
        return value if isinstance(value, Message) else as_message(value)
    if t is _FT.TIME:
        return as_time(value)
    if t is _FT.PRICE:
        return as_price(value)
    if t is _FT.OPAQUE and isinstance(value, bytearray | memoryview):
        return bytes(value)
    if t.is_vector and isinstance(value, tuple):
        value = list(value)
    if t is _FT.VECTOR_MSG:
        return [v if isinstance(v, Message) else as_message(v) for v in value]
    if t is _FT.VECTOR_TIME:
        return [as_time(v) for v in value]
    if t is _FT.VECTOR_PRICE:
        return [as_price(v) for v in value]
    return value


def as_message(value: Any) -> Message:
    if isinstance(value, Message):
        return value
    if isinstance(value, Mapping):
        return Message(value)
    try:
        return Message(value)
    except (TypeError, ValueError):
        raise EncodeError(
            f"a MSG field needs a dict, an omnm.Message or a list of Fields, "
            f"not {type(value).__name__}"
        ) from None


def as_time(value: Any) -> Time:
    if isinstance(value, Time):
        return value
    if isinstance(value, _dt.datetime):
        try:
            return Time.from_datetime(value)
        except ValueError as exc:
            raise EncodeError(str(exc)) from None
    raise EncodeError(f"a TIME field needs an aware datetime or omnm.Time, not {value!r}")


def as_price(value: Any) -> Price:
    if isinstance(value, Price):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Price(float(value))  # what mamaPrice_setValue writes: valid, no precision
    raise EncodeError(f"a PRICE field needs an omnm.Price or a number, not {value!r}")
