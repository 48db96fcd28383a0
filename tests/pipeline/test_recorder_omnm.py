"""The recorder with OpenMAMA omnm payloads: fields land in typed columns."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import msgspec
import pyarrow.dataset as ds

from aoz import omnm
from aoz.omnm import Field, FieldType, Message, Price, Time
from aoz.record import Recorder, columns_for
from aoz.record.schema import build_tables


class OzQuote(msgspec.Struct):
    """How a Spark user describes an OZ feed's fields."""

    wIssueSymbol: str
    wBidPrice: float
    wBidSize: int
    wHalted: bool


SENT = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)


def oz_quote(seq: int) -> omnm.Message:
    return omnm.Message([
        omnm.Field("MdMsgType", 1, FieldType.I32, 1),
        omnm.Field("seq", 10, FieldType.U32, seq),
        omnm.Field("sender", 11, FieldType.STRING, "oz-feed"),
        omnm.Field("ts", 16, FieldType.TIME, Time.from_datetime(SENT)),
        omnm.Field("wIssueSymbol", 305, FieldType.STRING, "IBM"),
        omnm.Field("wBidPrice", 237, FieldType.PRICE, Price(141.5, 2)),
        omnm.Field("wBidSize", 238, FieldType.U32, 300 + seq),
        omnm.Field("wHalted", 239, FieldType.BOOL, False),
    ])


def test_omnm_fields_fill_the_typed_and_meta_columns() -> None:
    rows = [("MD.IBM", 1.0, omnm.encode(oz_quote(7))), ("MD.IBM", 1.0, b"O\x01\x00\x08")]
    tables, errors = build_tables(rows, columns_for([OzQuote]))
    assert errors == 1  # the truncated omnm message: kept, with null fields
    good, bad = tables["1970-01-01"].to_pylist()
    assert good["codec"] == 0x4F and good["payload"] == rows[0][2]
    assert (good["sender"], good["sequence"], good["send_ts"]) == ("oz-feed", 7, SENT)
    assert (good["wIssueSymbol"], good["wBidPrice"], good["wBidSize"], good["wHalted"]) == (
        "IBM", 141.5, 307, False
    )
    assert bad["codec"] == 0x4F and bad["wIssueSymbol"] is None and bad["sequence"] is None


def test_fields_no_struct_declares_are_kept_as_typed_json() -> None:
    """An OpenMAMA feed recorded with a Struct of a few fields, or none: every field of
    every message is in ``omnm_fields`` (types, fids, duplicates, order), so nothing is
    lost; other codecs and unreadable omnm payloads leave it null."""
    extra = oz_quote(3)
    extra.fields += [
        Field("wAskPrice", 109, FieldType.F64, math.nan),
        Field("wBidSize", 238, FieldType.U32, 1),  # a duplicate: the first fills the column
        Field(None, 9999, FieldType.OPAQUE, b"\x00\xff"),
        Field("wNested", 5, FieldType.MSG, Message({"inner": 1.25})),
        Field("wSizes", 6, FieldType.VECTOR_U16, [1, 2, 65535]),
    ]
    rows = [
        ("MD.IBM", 1.0, omnm.encode(extra)),
        ("MD.IBM", 1.0, b"\x01\x81\xa1a\x01"),  # msgpack {"a": 1}
        ("MD.IBM", 1.0, b"O\x01\x00\x08"),  # truncated omnm
    ]
    for types in ([OzQuote], []):
        tables, errors = build_tables(rows, columns_for(types))
        assert errors == 1
        good, other, bad = tables["1970-01-01"].to_pylist()
        assert other["omnm_fields"] is None and bad["omnm_fields"] is None
        kept = json.loads(good["omnm_fields"])
        assert kept == omnm.to_json(extra)
        assert omnm.encode(omnm.from_json(kept)) == omnm.encode(extra)  # lossless
        assert [f["name"] for f in kept][-5:] == [
            "wAskPrice", "wBidSize", None, "wNested", "wSizes"
        ]
    assert "wBidSize" not in good  # no Struct this time: only the JSON has it


async def test_recorder_writes_omnm_messages(aoz_node_factory: Any, tmp_path: Path) -> None:
    feed = await aoz_node_factory()
    node = await aoz_node_factory()
    async with Recorder(node, ["MD.>"], tmp_path, types=[OzQuote]) as rec:
        await feed.wait_for_interest("MD.NYSE.IBM", timeout=10)
        for seq in range(1, 4):
            await feed.publish("MD.NYSE.IBM", oz_quote(seq))
        await rec.wait_until(received=3)
    table = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    rows = sorted(table.to_pylist(), key=lambda r: r["sequence"])
    assert [(r["sequence"], r["wBidSize"], r["codec"]) for r in rows] == [
        (1, 301, 79), (2, 302, 79), (3, 303, 79)
    ]
    assert omnm.decode(rows[0]["payload"]) == oz_quote(1)  # the bytes, as OZ sent them
    assert json.loads(rows[0]["omnm_fields"]) == omnm.to_json(oz_quote(1))  # every field
    assert rows[0]["publisher"] is None  # omnm carries no aoz sequence header


async def test_spark_reads_omnm_fields_as_columns(
    spark: Any, aoz_node_factory: Any, tmp_path: Path
) -> None:
    feed = await aoz_node_factory()
    node = await aoz_node_factory()
    async with Recorder(node, ["MD.>"], tmp_path, types=[OzQuote]) as rec:
        await feed.wait_for_interest("MD.NYSE.IBM", timeout=10)
        for seq in range(1, 3):
            await feed.publish("MD.NYSE.IBM", oz_quote(seq))
        await rec.wait_until(received=2)
    df = spark.read.parquet(str(tmp_path))
    got = sorted(
        (r["sequence"], r["wIssueSymbol"], r["wBidPrice"], r["wBidSize"], r["codec"])
        for r in df.select("sequence", "wIssueSymbol", "wBidPrice", "wBidSize", "codec").collect()
    )
    assert got == [(1, "IBM", 141.5, 301, 79), (2, "IBM", 141.5, 302, 79)]
    assert dict(df.dtypes)["wBidSize"] == "bigint"
    # every field, declared or not, from the typed JSON column (as the schema docs show)
    from pyspark.sql import functions as F

    kind = "array<struct<name:string,fid:int,type:string,value:string>>"
    fields = (
        df.where("sequence = 1")
        .select(F.explode(F.from_json("omnm_fields", kind)).alias("f"))
        .select("f.name", "f.fid", "f.type", "f.value")
        .collect()
    )
    def value(text: str, was: Any) -> Any:  # a string's text, other values' JSON text
        return text if isinstance(was, str) else json.loads(text)

    sent = omnm.to_json(oz_quote(1))
    assert [
        (r["name"], r["fid"], r["type"], value(r["value"], f["value"]))
        for r, f in zip(fields, sent, strict=True)
    ] == [(f["name"], f["fid"], f["type"], f["value"]) for f in sent]
