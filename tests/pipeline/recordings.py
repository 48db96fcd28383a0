"""Recordings written without a network, exactly as a Recorder writes them (same tables,
same file names, same atomic rename), with chosen receive times and sequence numbers:
for gaps and times a test must control."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

from aoz._protocol.sequence import encode_header
from aoz.record.files import partition_dir, write_atomically
from aoz.record.schema import build_tables

PUBLISHER = 0x1234


def payload(seq: int, publisher: int = PUBLISHER) -> bytes:
    """A sequenced msgpack payload whose body says ``{"sequence": seq}``."""
    return encode_header(1, publisher, seq) + msgspec.msgpack.encode({"sequence": seq})


def write_run(
    directory: Path,
    recorder: str,
    rows: Sequence[tuple[str, float, bytes]],
    *,
    per_file: int,
    stamp: int,
) -> int:
    """Write ``rows`` (subject, received_at, payload) as recorder run ``recorder``, in files
    of ``per_file`` rows numbered from 1; returns the number of files."""
    number = 0
    for i in range(0, len(rows), per_file):
        tables, errors = build_tables(rows[i : i + per_file])
        assert errors == 0
        for date, table in tables.items():
            number += 1
            name = f"part-{stamp + number}-{recorder}-{number:06d}.parquet"
            write_atomically(table, partition_dir(directory, date), name)
    return number


def gap_recording(directory: Path, t0: float) -> int:
    """Two recorder runs: ``G.A`` numbered 1..150 by the first, 161..300 by the second
    (a recorder that was down lost 10), ``G.B`` 1..300 without a gap. Returns the rows."""
    first = [("G.A", t0 + i, payload(i)) for i in range(1, 151)]
    first += [("G.B", t0 + i, payload(i)) for i in range(1, 151)]
    second = [("G.A", t0 + 200 + i, payload(i)) for i in range(161, 301)]
    second += [("G.B", t0 + 200 + i, payload(i)) for i in range(151, 301)]
    write_run(directory, "aaaa0001", first, per_file=100, stamp=int(t0 * 1e6))
    write_run(directory, "aaaa0002", second, per_file=100, stamp=int((t0 + 200) * 1e6))
    return len(first) + len(second)


def timed_recording(directory: Path, t0: float) -> None:
    """Two recorder runs side by side, received 10 ms apart from ``t0``: run ``bbbb0001``
    numbers 0..599, run ``bbbb0002`` 1000..1599 (row i of each at ``t0 + i/100``)."""
    for k, recorder in enumerate(("bbbb0001", "bbbb0002")):
        rows = [(f"T.{k}", t0 + i / 100, payload(1000 * k + i, k + 1)) for i in range(600)]
        write_run(directory, recorder, rows, per_file=128, stamp=int(t0 * 1e6) + k)
