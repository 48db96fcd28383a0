"""The ``aoz`` console script, run for real in subprocesses against a real naming daemon."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import aoz
import aoz.__main__
import aoz.cli
from aoz.pytest_plugin import NodeFactory

from ..ports import free_port
from .conftest import AOZ, STEP, Proc, Spawn, clean_env

Cli = Callable[..., Awaitable[Proc]]


async def test_pub_and_sub_round_trip_with_count_template(aoz_cli: Cli) -> None:
    sub = await aoz_cli("sub", "CLI.>", "--count", "3")
    await sub.wait_stderr("Listening on")
    pub = await aoz_cli("pub", "CLI.test", "tick {{Count}}", "--count", "3")
    rc, _, err = await pub.finish()
    assert rc == 0, err
    assert "Published 3 message(s)" in err

    rc, out, err = await sub.finish()
    assert rc == 0, err
    assert out.split("\n\n")[:3] == [f'[#{n}] Received on "CLI.test"\ntick {n}' for n in (1, 2, 3)]


async def test_sub_json_shows_text_and_base64(aoz_cli: Cli, aoz_node: aoz.Node) -> None:
    sub = await aoz_cli("sub", "BIN.*", "--json", "--count", "2")
    await sub.wait_stderr("Listening on")
    await aoz_node.wait_for_interest("BIN.a", timeout=STEP)
    await aoz_node.publish("BIN.a", "héllo")
    await aoz_node.publish("BIN.b", b"\xff\x00\x01")

    rc, out, err = await sub.finish()
    assert rc == 0, err
    first, second = (json.loads(line) for line in out.splitlines())
    assert (first["subject"], first["codec"], first["data"]) == ("BIN.a", "text", "héllo")
    assert first["reply"] is None and first["encoding"] == "text"
    assert (second["subject"], second["codec"], second["encoding"]) == ("BIN.b", "raw", "base64")
    assert base64.b64decode(second["data"]) == b"\xff\x00\x01"
    # a stable shape: the same keys for every message
    assert (
        list(first)
        == list(second)
        == ["subject", "kind", "codec", "reply", "headers", "received_at", "size", "encoding",
            "data"]
    )


async def test_sub_raw_prints_bodies_only(aoz_cli: Cli, aoz_node: aoz.Node) -> None:
    sub = await aoz_cli("sub", "RAW.x", "--raw", "--count", "2")
    await sub.wait_stderr("Listening on")
    await aoz_node.wait_for_interest("RAW.x", timeout=STEP)
    await aoz_node.publish("RAW.x", "one")
    await aoz_node.publish("RAW.x", {"two": 2}, codec=aoz.Codec.JSON)  # the body as sent

    rc, out, err = await sub.finish()
    assert rc == 0, err
    assert out.splitlines() == ["one", '{"two":2}']


async def test_sub_shows_the_rows_of_a_packed_frame_one_by_one(
    aoz_cli: Cli, aoz_node: aoz.Node
) -> None:
    from aoz._protocol.frames import encode_publish
    from aoz._protocol.packed import pack_rows

    sub = await aoz_cli("sub", "PACK.x", "--json", "--count", "3")
    await sub.wait_stderr("Listening on")
    await aoz_node.wait_for_interest("PACK.x", timeout=STEP)
    rows = [b'{"r":1}', b'{"r":2}', b'{"r":3}']
    await aoz_node.publish_frames([encode_publish(b"PACK.x", pack_rows(2, rows))])

    rc, out, err = await sub.finish()
    assert rc == 0, err
    shown = [json.loads(line) for line in out.splitlines()]
    assert [(m["subject"], m["codec"], m["data"]) for m in shown] == [
        ("PACK.x", "json", {"r": n}) for n in (1, 2, 3)
    ]


async def test_pub_reads_the_body_from_stdin(aoz_cli: Cli, aoz_node: aoz.Node) -> None:
    async with aoz_node.subscribe("STDIN.json") as received:
        pub = await aoz_cli("pub", "STDIN.json", "--codec", "json", stdin=b'{"bid": 1.5}\n')
        rc, _, err = await pub.finish()
        assert rc == 0, err
        assert "no subscriber" not in err
        msg = await received.next(timeout=STEP)
    assert msg.codec is aoz.Codec.JSON
    assert msg.decode() == {"bid": 1.5}


async def test_pub_exits_1_when_messages_are_dropped(aoz_cli: Cli) -> None:
    pub = await aoz_cli("pub", "NOBODY.here", "lost", "--wait", "0.2", "--count", "2")
    rc, out, err = await pub.finish()
    assert rc == 1
    assert out == ""
    assert "2 of 2 message(s) had no subscriber for 'NOBODY.here' (waited 0.2 s) and were " \
        "dropped" in err
    assert "Published" not in err  # nothing reached anyone: one line says so


async def test_req_and_reply_echo(
    aoz_cli: Cli, spawn: Spawn, aoz_nsd: aoz.NamingDaemon, tmp_path: Path
) -> None:
    rep = await aoz_cli("reply", "SVC.echo", "--echo", "--count", "1")
    await rep.wait_stderr("Listening on")
    # the requester takes its settings from a config file instead of the environment
    config = tmp_path / "aoz.toml"
    config.write_text(f'naming = ["{aoz_nsd.endpoint}"]\n')
    req = await spawn(
        [
            str(AOZ),
            "req",
            "SVC.echo",
            "hello there",
            "--config",
            str(config),
            "--timeout",
            str(STEP),
        ]
    )
    rc, out, err = await req.finish()
    if rc != 0:
        await rep.terminate()
        raise AssertionError(f"req: {err}\nreply: {(await rep.finish())[1:]}")
    assert out == "hello there\n"
    assert "Received with rtt" in err

    rc, out, err = await rep.finish()
    assert rc == 0, err
    assert out.startswith('[#1] Received on "SVC.echo" with reply "_INBOX.')
    assert out.splitlines()[1] == "hello there"


async def test_reply_answers_node_requests_with_template(aoz_cli: Cli, aoz_node: aoz.Node) -> None:
    rep = await aoz_cli("reply", "SVC.count", "answer {{Count}}", "--count", "2")
    await rep.wait_stderr("Listening on")
    await aoz_node.wait_for_interest("SVC.count", timeout=STEP)
    answers = [(await aoz_node.request("SVC.count", b"q", timeout=STEP)).decode() for _ in "ab"]
    assert answers == ["answer 1", "answer 2"]
    rc, _, err = await rep.finish()
    assert rc == 0, err


async def test_req_times_out_with_exit_1(aoz_cli: Cli, aoz_node: aoz.Node) -> None:
    async with aoz_node.subscribe("SVC.silent") as requests:  # listens, never answers
        req = await aoz_cli("req", "SVC.silent", "anyone?", "--timeout", "0.3")
        rc, out, err = await req.finish()
        assert (await requests.next(timeout=STEP)).reply is not None
    assert rc == 1
    assert out == ""
    assert "no reply on 'SVC.silent'" in err


async def test_req_without_responders_exits_2(aoz_cli: Cli) -> None:
    req = await aoz_cli("req", "SVC.nobody", "hello", "--wait", "0.2")
    rc, out, err = await req.finish()
    assert rc == 2
    assert out == ""
    assert "no responders on 'SVC.nobody'" in err


async def test_peers_once_lists_the_mesh(aoz_cli: Cli, aoz_node_factory: NodeFactory) -> None:
    node = await aoz_node_factory(program="peer-under-test")
    peers = await aoz_cli("peers", "--once", "--json", "--min", "1", "--wait", "20")
    rc, out, err = await peers.finish(timeout=30)
    assert rc == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    mine = [r for r in rows if r["uuid"] == node.uuid]
    assert len(mine) == 1
    assert mine[0]["program"] == "peer-under-test"
    assert mine[0]["endpoint"] == node.endpoint
    assert {"host", "pid", "last_seen"} <= set(mine[0])


async def test_peers_once_table(aoz_cli: Cli, aoz_node_factory: NodeFactory) -> None:
    node = await aoz_node_factory(program="table-peer")
    peers = await aoz_cli("peers", "--once", "--min", "1", "--wait", "20")
    rc, out, err = await peers.finish(timeout=30)
    assert rc == 0, err
    assert "table-peer" in out
    assert node.uuid in out
    for column in ("program", "host", "pid", "uuid", "endpoint", "last seen"):
        assert column in out


async def test_peers_min_not_reached_exits_1(aoz_cli: Cli) -> None:
    peers = await aoz_cli("peers", "--once", "--min", "1", "--wait", "0.3")
    rc, _, err = await peers.finish()
    assert rc == 1
    assert "expected 1" in err


async def test_static_mode_without_nsd(spawn: Spawn) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    env = clean_env(AOZ_NAMING="tcp://127.0.0.1:1")  # must not be used in static mode
    sub = await spawn(
        [str(AOZ), "sub", "ST.x", "--count", "1", "--static-connect", endpoint], env=env
    )
    await sub.wait_stderr("Listening on")
    pub = await spawn([str(AOZ), "pub", "ST.x", "static hi", "--static-bind", endpoint], env=env)
    rc, _, err = await pub.finish()
    assert rc == 0, err
    assert "no subscriber" not in err
    rc, out, err = await sub.finish()
    assert rc == 0, err
    assert out.splitlines()[:2] == ['[#1] Received on "ST.x"', "static hi"]


@pytest.mark.parametrize(
    "argv", [[str(AOZ)], [sys.executable, "-m", "aoz"]], ids=["script", "python-m"]
)
async def test_nsd_verb_runs_a_daemon(spawn: Spawn, argv: list[str]) -> None:
    nsd = await spawn([*argv, "nsd", "--port", "0"])
    line = await nsd.wait_stderr("aoz nsd ready")
    endpoint = line.split("xpub=")[1].split()[0]
    # start() returns only once the node heard its own announcement through this nsd
    async with aoz.connect(naming=[endpoint], program="nsd-check") as node:
        assert not node.closed
    nsd.proc.send_signal(signal.SIGTERM)
    rc, _, err = await nsd.finish()
    assert rc == 0, err


async def test_record_writes_parquet_until_sigterm(
    aoz_cli: Cli, aoz_node: aoz.Node, tmp_path: Path
) -> None:
    ds = pytest.importorskip("pyarrow.dataset")
    out_dir = tmp_path / "rec"
    rec = await aoz_cli(
        "record", "REC.>", "--dir", str(out_dir), "--flush-interval", "0.05", "--no-progress"
    )
    await rec.wait_stderr("Recording 'REC.>'")
    await aoz_node.wait_for_interest("REC.a", timeout=STEP)
    for i in range(5):
        await aoz_node.publish("REC.a", {"i": i})

    def rows_on_disk() -> int:
        if not out_dir.exists():
            return 0
        return int(ds.dataset(str(out_dir), format="parquet", partitioning="hive").count_rows())

    # the recorder writes every flush interval: poll the directory (bounded)
    for _ in range(400):  # bounded: 20 s at most
        if rows_on_disk() >= 5:
            break
        await asyncio.sleep(0.05)
    rec.proc.send_signal(signal.SIGTERM)
    rc, out, err = await rec.finish()
    assert rc == 0, err
    stats = json.loads(out)
    assert stats["received"] == 5 and stats["written"] == 5 and stats["dropped"] == 0
    assert rows_on_disk() == 5


async def test_console_script_help_and_bad_usage(spawn: Spawn) -> None:
    helped = await spawn([str(AOZ), "--help"])
    rc, out, _ = await helped.finish()
    assert rc == 0
    for verb in ("pub", "sub", "req", "reply", "peers", "nsd", "record", "bench", "broker"):
        assert verb in out
    bad = await spawn([str(AOZ), "pub"])
    rc, out, err = await bad.finish()
    assert rc == 2
    assert "SUBJECT" in err.upper()


@pytest.mark.parametrize("verb", ["pub", "sub", "req", "reply", "peers"])
def test_each_verb_has_help_with_examples(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert aoz.cli.main([verb, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Examples" in out
    assert f"aoz {verb} " in out
    assert "--naming" in out and "--static-bind" in out and "--config" in out


def test_without_typer_only_nsd_works(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "typer", None)  # import typer -> ImportError
    assert aoz.cli.main(["sub", "X"]) == 2
    assert "pip install 'aoz[cli]'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # argparse's --help of the daemon
        aoz.__main__.main(["nsd", "--help"])
    assert exited.value.code == 0
    assert "naming daemon" in capsys.readouterr().out


def test_python_m_aoz_demo_dispatches_to_the_example_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    class FakeDemo:
        @staticmethod
        def main(argv: list[str]) -> int:
            calls.append(argv)
            return 7

    monkeypatch.setitem(sys.modules, "examples.marketdata.demo", FakeDemo)
    assert aoz.__main__.main(["demo", "--quick"]) == 7
    assert calls == [["--quick"]]


async def test_one_pub_reaches_every_one_of_four_subscribers(aoz_cli: Cli) -> None:
    """`aoz pub --count 1000` with four `aoz sub` processes: each gets all 1000 (the
    publisher waits for every known subscriber's filters, blocks at full queues and
    flushes on exit)."""
    subs = []
    for _ in range(4):
        sub = await aoz_cli("sub", "FOUR.x", "--count", "1000", "--raw")
        await sub.wait_stderr("Listening on")
        subs.append(sub)
    pub = await aoz_cli("pub", "FOUR.x", "m{{Count}}", "--count", "1000", "-q")
    rc, _, err = await pub.finish()
    assert rc == 0, err
    for sub in subs:
        rc, out, err = await sub.finish()
        assert rc == 0, err
        assert out.split() == [f"m{n}" for n in range(1, 1001)]
