"""What a recording looks like, and how received messages become Arrow tables. Pure.

One row per message. Fixed columns, always present:

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
``omnm_fields``      string, nullable              an omnm payload's every field, as typed JSON
===================  ============================  ================================================

An aoz publisher's payloads carry its publisher id and a per-subject sequence number
(:mod:`aoz._protocol.sequence`): they fill ``publisher`` and ``publisher_seq``, so a gap in
``publisher_seq`` within one (``subject``, ``publisher``) is a message the recording
lacks (null for OZ programs' payloads). ``sender``, ``sequence`` and the send time are the
application's own: the recorder takes them from the payload when it is a msgpack/JSON
map or an omnm message that has them (the demo feed's
``Quote``/``Trade`` of ``examples/marketdata`` carry ``sender``, ``seq`` and
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

So that recording an OpenMAMA feed loses no field, ``omnm_fields`` holds every field of
an omnm payload, declared in a Struct or not, as the typed JSON of
:func:`aoz.omnm.to_json`: a list of ``{"name", "fid", "type", "value"}`` in wire order,
duplicates kept (F32/F64 NaN and infinities as strings, OPAQUE as hex, TIME and PRICE
as objects). It is null for other codecs and for omnm payloads that do not parse. In
Spark, ``from_json(omnm_fields, "array<struct<name:string,fid:int,type:string,
value:string>>")`` gives the fields as rows (``value``: a string's text, the JSON text of
other values).

Timestamps are microseconds with a UTC zone: Spark cannot read pyarrow's default
nanosecond timestamps. Files are partitioned by the receive date:
``<dir>/date=YYYY-MM-DD/part-*.parquet`` (Spark adds ``date`` as a column).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any, Final, Literal

import msgspec

from .. import omnm
from .._protocol.headers import data_start, is_aoz_flagged
from .._protocol.sequence import FLAG
from .._protocol.sequence import PACK as SEQ_PACK
from ..errors import DecodeError, UsageTypeError

__all__ = [
    "FIXED_COLUMNS",
    "Column",
    "ColumnKind",
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
    Column("omnm_fields", "string"),
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

    >>> class Quote(msgspec.Struct, tag="quote"):
    ...     symbol: str
    ...     bid: float
    ...     seq: int          # feeds the fixed ``sequence`` column, not repeated
    >>> class Trade(msgspec.Struct, tag="trade"):
    ...     symbol: str
    ...     price: float
    >>> [c.name for c in columns_for([Quote, Trade])]
    ['type', 'symbol', 'bid', 'price']
    """
    out: dict[str, Column] = {}
    for tp in types:
        info = msgspec.inspect.type_info(tp)
        if not isinstance(info, msgspec.inspect.StructType):
            raise UsageTypeError(
                f"{tp!r} is not a msgspec.Struct type; pass the Struct classes whose fields "
                "become columns"
            )
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
_JSON_ENCODER: Final = msgspec.json.Encoder()
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


_EMPTY: Final[dict[str, object]] = {}


