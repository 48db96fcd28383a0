"""Reading a recording back (pyarrow only): stream summaries in the recorder's footers,
and the same summaries from the columns of files that lack them."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from aoz.record.gaps import GapTracker
from aoz.record.offsets import Slice
from aoz.record.reading import STREAMS_KEY, Catalog, read_slice, stream_summaries, summarise
from aoz.record.recorder import write_rows

from .recordings import payload, write_run

T0 = 1_764_000_000.0


def test_the_recorder_footer_summaries_are_the_columns_summaries(tmp_path):
    rows = [("S.a", T0 + i, payload(i)) for i in (*range(1, 50), *range(53, 80))]
    rows += [("S.b", T0 + i, payload(i, 9)) for i in range(1, 30)]
    rows.append(("S.c", T0, b"\x01\x80"))  # unsequenced: not judged
    written, errors = write_rows(rows, (), str(tmp_path), "dddd0001", 0, "snappy", False)
    assert errors == 0 and len(written) == 1
    (f,) = Catalog(tmp_path).files()
    assert STREAMS_KEY in pq.read_schema(f.path).metadata
    from_footer = summarise([Slice(f, 0, f.rows)])
    table = pa.Table.from_batches(list(read_slice(Slice(f, 0, f.rows))))
    assert sorted(from_footer, key=repr) == sorted(stream_summaries(table), key=repr)
    assert [str(g) for g in GapTracker().feed(from_footer)] == [
        "3 message(s) of publisher 0000000000001234 on S.a missing between sequence 1 and 79"
    ]
    # a part of the file is summarised from its columns
    part = summarise([Slice(f, 0, 10)])
    assert [(s.subject, s.first, s.last, s.count) for s in part] == [("S.a", 1, 10, 10)]


def test_files_without_footer_summaries_are_summarised_from_their_columns(tmp_path):
    write_run(tmp_path, "eeee0001", [("S.a", T0 + i, payload(i)) for i in (1, 2, 4)],
              per_file=10, stamp=1)  # fmt: skip
    (f,) = Catalog(tmp_path).files()
    assert STREAMS_KEY not in (pq.read_schema(f.path).metadata or {})
    (only,) = summarise([Slice(f, 0, f.rows)])
    assert (only.first, only.last, only.count) == (1, 4, 3)
