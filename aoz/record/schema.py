"""What a recording looks like, and how received messages become Arrow tables. Pure.

One row per message. Fixed columns, always present:

column          Arrow type                      filled from
==============  ==============================  =========================================
``subject``     string                          the message's subject
``sender``      string, nullable                decoded field ``sender``
``sequence``    int64, nullable                 decoded field ``sequence`` or ``seq``
``send_ts``     timestamp[us, UTC], nullable    decoded field ``send_ts``, ``ts`` or ``sent_at``
``receive_ts``  timestamp[us, UTC]              ``msg.received_at`` (the recorder's clock)
``codec``       int64                           the payload's codec id (79 omnm, -1 foreign)
``payload``     binary                          the payload as on the wire, codec byte included
==============  ==============================  =========================================

aoz's wire frame carries no sender, sequence number or send time, so the recorder takes
them from the payload when it is a msgpack/JSON map or an omnm message that has them
(the demo feed's :class:`~aoz.marketdata.Quote`/:class:`~aoz.marketdata.Trade` carry
``sender``, ``seq`` and ``ts``) and leaves them null otherwise. Numeric send times are
read as seconds since the epoch (values above 1e11 as milliseconds, 1e14 microseconds,
1e17 nanoseconds); a msgpack timestamp or datetime is taken as is.
=======
===================  ============================  ================================================
column               Arrow type                    filled from
===================  ============================  ================================================
``subject``          string                        the message's subject
``sender``           string, nullable              decoded field ``sender``
``sequence``         int64, nullable               decoded field ``sequence`` or ``seq``
``send_ts``          timestamp[us, UTC], nullable  decoded field ``send_ts``, ``ts`` or ``sent_at``
``receive_ts``       timestamp[us, UTC]            ``msg.received_at`` (the recorder's clock)
``publisher``        string, nullable              aoz's sequence header: publisher id (16 hex)
``publisher_seq``    int64, nullable               aoz's sequence header: number on the subject
``codec``            int64                         the payload's codec id (79 omnm, -1 foreign)
``payload``          binary                        the codec byte and the body (no sequence header)
===================  ============================  ================================================

An aoz publisher's payloads carry its publisher id and a per-subject sequence number
(:mod:`aoz.protocol.sequence`): they fill ``publisher`` and ``publisher_seq``, so a gap in
``publisher_seq`` within one (``subject``, ``publisher``) is a message the recording
lacks (null for OZ programs' payloads). ``sender``, ``sequence`` and the send time are the
application's own: the recorder takes them from the payload when it is a msgpack/JSON
map or an omnm message that has them (the demo feed's
:class:`~aoz.marketdata.Quote`/:class:`~aoz.marketdata.Trade` carry ``sender``, ``seq`` and
``ts``) and leaves them null otherwise. Numeric send times are read as seconds since the
epoch (values above 1e11 as milliseconds, 1e14 microseconds, 1e17 nanoseconds); a msgpack
timestamp or datetime is taken as is.

Decoded columns come after the fixed ones, one per field of the ``msgspec.Struct`` types
given to the recorder (their union, in declaration order; a tagged struct adds its tag
field, e.g. ``type``). A value of the wrong type, or a field the message lacks, is null.
omnm messages (OZ programs' payloads) fill the same columns by field name (the first
field of a name wins; TIME as a timestamp, PRICE as its value), so a Struct that
describes an OZ feed's fields gives Spark typed columns for it.
Fields that feed the fixed columns (``sender``, ``seq``...) are not repeated.

Timestamps are microseconds with a UTC zone: Spark cannot read pyarrow's default
nanosecond timestamps. Files are partitioned by the receive date:
``<dir>/date=YYYY-MM-DD/part-*.parquet`` (Spark adds ``date`` as a column).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal

import msgspec

from .. import omnm
from ..errors import DecodeError
from ..protocol.sequence import parse_header

__all__ = [
    "FIXED_COLUMNS",
    "Column",
    "ColumnKind",
    "RowBuffer",
    "arrow_schema",
    "build_tables",
    "columns_for",
    "spark_ddl",
]

ColumnKind = Literal["string", "int", "float", "bool", "bytes", "timestamp"]


class Column(msgspec.Struct, frozen=True):
    """One column of a recording: its name and what kind of values it holds."""

    name: str
    kind: ColumnKind


FIXED_COLUMNS: Final = (
    Column("subject", "string"),
    Column("sender", "string"),
    Column("sequence", "int"),
    Column("send_ts", "timestamp"),
    Column("receive_ts", "timestamp"),
    Column("publisher", "string"),
    Column("publisher_seq", "int"),
    Column("codec", "int"),
    Column("payload", "bytes"),
)

SENDER_FIELDS: Final = ("sender",)
SEQUENCE_FIELDS: Final = ("sequence", "seq")
SEND_TS_FIELDS: Final = ("send_ts", "ts", "sent_at")
_META_FIELDS: Final = frozenset(SENDER_FIELDS + SEQUENCE_FIELDS + SEND_TS_FIELDS)
_FIXED_NAMES: Final = frozenset(c.name for c in FIXED_COLUMNS) | {"date"}

_SPARK_TYPES: Final[dict[ColumnKind, str]] = {
    "string": "STRING",
    "int": "BIGINT",
    "float": "DOUBLE",
    "bool": "BOOLEAN",
    "bytes": "BINARY",
    "timestamp": "TIMESTAMP",
}


def _kind_of(t: msgspec.inspect.Type) -> ColumnKind | None:
    if isinstance(t, msgspec.inspect.UnionType):
        inner = [x for x in t.types if not isinstance(x, msgspec.inspect.NoneType)]
        return _kind_of(inner[0]) if len(inner) == 1 else None
    if isinstance(t, msgspec.inspect.StrType):
        return "string"
    if isinstance(t, msgspec.inspect.BoolType):
        return "bool"
    if isinstance(t, msgspec.inspect.IntType):
        return "int"
    if isinstance(t, msgspec.inspect.FloatType):
        return "float"
    if isinstance(t, msgspec.inspect.BytesType):
        return "bytes"
    if isinstance(t, msgspec.inspect.DateTimeType):
        return "timestamp"
    return None


def columns_for(types: Iterable[type[Any]]) -> tuple[Column, ...]:
    """The decoded columns for ``msgspec.Struct`` types: the union of their scalar fields.

    >>> from aoz.marketdata import Quote, Trade
    >>> [c.name for c in columns_for([Quote, Trade])]
    ['type', 'symbol', 'venue', 'bid', 'ask', 'bid_size', 'ask_size', 'price', 'size']
    """
    out: dict[str, Column] = {}
    for tp in types:
        info = msgspec.inspect.type_info(tp)
        if not isinstance(info, msgspec.inspect.StructType):
            raise TypeError(f"{tp!r} is not a msgspec.Struct type")
        if info.tag_field is not None and info.tag_field not in out:
            out[info.tag_field] = Column(info.tag_field, "string")
        for field in info.fields:
            name = field.encode_name
            if name in _META_FIELDS or name in _FIXED_NAMES or name in out:
                continue
            kind = _kind_of(field.type)
            if kind is not None:
                out[name] = Column(name, kind)
    return tuple(out.values())


def arrow_schema(decoded: Sequence[Column] = ()) -> Any:
    """The pyarrow schema of a recording with these decoded columns."""
    import pyarrow as pa

    return pa.schema([pa.field(c.name, _arrow_type(c.kind)) for c in (*FIXED_COLUMNS, *decoded)])


def spark_ddl(decoded: Sequence[Column] = (), *, with_date: bool = True) -> str:
    """The Spark DDL schema of a recording, for ``spark.readStream.schema(...)``.

    >>> spark_ddl(with_date=False).split(", ")[:2]
    ['subject STRING', 'sender STRING']
    """
    cols = [f"{c.name} {_SPARK_TYPES[c.kind]}" for c in (*FIXED_COLUMNS, *decoded)]
    if with_date:
        cols.append("date DATE")
    return ", ".join(cols)


def _arrow_type(kind: ColumnKind) -> Any:
    import pyarrow as pa

    return {
        "string": pa.string(),
        "int": pa.int64(),
        "float": pa.float64(),
        "bool": pa.bool_(),
        "bytes": pa.binary(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }[kind]


_MSGPACK: Final = msgspec.msgpack.Decoder()
_JSON: Final = msgspec.json.Decoder()


def _micros(value: object) -> int | None:
    """A send time as integer microseconds since the epoch, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        v = float(value)
        if v != v or v in (float("inf"), float("-inf")):
            return None
        a = abs(v)
        if a < 1e11:
            return round(v * 1_000_000)
        if a < 1e14:
            return round(v * 1_000)
        if a < 1e17:
            return round(v)
        return round(v / 1_000)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        delta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return None


