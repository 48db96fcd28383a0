"""The natscli-level behaviours of the installed ``aoz`` script (issue 14): user errors
without tracebacks, pub templates/--sleep/--count 0/progress, byte-exact --dump,
queue groups across processes, req --replies, bench, broker, --connect-timeout."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import aoz
from aoz import queues
from aoz.pytest_plugin import NodeFactory

from .conftest import AOZ, REPO, STEP, Proc, Spawn, clean_env

Cli = Callable[..., Awaitable[Proc]]

pytestmark = pytest.mark.timeout(120)


def no_traceback(err: str) -> None:
    assert "Traceback" not in err, err


# ---------------------------------------------------------------- global options
async def test_version_and_log_level_anywhere(spawn: Spawn) -> None:
    version = await spawn([str(AOZ), "--version"])
    rc, out, err = await version.finish()
    assert rc == 0, err
    assert out.strip() == (f"aoz {aoz.__version__} (hot path: {aoz.hot_path()}, "
                           f"omnm codec: {aoz.omnm.implementation()})")
    for argv in (["--log-level", "loud", "sub", "X"], ["sub", "X", "--log-level=loud"]):
        bad = await spawn([str(AOZ), *argv])
        rc, out, err = await bad.finish()
        assert rc == 2 and out == ""
        assert "--log-level 'loud' is not a level" in err
        no_traceback(err)


async def test_log_level_after_the_verb_shows_peer_joins(
    aoz_cli: Cli, aoz_node_factory: NodeFactory
) -> None:
    await aoz_node_factory(program="joiner")
    peers = await aoz_cli("peers", "--once", "--min", "1", "--wait", "20", "--log-level", "info")
    rc, _, err = await peers.finish(timeout=30)
    assert rc == 0, err
    assert "peer joined" in err and " INFO " in err


async def test_user_errors_are_messages_not_tracebacks(aoz_cli: Cli, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cases = [
        (["record", "R.>", "--dir", str(blocker / "sub")], "cannot write there"),
        (["pub", "MD.*", "x"], "is a pattern"),
        (["pub", "MD..X", "x"], "has an empty token"),
        (["pub", "MD.X", "{{Nope}}"], "unknown template function"),
        (["sub", "X", "--config", str(tmp_path / "missing.toml")], "no such file"),
        (["sub", "X.>", "--queue", "w"], "exact subjects"),
        (["sub", "X", "--dump", str(blocker / "d")], "cannot create the directory"),
    ]
    for argv, message in cases:
        proc = await aoz_cli(*argv)
        rc, _, err = await proc.finish()
        assert rc == 2, (argv, err)
        assert message in err, (argv, err)
        no_traceback(err)


async def test_connect_timeout_says_once_that_it_waits(spawn: Spawn) -> None:
    env = clean_env(AOZ_NAMING="tcp://127.0.0.1:1")  # nobody there
    sub = await spawn([str(AOZ), "sub", "X", "--connect-timeout", "1.5"], env=env)
    rc, _, err = await sub.finish()
    assert rc == 1
    assert err.count("waiting for a naming daemon at tcp://127.0.0.1:1") == 1
    assert "no naming daemon answered" in err
    no_traceback(err)


# ---------------------------------------------------------------- pub
async def test_pub_templates_and_sleep(aoz_cli: Cli, aoz_node: aoz.Node) -> None:
    async with aoz_node.subscribe("TPL.x") as received:
        pub = await aoz_cli(
            "pub", "TPL.x", "{{Count}}|{{Unix}}|{{ID}}|{{Random 3 5}}|{{TimeStamp}}",
            "--count", "3", "--sleep", "10ms",
        )  # fmt: skip
        rc, _, err = await pub.finish()
        assert rc == 0, err
        bodies = [(await received.next(timeout=STEP)).decode() for _ in range(3)]
    rows = [b.split("|") for b in bodies]
    assert [r[0] for r in rows] == ["1", "2", "3"]
    assert all(r[1].isdigit() for r in rows)
    assert len({r[2] for r in rows}) == 3  # a unique id per message
    assert all(3 <= len(r[3]) <= 5 and r[3].isalnum() for r in rows)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", r[4]) for r in rows)


async def test_pub_count_0_means_natscli_32767_with_a_progress_bar(
    aoz_cli: Cli, aoz_node: aoz.Node
) -> None:
    async with aoz_node.subscribe("MANY.x", queue_size=40_000) as received:
        pub = await aoz_cli("pub", "MANY.x", "{{Count}}", "--count", "0")
        rc, _, err = await pub.finish(timeout=60)
        assert rc == 0, err
        assert "Publishing to MANY.x" in err  # the progress bar (stderr)
        assert "Published 32767 message(s)" in err
        last = None
        for _ in range(32_767):
            last = await received.next(timeout=STEP)
        assert last is not None and last.decode() == "32767"
        assert received.statistics().dropped == 0


# ---------------------------------------------------------------- sub
async def test_sub_dump_raw_is_byte_exact(aoz_cli: Cli, aoz_node: aoz.Node, tmp_path: Path) -> None:
    payloads = [b"\x00\xff\n\r\n", b"", b"line\n", bytes(range(256))]
    dump = tmp_path / "dump"
    sub = await aoz_cli("sub", "BYTES.x", "--dump", str(dump), "--raw", "--count", "4")
    await sub.wait_stderr("Listening on")
    await aoz_node.wait_for_interest("BYTES.x", timeout=STEP)
    for p in payloads:
        await aoz_node.publish("BYTES.x", p)
    rc, out, err = await sub.finish()
    assert rc == 0, err
    assert out == ""
    assert [(dump / f"{n}.raw").read_bytes() for n in (1, 2, 3, 4)] == payloads


async def test_sub_last_prints_each_subjects_cached_value_then_live(
    aoz_cli: Cli, aoz_node_factory: NodeFactory
) -> None:
    node = await aoz_node_factory(publish_cache=1)
    for subject in ("HIST.a", "HIST.b"):
        await node.publish(subject, f"{subject} old".encode())
        await node.publish(subject, f"{subject} last".encode())
    sub = await aoz_cli("sub", "HIST.>", "--last", "1", "--raw", "--count", "3")
    await sub.wait_stderr("Listening on")
    assert sub.proc.stdout is not None
    history = [await asyncio.wait_for(sub.proc.stdout.readline(), STEP) for _ in range(2)]
    assert history == [b"HIST.a last\n", b"HIST.b last\n"]
    await node.wait_for_interest("HIST.a", timeout=STEP)
    await node.publish("HIST.a", b"HIST.a live")
    rc, out, err = await sub.finish()
    assert rc == 0, err
    assert out.splitlines() == ["HIST.a live"]


async def test_sub_dump_json(aoz_cli: Cli, aoz_node: aoz.Node, tmp_path: Path) -> None:
    sub = await aoz_cli("sub", "DJ.*", "--dump", str(tmp_path), "--count", "1")
    await sub.wait_stderr("Listening on")
    await aoz_node.wait_for_interest("DJ.a", timeout=STEP)
    await aoz_node.publish("DJ.a", {"bid": 1.5})
    rc, _, err = await sub.finish()
    assert rc == 0, err
    doc = json.loads((tmp_path / "1.json").read_text())
    assert (doc["subject"], doc["codec"], doc["encoding"], doc["data"]) == (
        "DJ.a",
        "msgpack",
        "json",
        {"bid": 1.5},
    )


async def test_sub_queue_group_splits_publications(aoz_cli: Cli, aoz_node: aoz.Node) -> None:
    subs = []
    for _ in range(2):
        # one sender rotates strictly over the two members: 10 messages each
        p = await aoz_cli("sub", "QP.x", "--queue", "readers", "--raw", "--count", "10")
        await p.wait_stderr("in queue group 'readers'")
        subs.append(p)
    await queues.wait_for_members(aoz_node, "QP.x", "readers", 2, timeout=STEP)
    pub = await aoz_cli("pub", "QP.x", "{{Count}}", "--count", "20", "--quiet")
    rc, _, err = await pub.finish()
    assert rc == 0, err
    lines: list[str] = []
    for p in subs:
        rc, out, err = await p.finish()
        assert rc == 0, err
        assert len(out.split()) == 10
        lines += out.split()
    assert sorted(lines, key=int) == [str(n) for n in range(1, 21)]  # each exactly once


# ---------------------------------------------------------------- req / reply
async def test_three_reply_processes_in_a_queue_group_answer_300_requests_once_each(
    aoz_cli: Cli, aoz_node: aoz.Node
) -> None:
    members = []
    for _ in range(3):
        p = await aoz_cli("reply", "QR.work", "--echo", "--queue", "workers")
        await p.wait_stderr("in queue group 'workers'")
        members.append(p)
    await queues.wait_for_members(aoz_node, "QR.work", "workers", 3, timeout=STEP)
    answers = []
    for i in range(300):
        reply = await queues.request(aoz_node, "QR.work", f"job-{i}", timeout=STEP)
        answers.append(reply.decode())
    assert answers == [f"job-{i}" for i in range(300)]
    seen: Counter[str] = Counter()
    per_member = []
    for p in members:
        p.proc.send_signal(signal.SIGTERM)
        _, out, _ = await p.finish()
        jobs = re.findall(r"^job-\d+$", out, flags=re.M)
        per_member.append(len(jobs))
        seen.update(jobs)
    assert seen == Counter(f"job-{i}" for i in range(300))  # each answered exactly once
    assert per_member == [100, 100, 100]  # one requester: strict round robin


async def test_req_replies_0_and_2_reach_a_queue_group(aoz_cli: Cli, aoz_node: aoz.Node) -> None:
    """Issue #25 item 2: `aoz req --replies 0` (or 2) against `aoz reply --queue` members
    said "no responders" (exit 2). One member of the group answers each request."""
    members = []
    for _ in range(2):
        p = await aoz_cli("reply", "QRN.svc", "--echo", "--queue", "g")
        await p.wait_stderr("in queue group 'g'")
        members.append(p)
    await queues.wait_for_members(aoz_node, "QRN.svc", "g", 2, timeout=STEP)
    for replies in ("0", "2"):
        req = await aoz_cli("req", "QRN.svc", "ask", "--replies", replies, "--timeout", "1")
        rc, out, err = await req.finish()
        assert rc == 0, err
        assert out.split() == ["ask"] and "1 replies" in err, (out, err)
    for p in members:
        p.proc.send_signal(signal.SIGTERM)
        await p.finish()


async def test_req_replies_n_and_0(aoz_cli: Cli) -> None:
    responders = []
    for name in ("one", "two"):
        p = await aoz_cli("reply", "MANY.svc", f"from {name}")
        await p.wait_stderr("Listening on")
        responders.append(p)
    req = await aoz_cli("req", "MANY.svc", "q", "--replies", "2", "--timeout", str(STEP))
    rc, out, err = await req.finish()
    assert rc == 0, err
    assert sorted(out.splitlines()) == ["from one", "from two"]
    req = await aoz_cli("req", "MANY.svc", "q", "--replies", "0", "--timeout", "1")
    rc, out, err = await req.finish()
    assert rc == 0, err
    assert sorted(out.splitlines()) == ["from one", "from two"]
    assert "2 replies" in err
    for p in responders:
        await p.terminate()


# ---------------------------------------------------------------- bench, broker
async def test_bench_measures_the_mesh_pubsub_and_request(aoz_cli: Cli) -> None:
    bench = await aoz_cli("bench", "BENCH.t", "--pub", "1", "--sub", "2", "--msgs", "2000",
                          "--size", "64", "--json")  # fmt: skip
    rc, out, err = await bench.finish(timeout=60)
    assert rc == 0, err
    r = json.loads(out)
    assert (r["mode"], r["messages"], r["received"], r["lost"]) == ("pubsub", 2000, [2000, 2000], 0)
    assert r["pub_msgs_per_s"] > 0 and all(x > 0 for x in r["sub_msgs_per_s"])
    lat = r["latency_us"]
    assert 0 <= lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]

    bench = await aoz_cli("bench", "BENCH.r", "--request", "--sub", "2", "--msgs", "200", "--json")
    rc, out, err = await bench.finish(timeout=60)
    assert rc == 0, err
    r = json.loads(out)
    assert r["mode"] == "request" and r["lost"] == 0 and sum(r["received"]) == 200
    assert r["received"] == [100, 100]  # the responders form a queue group

    table = await aoz_cli("bench", "BENCH.v", "--msgs", "500", "--no-progress")
    rc, out, err = await table.finish(timeout=60)
    assert rc == 0, err
    assert "msgs/s" in out and "p99" in out
    assert re.search(r"Pub stats: [\d,]+ msgs/sec ~ [\d.,]+ MB/sec", out), out
    assert re.search(r"Sub stats: [\d,]+ msgs/sec", out), out


async def test_broker_verb_forwards_between_nodes(spawn: Spawn) -> None:
    broker = await spawn([str(AOZ), "broker", "--pub-port", "0", "--sub-port", "0"])
    line = await broker.wait_stderr("aoz broker ready")
    pub_ep = line.split("pub=")[1].split()[0]
    sub_ep = line.split("sub=")[1].split()[0]
    settings = {"broker_pub": pub_ep, "broker_sub": sub_ep}
    async with (
        aoz.connect(**settings) as a,
        aoz.connect(**settings) as b,
        b.subscribe("BRK.x") as sub,
    ):
        await a.wait_for_interest("BRK.x", timeout=STEP)
        await a.publish("BRK.x", b"via broker")
        assert (await sub.next(timeout=STEP)).data == b"via broker"
    broker.proc.send_signal(signal.SIGTERM)
    rc, _, err = await broker.finish()
    assert rc == 0, err


async def test_nsd_logs_joins_and_leaves_at_info(spawn: Spawn) -> None:
    nsd = await spawn([str(AOZ), "nsd", "--port", "0"])
    line = await nsd.wait_stderr("aoz nsd ready")
    endpoint = line.split("xpub=")[1].split()[0]
    async with aoz.connect(naming=[endpoint], program="joiner") as node:
        joined = await nsd.wait_stderr("node joined")
        assert "joiner@" in joined and node.uuid in joined and " INFO " in joined
    left = await nsd.wait_stderr("node left")
    assert node.uuid in left
    nsd.proc.send_signal(signal.SIGTERM)
    rc, _, err = await nsd.finish()
    assert rc == 0, err


async def test_keygen_then_a_secured_nsd(spawn: Spawn, tmp_path: Path) -> None:
    keygen = await spawn([str(AOZ), "keygen", str(tmp_path / "mesh")])
    rc, out, err = await keygen.finish()
    assert rc == 0, err
    public = out.strip()
    assert len(public) == 40 and public in (tmp_path / "mesh.pub").read_text()
    nsd = await spawn([str(AOZ), "nsd", "--port", "0",
                       "--curve-secret-file", str(tmp_path / "mesh.key"),
                       f"--curve-allow={public}"])  # fmt: skip (KEY=: it may start with -)
    line = await nsd.wait_stderr("aoz nsd ready")
    assert "curve=on" in line
    nsd.proc.send_signal(signal.SIGTERM)
    rc, _, err = await nsd.finish()
    assert rc == 0, err
    bad = await spawn([str(AOZ), "nsd", "--curve-allow", "x"])
    rc, _, err = await bad.finish()
    assert rc == 2 and "needs --curve-secret-file" in err
    no_traceback(err)


def test_key_lists_keep_keys_that_contain_a_hash(tmp_path: Path) -> None:
    from aoz.security import keypair, read_keys

    keys = [keypair()[0] for _ in range(200)]  # '#' is one of Z85's 85 characters
    with_hash = next(k for k in keys if "#" in k[1:])
    key = next(k for k in keys if "#" not in k)
    listing = tmp_path / "allow.txt"
    listing.write_text(f"# nodes\n{with_hash}\n{key}  # the second node\n\n")
    assert read_keys(listing) == [with_hash, key]


def test_demo_is_listed_only_in_a_clone(tmp_path: Path) -> None:
    """Issue #25 item 7: `aoz demo` was listed everywhere but runs only from a clone."""
    import subprocess

    def help_in(cwd: Path) -> str:
        return subprocess.run([sys.executable, "-m", "aoz", "--help"], cwd=cwd,
                              capture_output=True, text=True, timeout=60).stdout

    assert " demo " in help_in(REPO)
    assert " demo " not in help_in(tmp_path)
    gone = subprocess.run([sys.executable, "-m", "aoz", "demo"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert gone.returncode == 2 and "git clone" in gone.stderr


async def test_pub_header_option_and_sub_shows_headers(aoz_cli: Cli, aoz_node: aoz.Node) -> None:
    """Issue #25 item 5: `aoz pub -H` was "No such option"; `aoz sub` shows headers as
    natscli does, and --json carries them."""
    sub = await aoz_cli("sub", "HDR.x", "--count", "1")
    await sub.wait_stderr("Listening on")
    js = await aoz_cli("sub", "HDR.x", "--count", "1", "--json")
    await js.wait_stderr("Listening on")
    async with aoz_node.subscribe("HDR.x") as received:
        pub = await aoz_cli("pub", "HDR.x", "hello", "-H", "trace:abc", "-H", "k: v")
        rc, _, err = await pub.finish()
        assert rc == 0, err
        msg = await received.next(timeout=STEP)
    assert msg.headers == {"trace": "abc", "k": "v"} and msg.data == b"hello"
    rc, out, err = await sub.finish()
    assert rc == 0, err
    assert "trace: abc\nk: v\nhello" in out, out
    rc, out, err = await js.finish()
    assert rc == 0, err
    assert json.loads(out)["headers"] == {"trace": "abc", "k": "v"}
    bad = await aoz_cli("pub", "HDR.x", "x", "-H", "novalue")
    rc, _, err = await bad.finish()
    assert rc == 2 and "KEY:VALUE" in err
