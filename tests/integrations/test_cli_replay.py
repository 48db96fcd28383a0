"""``aoz replay`` through the installed console script: a recorded time range of chosen
subjects goes back onto the mesh with its subjects and payload bytes."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

import aoz

from .conftest import STEP, Proc

pytest.importorskip("pyarrow")

from tests.pipeline.recordings import payload, write_run

Cli = Callable[..., Awaitable[Proc]]
T0 = 1_764_000_000.0


def recording(directory: Path) -> None:
    """Two recorder runs, 10 ms apart per row from T0: run 1 on T.0 and T.1 (alternating),
    run 2 on T.2; each payload says its row number."""
    one = [(f"T.{i % 2}", T0 + i / 100, payload(i)) for i in range(400)]
    two = [("T.2", T0 + i / 100 + 0.005, payload(1000 + i, 7)) for i in range(400)]
    write_run(directory, "cccc0001", one, per_file=64, stamp=int(T0 * 1e6))
    write_run(directory, "cccc0002", two, per_file=64, stamp=int(T0 * 1e6) + 1)


async def collect(sub: aoz.Subscription, count: int) -> list[aoz.Message]:
    got = []
    with anyio.fail_after(STEP):
        async for msg in sub:
            got.append(msg)
            if len(got) == count:
                break
    return got


async def test_replay_publishes_a_time_range_of_chosen_subjects_in_order(
    aoz_cli: Cli, aoz_node: aoz.Node, tmp_path: Path
) -> None:
    recording(tmp_path)
    start = dt.datetime.fromtimestamp(T0 + 1.0, dt.UTC).isoformat()
    async with aoz_node.subscribe("T.>") as sub:
        replay = await aoz_cli(
            "replay", "T.0", "T.2", "--dir", str(tmp_path), "--from", start,
            "--to", str(T0 + 2.0), "--speed", "max", "--wait", str(STEP),
        )  # fmt: skip
        got = await collect(sub, 150)
        rc, out, err = await replay.finish()
    assert rc == 0, err
    # T.0: even rows 100..198; T.2: rows 100..199 of run 2 (5 ms later each)
    expect = sorted(
        [(T0 + i / 100, "T.0", i) for i in range(100, 200, 2)]
        + [(T0 + i / 100 + 0.005, "T.2", 1000 + i) for i in range(100, 200)]
    )
    assert [(m.subject, m.decode()["sequence"]) for m in got] == [(s, n) for _, s, n in expect]
    stats = json.loads(out)
    assert (stats["published"], stats["skipped"], stats["subjects"]) == (150, 50, 2)
    assert sub.get_nowait() is None  # nothing outside the range or the subjects


async def test_replay_keeps_the_original_pace_and_payload_bytes(
    aoz_cli: Cli, aoz_node: aoz.Node, tmp_path: Path
) -> None:
    recording(tmp_path)
    async with aoz_node.subscribe("T.1") as sub:
        replay = await aoz_cli(
            "replay", "T.1", "--dir", str(tmp_path), "--from", str(T0 + 1.0),
            "--to", str(T0 + 1.4), "--wait", str(STEP),
        )  # fmt: skip
        got = await collect(sub, 20)
        rc, out, err = await replay.finish()
    assert rc == 0, err
    assert [m.decode()["sequence"] for m in got] == list(range(101, 141, 2))
    # the recorded payload minus its 13-byte sequence header: codec byte + body
    assert [m.payload for m in got] == [b"\x01" + payload(i)[13:] for i in range(101, 141, 2)]
    assert all(m.publisher is None for m in got)  # unsequenced: not the publisher's numbers
    stats = json.loads(out)
    # row 101 to row 139 were received 0.38 s apart: sent at least that far apart
    assert stats["elapsed"] >= 0.38 and stats["last"] - stats["first"] == pytest.approx(0.38)


async def test_replay_refuses_bad_times_and_speeds_before_connecting(
    aoz_cli: Cli, tmp_path: Path
) -> None:
    for args, message in (
        (["--from", "yesterday"], "--from"),
        (["--speed", "0"], "--speed"),
        (["--speed", "fast"], "--speed"),
    ):
        proc = await aoz_cli("replay", "T.>", "--dir", str(tmp_path), *args)
        rc, _, err = await proc.finish()
        assert rc != 0 and message in err, err
