"""The recorder's writer builds its tables from raw frames joined into one buffer
(aoz.record.bulk): the tables equal those of ``build_tables`` over the same messages'
``(subject, received_at, payload)`` rows, for frames the bulk path cuts with numpy and
for every batch it leaves to the row-by-row path; and a recorder on real sockets writes
what it received through it, requests and mixed codecs included."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

import pyarrow.dataset as ds  # noqa: E402

from aoz import omnm  # noqa: E402
from aoz._protocol.builder import FrameBuilder  # noqa: E402
from aoz._protocol.codecs import Codec  # noqa: E402
from aoz._protocol.frames import decode_frame, encode_request, make_handle  # noqa: E402
from aoz._protocol.headers import add_headers  # noqa: E402
from aoz._protocol.packed import pack_rows  # noqa: E402
from aoz.errors import RequestTimeout  # noqa: E402
from aoz.record import Recorder, bulk, schema  # noqa: E402

T0 = 1_764_000_000.0


class Tick(msgspec.Struct):
    symbol: str
    price: float


COLS = schema.columns_for([Tick])
SUBJECTS = ["T.A", "MD.XNYS.IBM", "T.é.ü", "X" * 200]  # lengths 3..200, UTF-8 too


def feed(n: int, publishers: tuple[int, ...] = (7, 2**64 - 1)) -> list[bytes]:
    builders = [FrameBuilder(Codec.MSGPACK, publisher=p) for p in publishers]
    return [
        builders[i % len(builders)].publish(
            SUBJECTS[i % len(SUBJECTS)],
            {"sender": "s", "seq": i, "ts": T0 + i, "symbol": f"S{i % 3}", "price": i / 4,
             "pad": "x" * (i % 7), "z": 0},
        )
        for i in range(n)
    ]  # fmt: skip


def expected(frames: list[bytes], times: list[float]) -> tuple[dict[str, Any], int]:
    """``build_tables`` over the rows a Message gives (subject, received_at, payload)."""
    rows = []
    for f, t in zip(frames, times, strict=True):
        head = decode_frame(f)
        rows.append((head.subject.decode(), t, f[head.payload_start :]))
    return schema.build_tables(rows, COLS)


def assert_same(frames: list[bytes], times: list[float], *, bulk_path: bool) -> int:
    batch = bulk.pack(frames, times)
    assert (bulk._bulk(batch, COLS) is not None) is bulk_path
    got, errors = bulk.tables_from_frames(batch, COLS)
    want, want_errors = expected(frames, times)
    assert errors == want_errors and list(got) == list(want)
    for day in got:
        assert got[day].equals(want[day]), day
    return errors


def test_an_aoz_feed_is_cut_in_bulk_into_the_row_by_row_table() -> None:
    frames = feed(600)
    times = [T0 + i / 7 for i in range(len(frames))]
    assert assert_same(frames, times, bulk_path=True) == 0
    (table,) = bulk.tables_from_frames(bulk.pack(frames, times), COLS)[0].values()
    assert table.column("subject").to_pylist()[:4] == SUBJECTS
    assert set(table.column("publisher").to_pylist()) == {"0000000000000007", "f" * 16}
    assert table.column("payload").to_pylist()[0][:1] == b"\x01"  # no sequence header
    assert table.column("symbol").to_pylist()[:3] == ["S0", "S1", "S2"]
    assert table.column("sequence").to_pylist() == list(range(600))


def test_a_batch_across_midnight_is_split_by_receive_date() -> None:
    frames = feed(10)
    midnight = 20_000 * 86_400.0
    times = [midnight - 0.5 + i / 10 for i in range(10)]
    times[3] = math.nextafter(midnight, 0)  # a hair before midnight stays on its day
    got, _ = bulk.tables_from_frames(bulk.pack(frames, times), COLS)
    assert sorted(got) == ["2024-10-03", "2024-10-04"]
    assert got["2024-10-03"].num_rows == 5
    assert_same(frames, times, bulk_path=True)


def test_every_other_batch_takes_the_row_by_row_path() -> None:
    good = feed(20)
    times = [T0] * 21
    b = FrameBuilder(Codec.MSGPACK, publisher=9)
    json_b = FrameBuilder(Codec.JSON, publisher=9)
    handle = make_handle("3669840e-d043-11ea-adc2-fcaa146e6b01", 10)
    request = encode_request(b"T.A", handle, b"\x01" + msgspec.msgpack.encode({"seq": 1}))
    frame = b.publish("T.A", {"seq": 1})
    nul = frame.index(b"\0")
    odd = {
        "a request": request,
        "headers": frame[: nul + 3] + add_headers(frame[nul + 3 :], {"k": "v"}, 12),
        "unsequenced": b"T.A\x00\x01\x00\x01" + msgspec.msgpack.encode({"seq": 1}),
        "json": json_b.publish("T.A", {"seq": 1}),
        "omnm": b"T.A\x00\x01\x00" + omnm.encode({"seq": 1}),
        "a packed row": b"T.A\x00\x01\x00" + pack_rows(Codec.MSGPACK, [b"\x80", b"\x80"]),
        "an empty payload": b"T.A\x00\x01\x00",
    }
    for what, extra in odd.items():
        assert assert_same([*good[:10], extra, *good[10:]], times, bulk_path=False) == 0, what
    bad_body = frame[: nul + 3 + 13] + b"\xc1"  # sequenced msgpack that does not parse
    assert assert_same([*good, bad_body], times, bulk_path=False) == 1


def test_a_truncated_body_cannot_borrow_the_next_ones_bytes() -> None:
    """Joined, a map that lacks its pair and a body with one value too many read as two
    values; alone, each is malformed: both are counted, in bulk and row by row."""
    good = feed(20)
    b = FrameBuilder(Codec.MSGPACK, publisher=9)
    heads = [f[: f.index(b"\0") + 3 + 13] for f in (b.publish("T.A", 0), b.publish("T.A", 0))]
    short = heads[0] + b"\x82\xa3seq\x01"  # a map of two pairs that has one
    extra = heads[1] + b"\xa6symbol\xa1Z\x80"  # the other pair, then an empty map
    frames = [*good[:5], short, extra, *good[5:]]
    assert assert_same(frames, [T0] * len(frames), bulk_path=False) == 2
    (table,) = bulk.tables_from_frames(bulk.pack(frames, [T0] * len(frames)), COLS)[0].values()
    assert table.column("sequence").to_pylist()[5:7] == [None, None]
    assert table.column("symbol").to_pylist()[5:7] == [None, None]


def test_pack_refuses_times_that_do_not_match_the_frames() -> None:
    with pytest.raises(ValueError, match="2 frames but 1 receive times"):
        bulk.pack([b"a", b"b"], [1.0])
    assert bulk.tables_from_frames(bulk.pack([], []), COLS) == ({}, 0)


def spools(directory: Path, recorder_id: str) -> list[Path]:
    shm = Path("/dev/shm").glob(f".aoz-frames-{recorder_id}-*")
    return [*directory.rglob(".aoz-frames-*"), *shm]


@pytest.mark.parametrize("writer", ["thread", "process"])
async def test_the_recorder_writes_raw_frames_of_every_kind(
    aoz_node_factory: Any, tmp_path: Any, writer: str
) -> None:
    """Through real sockets: an aoz feed (the bulk path) and, in other flushes, JSON,
    raw bytes and a request on a recorded subject (the row-by-row path); every message
    received is written once, with its subject, payload and receive time; the process
    writer's hand-over files are removed."""
    feed_node = await aoz_node_factory()
    node = await aoz_node_factory()
    n = 3000
    async with Recorder(node, ["R.>"], tmp_path, types=[Tick], flush_rows=500,
                        flush_interval=30, writer=writer) as rec:  # type: ignore[arg-type]  # fmt: skip
        await feed_node.wait_for_interest("R.feed", timeout=10)
        t0 = time.time()
        for i in range(n):
            await feed_node.publish("R.feed", {"seq": i, "symbol": "S", "price": 1.5})
        await feed_node.publish("R.json", {"seq": -1}, codec=Codec.JSON)
        await feed_node.publish("R.raw", b"\x00\xffraw")
        with pytest.raises(RequestTimeout):  # nobody answers; the request is recorded
            await feed_node.request("R.svc", {"seq": -2}, timeout=0.2)
        stats = await rec.wait_until(received=n + 3, timeout=20)
    final = rec.statistics()
    # the process writer's spool files (frames handed to the worker) are gone
    assert not spools(tmp_path, rec._id)
    assert stats.dropped == stats.lost == 0
    assert final.received == final.written == n + 3 and final.pending == 0
    table = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert table.num_rows == n + 3
    by_subject = table.group_by("subject").aggregate([("subject", "count")]).to_pydict()
    assert dict(zip(by_subject["subject"], by_subject["subject_count"], strict=True)) == {
        "R.feed": n, "R.json": 1, "R.raw": 1, "R.svc": 1,
    }  # fmt: skip
    feed_rows = table.filter(pa.compute.equal(table.column("subject"), "R.feed"))
    assert sorted(feed_rows.column("sequence").to_pylist()) == list(range(n))
    assert sorted(feed_rows.column("publisher_seq").to_pylist()) == list(range(1, n + 1))
    assert set(feed_rows.column("price").to_pylist()) == {1.5}
    received = [t.timestamp() for t in table.column("receive_ts").to_pylist()]
    assert min(received) >= t0 - 1 and max(received) <= time.time() + 1
    one = {r["subject"]: r for r in table.filter(
        pa.compute.invert(pa.compute.equal(table.column("subject"), "R.feed"))).to_pylist()}
    assert one["R.json"]["codec"] == 2 and one["R.json"]["sequence"] == -1
    assert one["R.raw"]["payload"].endswith(b"\x00\xffraw")
    assert one["R.svc"]["sequence"] == -2