_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _convert(kind: ColumnKind, value: object) -> object:
    if value is None:
        return None
    if kind == "string":
        return value if isinstance(value, str) else None
    if kind == "float":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if ok else None  # type: ignore[arg-type]
    if kind == "int":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if kind == "bool":
        return value if isinstance(value, bool) else None
    if kind == "bytes":
        return bytes(value) if isinstance(value, bytes | bytearray | memoryview) else None
    return _micros(value)


class RowBuffer:
    """Column lists for messages received on one UTC day, appended row by row."""

    __slots__ = ("columns", "decoded", "rows")

    def __init__(self, decoded: Sequence[Column]) -> None:
        self.decoded = tuple(decoded)
        self.columns: dict[str, list[object]] = {
            c.name: [] for c in (*FIXED_COLUMNS, *self.decoded)
        }
        self.rows = 0


def build_tables(
    rows: Iterable[tuple[str, float, bytes]],
    decoded: Sequence[Column] = (),
) -> tuple[dict[str, Any], int]:
    """Turn ``(subject, received_at, payload)`` rows into one Arrow table per UTC date.

    Returns ``({"YYYY-MM-DD": pyarrow.Table}, decode_errors)``; ``decode_errors`` counts
    msgpack/JSON/omnm payloads that did not parse (their rows are kept, with null fields).
    """
    import pyarrow as pa

    by_day: dict[int, RowBuffer] = {}
    errors = 0
    decoded = tuple(decoded)
    for subject, received_at, payload in rows:
        day = int(received_at // 86_400)
        buf = by_day.get(day)
        if buf is None:
            buf = by_day[day] = RowBuffer(decoded)
        cols = buf.columns
        header = parse_header(payload)
        if header is not None and header[0] <= 3:  # aoz's sequence header (see below)
            codec, body = header[0], payload[header[3] :]
            payload = bytes((codec,)) + body
        else:
            header = None
            codec, body = (payload[0] if payload else 0), payload[1:]
        fields: Any = None
        if codec in (1, 2):
            try:
                fields = (_MSGPACK if codec == 1 else _JSON).decode(body)
            except (msgspec.DecodeError, ValueError, RecursionError):  # hostile nesting too
                errors += 1
        elif codec == 0x4F:  # OpenMAMA omnm: its fields by name feed the same columns
            try:
                fields = omnm.decode(payload).to_dict(plain=True)
            except DecodeError:
                errors += 1
        elif codec > 3:
            codec = -1
        if not isinstance(fields, dict):
            fields = {}
        sender = fields.get("sender")
        seq = fields.get("sequence", fields.get("seq"))
        send = None
        for name in SEND_TS_FIELDS:
            if name in fields:
                send = fields[name]
                break
        cols["subject"].append(subject)
        cols["sender"].append(sender if isinstance(sender, str) and sender else None)
        cols["sequence"].append(seq if isinstance(seq, int) and not isinstance(seq, bool) else None)
        cols["send_ts"].append(_micros(send))
        cols["receive_ts"].append(round(received_at * 1_000_000))
        cols["publisher"].append(None if header is None else f"{header[1]:016x}")
        cols["publisher_seq"].append(None if header is None else header[2])
        cols["codec"].append(codec)
        cols["payload"].append(payload)
        for c in decoded:
            cols[c.name].append(_convert(c.kind, fields.get(c.name)))
        buf.rows += 1

    schema = arrow_schema(decoded)
    tables: dict[str, Any] = {}
    for day, buf in sorted(by_day.items()):
        date = (_EPOCH + dt.timedelta(days=day)).date().isoformat()
        arrays = [pa.array(buf.columns[f.name], type=f.type) for f in schema]
        tables[date] = pa.Table.from_arrays(arrays, schema=schema)
    return tables, errors
