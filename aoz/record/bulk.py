"""Received frames -> the recording's tables, in bulk. Pure.

The recorder hands its writer the ZeroMQ frames as they came off the wire, joined into
one buffer with their lengths and receive times (a :class:`FrameBatch`: three objects
for a whole flush, whatever its size, cheap to send to a worker process), not one
Python object per row. :func:`tables_from_frames` builds the tables of
:func:`aoz.record.schema.build_tables` from it:

- a batch of publish frames whose payloads are all aoz msgpack with a sequence header
  and no header block (what aoz publishers send by default; one feed or several) is cut
  by numpy index arithmetic over the joined buffer: the subjects, the publisher ids and
  numbers, the payloads without their sequence headers and the msgpack bodies come out
  as Arrow buffers with no Python per row; the bodies are decoded by one msgspec call;
- any other batch (omnm, JSON, headers, requests, a body that does not parse, or no
  numpy) is split into ``(subject, received_at, payload)`` rows and built by
  :func:`~aoz.record.schema.build_tables`, which finds and counts what does not decode.

Both give the same table for the same frames (``tests/pipeline/test_bulk_frames.py``).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

import msgspec

from .._protocol.frames import decode_frame
from .._protocol.subjects import MAX_SUBJECT
from .schema import SEQ_HEAD, SEQ_MSGPACK, Column, assemble, build_tables, decoder

__all__ = ["FrameBatch", "pack", "rows_of", "tables_from_frames"]

_PUBLISH: Final = 0x01  # the type byte of a publish frame (SPEC §1)


class FrameBatch(NamedTuple):
    """Frames as the recorder hands them to its writer."""

    blob: bytes  #: the frames, joined
    lengths: array[int]  #: each frame's length (``array("q")``)
    received: array[float]  #: each frame's receive time, seconds (``array("d")``)


def pack(frames: Sequence[bytes], received: Sequence[float]) -> FrameBatch:
    """One :class:`FrameBatch` of ``frames`` and their receive times."""
    if len(frames) != len(received):
        raise ValueError(f"{len(frames)} frames but {len(received)} receive times")
    return FrameBatch(b"".join(frames), array("q", map(len, frames)), array("d", received))


def rows_of(batch: FrameBatch) -> list[tuple[str, float, bytes]]:
    """The ``(subject, received_at, payload)`` rows of ``batch`` (a request's payload
    starts after its reply handle: :func:`aoz._protocol.frames.decode_frame`)."""
    out = []
    pos = 0
    blob = batch.blob
    for length, at in zip(batch.lengths, batch.received, strict=True):
        frame = blob[pos : pos + length]
        pos += length
        f = decode_frame(frame)  # the node delivers only frames it parsed
        out.append((f.subject.decode(), at, frame[f.payload_start :]))
    return out


def tables_from_frames(
    batch: FrameBatch, decoded: Sequence[Column] = ()
) -> tuple[dict[str, Any], int]:
    """The tables of :func:`aoz.record.schema.build_tables` for the frames of ``batch``:
    ``({"YYYY-MM-DD": pyarrow.Table}, decode_errors)``."""
    decoded = tuple(decoded)
    if not len(batch.lengths):
        return {}, 0
    bulk = _bulk(batch, decoded)
    if bulk is not None:
        return bulk
    return build_tables(rows_of(batch), decoded)


def _bulk(batch: FrameBatch, decoded: tuple[Column, ...]) -> tuple[dict[str, Any], int] | None:
    """:func:`tables_from_frames` for publish frames of sequenced msgpack payloads with no
    header block, or ``None`` for any other batch."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - pyarrow >= 16 does not need numpy
        return None
    import pyarrow as pa
    import pyarrow.compute as pc

    lens = np.frombuffer(batch.lengths, dtype=np.int64)
    buf = np.frombuffer(batch.blob, dtype=np.uint8)
    n = len(lens)
    size = len(buf)
    if int(lens.sum()) != size or size >= 2**31 or len(batch.received) != n:
        return None
    ends = np.cumsum(lens)
    starts = ends - lens
    offsets32 = np.zeros(n + 1, dtype=np.int32)
    offsets32[1:] = ends
    frames = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets32), pa.py_buffer(batch.blob)]
    )
    sub_len = pc.find_substring(frames, pattern=b"\x00").to_numpy()  # each frame's first NUL
    nul = starts + sub_len
    p = nul + 3  # each payload
    if (
        int(sub_len.min()) < 1 or int(sub_len.max()) > MAX_SUBJECT
        or int((ends - p).min()) < SEQ_HEAD
    ):  # fmt: skip
        return None
    if not (
        bool((buf[nul + 1] == _PUBLISH).all()) and bool((buf[nul + 2] == 0).all())
        and bool((buf[p] == SEQ_MSGPACK).all())
    ):  # fmt: skip
        return None
    head = (p + 1)[:, None] + np.arange(SEQ_HEAD - 1)  # publisher id and number, per row
    ids = np.ascontiguousarray(buf[head[:, :8]]).view("<u8").ravel()
    seqs = np.ascontiguousarray(buf[head[:, 8:]]).view("<u4").ravel()
    # The payload column keeps, of each frame, the last byte of the sequence header (made
    # the codec byte) and the body: a byte mask of alternating runs, cut and kept.
    last = p + SEQ_HEAD - 1
    payload_blob = buf[_runs(last - starts, ends - last, np)]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(ends - last, out=offsets[1:])
    payload_blob[offsets[:-1]] = 0x01  # the codec byte without the sequence flag
    body = np.ones(len(payload_blob), dtype=bool)
    body[offsets[:-1]] = False
    array32 = np.empty(5 + len(payload_blob) - n, dtype=np.uint8)  # one msgpack array
    array32[:5] = np.frombuffer(b"\xdd" + n.to_bytes(4, "big"), dtype=np.uint8)
    array32[5:] = payload_blob[body]
    dec = decoder(decoded)
    try:
        if not np.array_equal(dec.spans(1, array32.data), ends - last - 1):
            return None  # a body that is not one msgpack value (see _Decoded.spans)
        fields: list[Any] = dec.msgpack.decode(array32.data)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return None  # the row-by-row path finds and counts the bad ones
    if len(fields) != n:  # pragma: no cover - n bodies in, n rows out
        return None
    payload = pa.Array.from_buffers(
        pa.binary(), n,
        [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(payload_blob)],
    )  # fmt: skip
    sub_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(sub_len, out=sub_offsets[1:])
    subject_blob = buf[~_runs(sub_len, ends - nul, np)]
    try:
        subject = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(sub_offsets), pa.py_buffer(subject_blob)]
        ).cast(pa.string())
    except pa.ArrowInvalid:  # pragma: no cover - the node routes only UTF-8 subjects
        return None
    uniq, inverse = np.unique(ids, return_inverse=True)
    hexes = pa.array([f"{int(i):016x}" for i in uniq], type=pa.string())
    publisher = hexes.take(pa.array(inverse.astype(np.int32)))
    received = pa.array(np.frombuffer(batch.received, dtype=np.float64))
    return assemble(
        subject, received, fields, [1] * n, payload, publisher,
        pa.array(seqs.astype(np.int64)), pa.nulls(n, type=pa.string()), decoded, 0,
    )  # fmt: skip


def _runs(first: Any, second: Any, np: Any) -> Any:
    """A byte mask: per row, ``first[i]`` bytes False then ``second[i]`` bytes True."""
    sizes = np.empty(2 * len(first), dtype=np.int64)
    sizes[0::2] = first
    sizes[1::2] = second
    return np.repeat(np.tile(np.array([False, True]), len(first)), sizes)