class _Decoded:
    """The fields a recording reads from payloads, decoded in bulk (see build_tables)."""

    def __init__(self, decoded: Sequence[Column]) -> None:
        names = [*SENDER_FIELDS, *SEQUENCE_FIELDS, *SEND_TS_FIELDS]
        names += [c.name for c in decoded if c.name not in names]
        self.attr = {name: f"f{i}" for i, name in enumerate(names)}
        fields = [(f"f{i}", Any, None) for i in range(len(names))]
        rename = {f"f{i}": name for i, name in enumerate(names)}
        # Any-typed fields: unknown keys are skipped in C, nothing fails validation.
        # gc=False: decoded values never refer back to their row, so no cycle can form;
        # a flush decodes tens of thousands of rows, which would trigger collections
        self.row = msgspec.defstruct("RecordedFields", fields, rename=rename, gc=False)
        self.empty = self.row()
        self.msgpack = msgspec.msgpack.Decoder(list[self.row])  # type: ignore[name-defined]
        self.json = msgspec.json.Decoder(list[self.row])  # type: ignore[name-defined]
        self.one_msgpack = msgspec.msgpack.Decoder(self.row)
        self.one_json = msgspec.json.Decoder(self.row)
        self.msgpack_spans = msgspec.msgpack.Decoder(list[msgspec.Raw])
        self.json_spans = msgspec.json.Decoder(list[msgspec.Raw])

    def spans(self, codec: int, joined: Any) -> list[int]:
        """The length of each element of a joined array, as the decoder reads it: a body
        is decoded alone in a batch only if its element is exactly the body (a truncated
        body followed by one with trailing bytes would otherwise borrow them, and the
        batch would still give one value per body). Raises like the decoder."""
        raws = (self.msgpack_spans if codec == 1 else self.json_spans).decode(joined)
        return list(map(len, raws))

    def decode(self, codec: int, bodies: list[bytes]) -> tuple[list[Any], int]:
        """Each body's fields (the empty row for a body that is not a map), and errors.

        One decoder call for the whole batch: the bodies are joined into one msgpack
        array (or JSON list). If that fails, each body is decoded alone, to find the bad
        ones (counted) and keep the others.
        """
        n = len(bodies)
        try:
            if codec == 1:
                joined = b"".join((b"\xdd", n.to_bytes(4, "big"), *bodies))
            else:
                joined = b"[" + b",".join(bodies) + b"]"
            if self.spans(codec, joined) == list(map(len, bodies)):
                rows: list[Any] = (self.msgpack if codec == 1 else self.json).decode(joined)
                return rows, 0
        except (msgspec.DecodeError, ValueError, RecursionError):  # hostile nesting too
            pass
        one = self.one_msgpack if codec == 1 else self.one_json
        out: list[Any] = []
        errors = 0
        generic = _MSGPACK if codec == 1 else _JSON
        for body in bodies:
            try:
                out.append(one.decode(body))
                continue
            except msgspec.ValidationError:
                # not a map: well-formed (no fields), or malformed inside what the typed
                # decoder skipped (deep nesting...): the generic decoder tells them apart
                try:
                    generic.decode(body)
                except (msgspec.DecodeError, ValueError, RecursionError):
                    errors += 1
            except (msgspec.DecodeError, ValueError, RecursionError):
                errors += 1
            out.append(self.empty)
        return out, errors


_DECODERS: dict[tuple[Column, ...], _Decoded] = {}
_BYTES: Final = [bytes((i,)) for i in range(256)]
SEQ_MSGPACK: Final = 0x01 | FLAG  # msgpack with a sequence header, no header block
SEQ_HEAD: Final = 13  # its first byte, publisher id and number (aoz._protocol.sequence)


def decoder(decoded: tuple[Column, ...]) -> _Decoded:
    """The bulk decoder of the fields a recording with ``decoded`` columns reads (cached)."""
    d = _DECODERS.get(decoded)
    if d is None:
        if len(_DECODERS) > 32:
            _DECODERS.clear()
        d = _DECODERS[decoded] = _Decoded(decoded)
    return d


def _column(values: list[Any], kind: ColumnKind) -> Any:
    """An Arrow array of ``kind`` from decoded values: in one pyarrow call when the
    values' inferred type is the column's (ints also fill a float column), else value by
    value, wrong types becoming null (pyarrow alone would truncate 1.5 to 1)."""
    import pyarrow as pa

    typ = _arrow_type(kind)
    if kind == "timestamp":
        return pa.array([_micros(v) for v in values], type=typ)
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        arr = None
    if arr is not None:
        if arr.type == typ:
            return arr
        if pa.types.is_null(arr.type) or (kind == "float" and arr.type == pa.int64()):
            return arr.cast(typ)
    return pa.array([_convert(kind, v) for v in values], type=typ)


