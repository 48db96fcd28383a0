"""Writing recording files so that no reader ever sees half a file (blocking; run in a thread).

Each table is written to a hidden name in its final directory (``.part-….parquet.tmp``:
Spark, pyarrow datasets and Hive all skip names starting with ``.`` or ``_``), flushed,
optionally fsynced, and then renamed into place with :func:`os.replace`, which is atomic
within a directory. A crash leaves at most a hidden temporary file behind, never a
truncated visible one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["dictionary_columns", "partition_dir", "write_atomically", "write_parquet"]


def dictionary_columns(schema: Any) -> list[str]:
    """The columns of a recording worth dictionary-encoding: strings (subjects, senders,
    publishers, symbols repeat) and the codec. Not the payloads, numbers and times, which
    rarely repeat: encoding them costs half the writing time and gives larger files."""
    import pyarrow as pa

    return [f.name for f in schema
            if (pa.types.is_string(f.type) and f.name != "omnm_fields") or f.name == "codec"]


def partition_dir(root: Path, date: str) -> Path:
    """``root/date=YYYY-MM-DD`` (Hive-style, so Spark reads ``date`` as a column)."""
    return root / f"date={date}"


def write_parquet(table: Any, sink: Any, *, compression: str,
                  dictionary: list[str] | None) -> None:
    """Write ``table`` as Parquet to ``sink`` (a file or a pyarrow buffer) with the
    recorder's options. ``dictionary``: the columns to dictionary-encode (None: all)."""
    import pyarrow.parquet as pq

    pq.write_table(table, sink, compression=compression,
                   use_dictionary=True if dictionary is None else dictionary)


def write_atomically(
    table: Any,
    directory: Path,
    name: str,
    *,
    compression: str = "snappy",
    fsync: bool = False,
    dictionary: list[str] | None = None,
) -> tuple[Path, int]:
    """Write ``table`` as ``directory/name`` via a hidden temporary file; return (path, bytes).
    ``dictionary``: the columns to dictionary-encode (default: every column)."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / name
    tmp = directory / f".{name}.tmp"
    try:
        with open(tmp, "wb") as f:
            write_parquet(table, f, compression=compression, dictionary=dictionary)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
            size = f.tell()
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return final, size
