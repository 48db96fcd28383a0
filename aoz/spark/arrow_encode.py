"""Arrow record batches -> msgpack maps, one per row, with no Python per row. Pure.

The sink's hot path (:mod:`aoz.spark.sink`): each column becomes a binary array of
msgpack values built by Arrow and numpy kernels (a type byte plus big-endian bytes for
numbers, a length header plus UTF-8 for strings, ``nil`` for nulls), and one
``binary_join_element_wise`` glues ``map header, key, value, key, value...`` into
each row's body. The result is one Arrow binary array whose data buffer and offsets
are exactly what the sidecar wire wants (:func:`aoz.spark.sidecar.encode_chunk`).

Numbers use msgpack's fixed-width forms (``int 64``, ``float 64``; valid msgpack that
every decoder reads as the same value, a few bytes longer than the minimal form),
timestamps the 12-byte timestamp extension. Types this module does not cover (nested
structs, lists, decimals, strings over 65535 bytes, naive timestamps) return ``None``
and the caller encodes that batch row by row with msgspec.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = ["encode_rows"]

_ENC: Final = msgspec.msgpack.Encoder()
_NIL: Final = b"\xc0"


def _scalar(value: bytes) -> Any:
    import pyarrow as pa

    return pa.scalar(value, pa.binary())


def _fixed(tag: int, values: Any, dtype: str) -> Any:
    """``tag`` + big-endian ``values`` as a binary array (numpy -> fixed_size_binary)."""
    import numpy as np
    import pyarrow as pa

    rec = np.empty(len(values), dtype=[("t", "u1"), ("v", dtype)])
    rec["t"] = tag
    rec["v"] = values
    width = rec.dtype.itemsize
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), len(values), [None, pa.py_buffer(rec.tobytes())]
    )
    return fixed.cast(pa.binary())


def _str_headers() -> Any:
    import pyarrow as pa

    heads = [bytes([0xA0 | n]) if n < 32 else b"\xd9" + bytes([n]) for n in range(256)]
    return pa.array(heads, pa.binary())


_STR_HEADS: list[Any] = []


def _column(col: Any) -> Any | None:
    """The msgpack encoding of every value of ``col`` (a binary array), or ``None``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    n = len(col)
    if pa.types.is_integer(t):
        values = col.fill_null(0).to_numpy(zero_copy_only=False)
        out = (
            _fixed(0xCF, values.astype(np.uint64), ">u8")
            if pa.types.is_unsigned_integer(t)
            else _fixed(0xD3, values.astype(np.int64), ">i8")
        )
    elif pa.types.is_floating(t):
        values = col.fill_null(0.0).to_numpy(zero_copy_only=False).astype(np.float64)
        out = _fixed(0xCB, values, ">f8")
    elif pa.types.is_boolean(t):
        out = pc.if_else(col.fill_null(False), _scalar(b"\xc3"), _scalar(b"\xc2"))
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        data = col.cast(pa.binary())
        lengths = pc.binary_length(data).fill_null(0)
        longest = pc.max(lengths).as_py() or 0
        if longest < 256:
            if not _STR_HEADS:
                _STR_HEADS.append(_str_headers())
            heads = pc.take(_STR_HEADS[0], lengths)
        elif longest < 65536:
            heads = _fixed(0xDA, lengths.to_numpy(zero_copy_only=False), ">u2")
        else:
            return None
        out = pc.binary_join_element_wise(heads, data.fill_null(b""), _scalar(b""))
    elif pa.types.is_timestamp(t) and t.tz is not None:
        micros = col.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64()).fill_null(0)
        us = micros.to_numpy(zero_copy_only=False)
        secs, rest = np.divmod(us, 1_000_000)
        rec = np.empty(n, dtype=[("h", "u1", 3), ("ns", ">u4"), ("s", ">i8")])
        rec["h"] = (0xC7, 12, 0xFF)
        rec["ns"] = rest * 1000
        rec["s"] = secs
        out = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(15), n, [None, pa.py_buffer(rec.tobytes())]
        ).cast(pa.binary())
    else:
        return None
    if col.null_count:
        out = pc.if_else(col.is_null(), _scalar(_NIL), out)
    return out


def encode_rows(
    batch: Any, columns: list[str], extra_key: str, extra_prefix: bytes, start: int
) -> Any | None:
    """msgpack maps ``{column: value, ..., extra_key: [*extra_prefix, index]}`` for the
    rows of ``batch`` (``index`` counts from ``start``), as a pyarrow binary array; or
    ``None`` when a column's type is not covered (see the module docstring).

    ``extra_prefix`` is the msgpack encoding of the extra array's header and its values
    before the row index (the sink's envelope without the index).
    """
    import numpy as np
    import pyarrow.compute as pc

    n = batch.num_rows
    entries = len(columns) + 1
    if entries < 16:
        head = bytes([0x80 | entries])
    elif entries < 65536:
        head = b"\xde" + entries.to_bytes(2, "big")
    else:
        return None
    parts: list[Any] = [_scalar(head)]
    for name in columns:
        encoded = _column(batch.column(name))
        if encoded is None:
            return None
        parts += [_scalar(_ENC.encode(name)), encoded]
    index = _fixed(0xCF, np.arange(start, start + n, dtype=np.uint64), ">u8")
    parts += [_scalar(_ENC.encode(extra_key) + extra_prefix), index]
    return pc.binary_join_element_wise(*parts, _scalar(b""))


def buffers_of(bodies: Any) -> tuple[bytes, bytes]:
    """``(offsets as n + 1 little-endian uint32, data)`` of a binary array."""
    import numpy as np

    n = len(bodies)
    _, offs_buf, data_buf = bodies.buffers()
    offs = np.frombuffer(offs_buf, dtype="<i4", count=bodies.offset + n + 1)[bodies.offset :]
    first, last = int(offs[0]), int(offs[-1])
    return (offs - first).astype("<u4").tobytes(), data_buf.to_pybytes()[first:last]