def _send_micros(values: list[Any]) -> Any:
    """send_ts column: float/int seconds (or ms, us, ns by magnitude) in bulk."""
    import pyarrow as pa
    import pyarrow.compute as pc

    typ = pa.timestamp("us", tz="UTC")
    try:
        secs = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        secs = None
    if secs is None or not (
        pa.types.is_floating(secs.type) or pa.types.is_integer(secs.type)
        or pa.types.is_null(secs.type)
    ):  # fmt: skip
        return pa.array([_micros(v) for v in values], type=typ)
    secs = secs.cast(pa.float64())
    mag = pc.abs(secs)
    scale = pc.if_else(
        pc.less(mag, 1e11), 1e6,
        pc.if_else(pc.less(mag, 1e14), 1e3, pc.if_else(pc.less(mag, 1e17), 1.0, 1e-3)),
    )  # fmt: skip
    micros = pc.round(pc.multiply(secs, scale))
    micros = pc.if_else(pc.is_finite(micros), micros, pa.scalar(None, pa.float64()))
    return pc.cast(micros, pa.int64()).cast(typ)


def build_tables(
    rows: Iterable[tuple[str, float, bytes]],
    decoded: Sequence[Column] = (),
) -> tuple[dict[str, Any], int]:
    """Turn ``(subject, received_at, payload)`` rows into one Arrow table per UTC date.

    Returns ``({"YYYY-MM-DD": pyarrow.Table}, decode_errors)``; ``decode_errors`` counts
    msgpack/JSON/omnm payloads that did not parse (their rows are kept, with null fields).

    Vectorised: the payloads of one codec are decoded by one decoder call, each column
    is taken out with a C-level ``map`` and built by one ``pyarrow.array`` call; Python
    loops over rows only to pick each row's codec. Rows that all come from aoz
    publishers (sequenced msgpack, the common case) take no Python per row at all up to
    the decoded fields (:func:`_bulk_sequenced_msgpack`).
    """
    import pyarrow as pa

    rows = list(rows)
    decoded = tuple(decoded)
    if not rows:
        return {}, 0
    subjects, received, payloads = (list(c) for c in zip(*rows, strict=True))
    dec = decoder(decoded)
    bulk = _bulk_sequenced_msgpack(payloads, dec)
    if bulk is not None:  # one aoz feed: every payload sequenced msgpack (the common case)
        fields, publisher, publisher_seq, payload_array = bulk
        codecs = [1] * len(rows)
        errors = 0
    else:
        payload_array = None
        fields, codecs, payloads, publisher, publisher_seq, errors = _per_row(payloads, dec)
    omnm_fields: list[str | None] = [None] * len(rows)
    if 0x4F in codecs:  # OpenMAMA omnm (OZ programs' payloads): fields by name, row by row
        for i, codec in enumerate(codecs):
            if codec == 0x4F:
                try:
                    msg = omnm.decode(payloads[i])
                    fields[i] = msgspec.convert(msg.to_dict(plain=True), dec.row)
                except (DecodeError, msgspec.ValidationError):
                    errors += 1
                    continue
                omnm_fields[i] = _JSON_ENCODER.encode(omnm.to_json(msg)).decode()

    return assemble(
        pa.array(subjects, type=pa.string()), pa.array(received, type=pa.float64()), fields,
        codecs, payload_array if payload_array is not None
        else pa.array(payloads, type=pa.binary()),
        publisher, publisher_seq, pa.array(omnm_fields, type=pa.string()), decoded, errors,
    )  # fmt: skip


