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

__all__ = ["partition_dir", "write_atomically"]


def partition_dir(root: Path, date: str) -> Path:
    """``root/date=YYYY-MM-DD`` (Hive-style, so Spark reads ``date`` as a column)."""
    return root / f"date={date}"


def write_atomically(
    table: Any,
    directory: Path,
    name: str,
    *,
    compression: str = "snappy",
    fsync: bool = False,
) -> tuple[Path, int]:
    """Write ``table`` as ``directory/name`` via a hidden temporary file; return (path, bytes)."""
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    final = directory / name
    tmp = directory / f".{name}.tmp"
    try:
        with open(tmp, "wb") as f:
            pq.write_table(table, f, compression=compression)
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
