"""Record subjects to Parquet: :class:`Recorder` (needs the ``aoz[record]`` extra, pyarrow).

::

    async with Recorder(node, ["MD.>"], "recordings", types=[Quote, Trade]) as rec:
        ...

Batch reading of a recording is Spark's (``spark.read.parquet("recordings")``) or
pyarrow's (``pyarrow.dataset.dataset("recordings", partitioning="hive")``) own Parquet
reader; the columns are documented in :mod:`aoz.record.schema`.
"""

from __future__ import annotations

from .._extras import require

require("aoz.record", "record")  # fail at import, not at the first flush

from .recorder import Recorder, RecorderStatistics, record_main, resolve_types  # noqa: E402
from .schema import FIXED_COLUMNS, Column, arrow_schema, columns_for, spark_ddl  # noqa: E402

__all__ = [
    "FIXED_COLUMNS",
    "Column",
    "Recorder",
    "RecorderStatistics",
    "arrow_schema",
    "columns_for",
    "record_main",
    "resolve_types",
    "spark_ddl",
]