def assemble(
    subject: Any, received: Any, fields: list[Any], codecs: list[int], payload: Any,
    publisher: Any, publisher_seq: Any, omnm_fields: Any, decoded: tuple[Column, ...],
    errors: int,
) -> tuple[dict[str, Any], int]:
    """The tables of :func:`build_tables` from its columns (Arrow arrays) and decoded
    ``fields`` (rows of the decoder's struct): the columns taken out of the fields, the
    table split by UTC receive date. Shared with :mod:`aoz.record.bulk`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    dec = decoder(decoded)

    def col(name: str) -> list[Any]:
        return list(map(attrgetter(dec.attr[name]), fields))

    def first(*names: str) -> list[Any]:
        out = col(names[0])
        for name in names[1:]:
            missing = out.count(None)
            if missing:
                other = col(name)
                if missing == len(out):
                    out = other
                elif other.count(None) != len(other):
                    out = [a if a is not None else b for a, b in zip(out, other, strict=True)]
        return out

    sender = _column(col("sender"), "string")
    sender = pc.if_else(pc.equal(sender, ""), pa.scalar(None, pa.string()), sender)
    arrays = {
        "subject": subject,
        "sender": sender,
        "sequence": _column(first(*SEQUENCE_FIELDS), "int"),
        "send_ts": _send_micros(first(*SEND_TS_FIELDS)),
        "receive_ts": pc.cast(pc.round(pc.multiply(received, 1e6)), pa.int64()).cast(
            pa.timestamp("us", tz="UTC")
        ),
        "publisher": publisher,
        "publisher_seq": publisher_seq,
        "codec": pa.array(codecs if max(codecs) <= 3 else [c if c <= 3 or c == 0x4F else -1
                                                           for c in codecs], type=pa.int64()),
        "payload": payload,
        "omnm_fields": omnm_fields,
    }  # fmt: skip
    for c in decoded:
        arrays[c.name] = _column(col(c.name), c.kind)
    schema = arrow_schema(decoded)
    table = pa.Table.from_arrays([arrays[f.name] for f in schema], schema=schema)
    # as Python's float //: t / 86400 can round up to the next day a hair before midnight
    day_of = pc.floor(pc.divide(received, 86_400.0))
    day_of = pc.if_else(pc.greater(pc.multiply(day_of, 86_400.0), received),
                        pc.subtract(day_of, 1.0), day_of)  # fmt: skip
    lo, hi = (int(v.as_py()) for v in pc.min_max(day_of).values())
    if lo == hi:
        return {_date(lo): table}, errors
    tables = {}
    for day in sorted(pc.unique(day_of).to_pylist()):
        tables[_date(int(day))] = table.filter(pc.equal(day_of, day))
    return tables, errors


def _per_row(
    payloads: list[bytes], dec: _Decoded
) -> tuple[list[Any], list[int], list[bytes], Any, Any, int]:
    """Fields, codecs, payloads (without sequence headers), publisher and publisher_seq
    columns, decode errors: row by row where needed (mixed codecs, headers, foreign)."""
    import pyarrow as pa

    n = len(payloads)
    # aoz's sequence header (see above): flagged codec byte, publisher id, sequence
    firsts = [p[0] if p else 0 for p in payloads]
    # where the body starts: after the flagged first byte, the sequence header and the
    # header block (aoz._protocol.headers.data_start); 1 for unflagged or cut-short ones
    starts = [
        max(data_start(p, 0), 1) if is_aoz_flagged(f) else 1
        for f, p in zip(firsts, payloads, strict=True)
    ]
    sequenced = len(starts) - starts.count(1)
    if sequenced:
        codecs = [f & 3 if s > 1 else f for f, s in zip(firsts, starts, strict=True)]
        bodies = [p[s:] for p, s in zip(payloads, starts, strict=True)]
        heads = [
            SEQ_PACK.unpack_from(p, 1) if s > 1 and f & FLAG else (None, None)
            for p, f, s in zip(payloads, firsts, starts, strict=True)
        ]
        pub_ids, pub_seqs = (list(c) for c in zip(*heads, strict=True))
        hexes: dict[int | None, str | None] = {
            i: f"{i:016x}" for i in set(pub_ids) if i is not None
        }
        hexes[None] = None
        publisher = pa.array(list(map(hexes.__getitem__, pub_ids)), type=pa.string())
        publisher_seq = pa.array(pub_seqs, type=pa.int64())
        # the payload column keeps the codec byte and the body, not the sequence header
        payloads = [
            _BYTES[c] + b if s > 1 else p
            for c, b, s, p in zip(codecs, bodies, starts, payloads, strict=True)
        ]
    else:
        codecs = firsts
        bodies = [p[1:] for p in payloads]
        publisher = pa.nulls(n, type=pa.string())
        publisher_seq = pa.nulls(n, type=pa.int64())
    errors = 0
    if codecs.count(1) == n:  # the common case: one feed, one codec
        fields, errors = dec.decode(1, bodies)
    else:
        fields = [dec.empty] * n
        for codec in (1, 2):
            idx = [i for i, c in enumerate(codecs) if c == codec]
            if idx:
                values, bad = dec.decode(codec, [bodies[i] for i in idx])
                errors += bad
                for i, v in zip(idx, values, strict=True):
                    fields[i] = v
    return fields, codecs, payloads, publisher, publisher_seq, errors


def _bulk_sequenced_msgpack(
    payloads: list[bytes], dec: _Decoded
) -> tuple[list[Any], Any, Any, Any] | None:
    """``build_tables`` for payloads that are all aoz msgpack with a sequence header and
    no header block (first byte 0x05: one aoz feed), with no Python per row: the
    payloads are joined once, the sequence headers read and cut out by numpy index
    arithmetic, the bodies decoded by one decoder call and the payload column built from
    buffers. ``None`` when a payload is anything else, or a body does not decode (the
    row-by-row path then finds and counts the bad ones)."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - pyarrow >= 16 does not need numpy
        return None
    import pyarrow as pa

    n = len(payloads)
    lens = np.fromiter(map(len, payloads), dtype=np.int64, count=n)
    if n == 0 or int(lens.min()) < SEQ_HEAD:
        return None
    blob = b"".join(payloads)
    buf = np.frombuffer(blob, dtype=np.uint8)
    ends = np.cumsum(lens)
    starts = ends - lens
    if not bool((buf[starts] == SEQ_MSGPACK).all()):
        return None
    head = starts[:, None] + np.arange(1, SEQ_HEAD)  # publisher id and number, per row
    ids = np.ascontiguousarray(buf[head[:, :8]]).view("<u8").ravel()
    seqs = np.ascontiguousarray(buf[head[:, 8:]]).view("<u4").ravel()
    keep = np.ones(len(buf), dtype=bool)
    keep[head.ravel()] = False
    payload_blob = buf[keep]  # each payload: its codec byte and body
    keep[starts] = False
    joined = b"".join((b"\xdd", n.to_bytes(4, "big"), buf[keep].tobytes()))
    try:
        if not np.array_equal(dec.spans(1, joined), lens - SEQ_HEAD):
            return None  # a body that is not one msgpack value: found row by row
        fields: list[Any] = dec.msgpack.decode(joined)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return None
    if len(fields) != n:  # pragma: no cover - n bodies in, n rows out
        return None
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens - (SEQ_HEAD - 1), out=offsets[1:])
    if offsets[-1] >= 2**31:
        return None
    payload_blob[offsets[:-1]] = 0x01  # the codec byte without the sequence flag
    payload_array = pa.Array.from_buffers(
        pa.binary(), n,
        [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(payload_blob)],
    )  # fmt: skip
    uniq, inverse = np.unique(ids, return_inverse=True)
    hexes = pa.array([f"{int(i):016x}" for i in uniq], type=pa.string())
    publisher = hexes.take(pa.array(inverse.astype(np.int32)))
    return fields, publisher, pa.array(seqs.astype(np.int64)), payload_array


def _date(day: int) -> str:
    return (_EPOCH + dt.timedelta(days=day)).date().isoformat()
