"""The ``aoz`` source in the session's local Spark: schema, batch reads by offsets and
times, failOnDataLoss. The cluster tests (test_source_cluster.py) do streaming restarts."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from aoz.record.reading import Catalog

from .recordings import gap_recording, timed_recording

pytestmark = pytest.mark.spark

T0 = 1_764_000_000.0  # 2025-11-24T16:00:00Z


def test_a_batch_read_holds_the_recording_once_with_typed_columns(spark, recording):
    import pyarrow.dataset as ds

    df = spark.read.format("aoz").load(str(recording))
    fields = dict(df.dtypes)
    assert fields["receive_ts"] == "timestamp" and fields["price"] == "double"  # Trade's field
    assert (fields["date"], fields["recorder"], fields["offset"]) == ("date", "string", "bigint")
    rows = df.select("recorder", "offset", "subject", "publisher_seq").collect()
    truth = ds.dataset(recording, format="parquet", partitioning="hive").to_table()
    assert len(rows) == truth.num_rows == len({(r.recorder, r.offset) for r in rows})
    assert sorted((r.subject, r.publisher_seq) for r in rows) == sorted(
        zip(truth["subject"].to_pylist(), truth["publisher_seq"].to_pylist(), strict=True)
    )


def test_a_user_schema_may_name_a_subset_of_the_columns(spark, recording):
    df = spark.read.format("aoz").schema("subject STRING, offset BIGINT").load(str(recording))
    assert df.columns == ["subject", "offset"] and df.where("subject IS NULL").count() == 0


def test_starting_and_ending_offsets_as_json_address_single_messages(spark, recording):
    files = Catalog(recording).files()
    recorder = files[0].recorder
    first = min(f.number for f in files)
    start = json.dumps({recorder: {"file": first, "row": 10}})
    end = json.dumps({recorder: {"file": first, "row": 15}})
    df = (
        spark.read.format("aoz").option("startingOffsets", start).option("endingOffsets", end)
        .load(str(recording))
    )  # fmt: skip
    assert sorted(r.offset for r in df.select("offset").collect()) == [
        (first << 32) + i for i in range(10, 15)
    ]


def test_times_select_what_was_received_then_across_recorders(spark, tmp_path):
    timed_recording(tmp_path, T0)
    start = dt.datetime.fromtimestamp(T0 + 2.995, dt.UTC).isoformat()
    df = (
        spark.read.format("aoz").option("startingOffsets", start)
        .option("endingTimestamp", str(int((T0 + 4.995) * 1000))).load(str(tmp_path))
    )  # fmt: skip
    got = sorted(r.sequence for r in df.select("sequence").collect())
    assert got == list(range(300, 500)) + list(range(1300, 1500))


def test_fail_on_data_loss_fails_a_read_with_a_gap_and_reads_on_when_off(spark, tmp_path):
    rows = gap_recording(tmp_path, T0)
    with pytest.raises(Exception, match=r"10 message\(s\) of publisher .* on G\.A missing"):
        spark.read.format("aoz").load(str(tmp_path)).count()
    assert (
        spark.read.format("aoz").option("failOnDataLoss", "false").load(str(tmp_path)).count()
        == rows
    )


def test_bad_options_fail_when_the_query_is_defined(spark, recording):
    for key, value in (("startingOffsets", "yesterday"), ("maxRowsPerTrigger", "0")):
        with pytest.raises(Exception, match="aoz source"):
            spark.readStream.format("aoz").option(key, value).load(str(recording))


def test_max_rows_per_trigger_bounds_each_micro_batch(spark, recording, tmp_path):
    sizes: list[int] = []
    query = (
        spark.readStream.format("aoz").option("startingOffsets", "earliest")
        .option("maxRowsPerTrigger", "700").load(str(recording))
        .writeStream.foreachBatch(lambda df, _: sizes.append(df.count()))
        .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start()
    )  # fmt: skip
    assert query.awaitTermination(120)
    assert sum(sizes) == 3000 and max(sizes) <= 700
    progress = query.lastProgress["sources"][0]
    assert json.loads(progress["latestOffset"]) == json.loads(progress["endOffset"])
