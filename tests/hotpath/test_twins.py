"""The compiled hot path (aoz/_mesh/_speedups.pyx) and its pure-Python twin in aoz/_mesh/_hotpath.py
behave the same: the same frames leave the same messages, counters and calls behind,
and the same publish calls put the same bytes on the wire.

These tests compare the two directly, whichever of them the node uses in this run;
`make test` also runs the suite once on each (``AOZ_PURE_PYTHON=1`` for the second)."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from typing import Any

import msgspec
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aoz._mesh import _hotpath, hotpath
from aoz._mesh._hotpath import Sender as _SenderPy
from aoz._mesh._hotpath import drain_sub as _drain_sub_py
from aoz._mesh.receive import Receiver
from aoz._mesh.routing import RoutingTable
from aoz._mesh.subscription import Subscription
from aoz._protocol.builder import FrameBuilder
from aoz._protocol.codecs import Codec, Verbatim
from aoz._protocol.frames import encode_publish, encode_reply, make_handle
from aoz._protocol.headers import encode_block
from aoz._protocol.sequence import encode_header
from aoz._protocol.subjects import compile_pattern
from aoz.config import Overflow
from aoz.errors import EncodeError, SubjectError, WouldBlock

try:
    from aoz._mesh import _speedups
except ImportError:  # pragma: no cover - the build could not compile it
    _speedups = None  # type: ignore[assignment]

compiled = pytest.mark.skipif(_speedups is None, reason="aoz._mesh._speedups is not built")

NODE = str(uuid.uuid4())
HANDLE = make_handle(NODE, 7)


def test_the_compiled_hot_path_is_built_where_it_can_be() -> None:
    """Where a C compiler and Cython are present (CI, the README's set-up), the build
    must have produced the extension: a silent fallback would hide a broken build."""
    if os.environ.get("AOZ_NO_EXTENSIONS", "") not in ("", "0"):
        pytest.skip("AOZ_NO_EXTENSIONS is set: the build was told not to compile")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on this machine: the pure-Python path is expected")
    pytest.importorskip("Cython", reason="Cython is not installed")
    assert _speedups is not None, "aoz._mesh._speedups was not built; run `pip install -e .`"
    assert _speedups.ABI == _hotpath.ABI and _speedups.CONSTANTS == _hotpath.CONSTANTS
    pure = os.environ.get("AOZ_PURE_PYTHON", "") not in ("", "0")
    assert ("python" if pure else "compiled") == hotpath.HOT_PATH
    assert (hotpath.Sender is _SenderPy) == pure


# ---------------------------------------------------------------------- receive side
class Feed:
    """Stands in for the data SUB: recv() hands out the frames, then raises Again (or a
    socket error, when asked)."""

    def __init__(self, frames: list[bytes], error: int | None = None) -> None:
        self.frames = frames
        self.i = 0
        self.error = error

    def recv(self, flags: int = 0) -> bytes:
        if self.i >= len(self.frames):
            if self.error is not None:
                raise zmq.ZMQError(self.error)
            raise zmq.Again()
        self.i += 1
        return self.frames[self.i - 1]


SubSpec = tuple[str, int, Overflow]


def make_plane(specs: list[SubSpec]) -> tuple[Receiver, list[Subscription], list[Any]]:
    routes: RoutingTable[Subscription] = RoutingTable()
    replies: list[Any] = []
    plane = Receiver(
        routes, None,  # type: ignore[arg-type]
        lambda subject, frame, start, now: replies.append((subject, frame, start)),
    )
    subs = []
    for pattern, size, overflow in specs:
        sub = Subscription(compile_pattern(pattern), size, overflow, lambda: None)
        if overflow == "block":
            sub.backpressure(plane.hold, plane.release)
        routes.add(sub.pattern, sub)
        subs.append(sub)
    return plane, subs, replies


def run(drain: Any, specs: list[SubSpec], frames: list[bytes], error: int | None = None
        ) -> dict[str, Any]:
    """Drain ``frames`` to the end (a consumer takes from held subscriptions when the
    plane stops reading) and return everything the drain left behind."""
    plane, subs, replies = make_plane(specs)
    feed = Feed(frames, error)
    calls = []
    raised: list[str] = []
    for _ in range(len(frames) + 5):  # bounded: every call reads or frees room
        try:
            calls.append(drain(plane, feed))
        except Exception as exc:
            raised.append(f"{type(exc).__name__}: {exc}")
            break
        if feed.i >= len(frames) and not plane.holds:
            break
        for s in subs:  # a consumer catches up
            while s.overflow == "block" and s.pending > s._limit // 2:
                s.get_nowait()
    return {
        "calls": calls,
        "raised": raised,
        "subs": [
            ([(m.frame, m._nul, m._start, m._data, m.subject, m.kind, m.reply, m.gap,
               m.publisher, m.sequence, m.data) for m in s._queue],
             msgspec.structs.asdict(s.statistics()))
            for s in subs
        ],
        "plane": (plane.messages_in, plane.bytes_in, plane.malformed, plane.lost,
                  plane.holds),
        "replies": replies,
        "sequences": (plane.sequences.last_seen, plane.sequences._streams,
                      plane.sequences.count, plane.sequences.restarted),
    }


SUBJECTS = [b"A", b"A.B", b"MD.NYSE.IBM", b"MD.X", b"Z" * 256, b"Z" * 257, b"\xff\xfe"]
PATTERNS = ["A", "A.B", "MD.>", "MD.*", ">", "^MD\\..*", "Z" * 256]


def publish(subject: bytes, payload: bytes) -> bytes:
    """A publish frame, also with a subject the encoder would refuse (too long...)."""
    return subject + b"\0\x01\0" + payload


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    subject = draw(st.sampled_from(SUBJECTS))
    body = draw(st.binary(max_size=20))
    kind = draw(st.sampled_from(["seq", "seq", "seq", "plain", "request", "request",
                                 "reply", "junk", "short", "headers"]))
    if kind == "seq":
        pid = draw(st.sampled_from([1, 2, 2**64 - 1]))
        seq = draw(st.integers(0, 2**32 - 1) | st.integers(1, 12))
        codec = draw(st.sampled_from([0, 1, 2, 3, 0x4F]))
        return publish(subject, encode_header(codec, pid, seq) + body)
    if kind == "plain":
        return publish(subject, body)
    if kind == "request":
        handle = draw(st.sampled_from([HANDLE, HANDLE, HANDLE[:20] + b"\0" + HANDLE[21:],
                                       HANDLE[:30] + b"\xe9" + HANDLE[31:], HANDLE[:59]]))
        end = draw(st.sampled_from([b"\0", b"\0", b"x"]))
        seq = draw(st.sampled_from([b"", encode_header(1, 5, 3)]))
        return subject + b"\0\x02" + handle + end + seq + body
    if kind == "reply":
        if draw(st.booleans()):
            return encode_reply(HANDLE, body)
        return draw(st.sampled_from([HANDLE, b"_INBOX.x", b"A"])) + b"\0\x03" + \
            draw(st.sampled_from([b"\0", b"\x01"])) + body
    if kind == "short":  # a sequence flag without a whole header
        return subject + b"\0\x01\0\x04" + body[:11]
    if kind == "headers":  # a header block, with or without a sequence header, maybe cut
        seq = draw(st.sampled_from([b"", encode_header(1, 5, draw(st.integers(1, 9)))[1:]]))
        first = 0x09 | (0x04 if seq else 0)
        block = encode_block(draw(st.dictionaries(st.text(max_size=4), st.text(max_size=4),
                                                  max_size=2)))
        cut = draw(st.sampled_from([None, None, 1, 3]))
        payload = bytes((first,)) + seq + block + body
        return publish(subject, payload if cut is None else payload[:cut])
    return draw(st.binary(max_size=40))


specs = st.lists(
    st.tuples(st.sampled_from(PATTERNS), st.integers(1, 6),
              st.sampled_from(["drop_newest", "drop_oldest", "block"])),
    min_size=1, max_size=4,
)


@compiled
@settings(max_examples=int(os.environ.get("AOZ_TWIN_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(specs=specs, frames=st.lists(frames(), max_size=60))
def test_the_drains_leave_the_same_state(specs: list[SubSpec], frames: list[bytes]) -> None:
    assert run(_speedups.drain_sub, specs, frames) == run(_drain_sub_py, specs, frames)


@compiled
def test_the_drains_agree_on_a_long_sequenced_stream_with_gaps() -> None:
    numbers = [n for n in range(1, 3000) if n % 97] + [5, 2**32 - 1, 0, 1]
    frames = [encode_publish(b"MD.X", encode_header(0, 9, n) + b"q") for n in numbers]
    spec: list[SubSpec] = [("MD.X", 5000, "drop_newest"), ("MD.*", 100, "drop_oldest"),
                           ("MD.>", 10, "block")]
    a, b = run(_speedups.drain_sub, spec, frames), run(_drain_sub_py, spec, frames)
    assert a == b
    assert a["plane"][3] > 0  # gaps were seen (and counted the same)
    assert len(a["calls"]) > 3  # the block subscription held the drain several times


@compiled
@pytest.mark.parametrize("errno", [zmq.ETERM, zmq.EFSM])
def test_the_drains_agree_on_socket_errors(errno: int) -> None:
    frames = [encode_publish(b"A", encode_header(0, 1, n) + b"x") for n in range(1, 4)]
    spec: list[SubSpec] = [("A", 10, "drop_newest")]
    a, b = (run(d, spec, frames, error=errno) for d in (_speedups.drain_sub, _drain_sub_py))
    assert a == b
    # a context ending is a node closing (quiet); another socket error fails the node;
    # either way the frames read before it are delivered
    assert len(a["subs"][0][0]) == 3
    assert bool(a["raised"]) == (errno == zmq.EFSM)


# ---------------------------------------------------------------------- send side
class Wire:
    """A real publisher and a subscriber on inproc, to see the bytes each sender puts
    on the wire."""

    def __init__(self, hwm: int = 100_000) -> None:
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.pub = self.ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.SNDHWM, hwm)
        self.pub.setsockopt(zmq.XPUB_NODROP, 1)
        self.pub.bind("inproc://twins")
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.RCVHWM, hwm)
        self.sub.connect("inproc://twins")
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        assert self.pub.poll(2000) and self.pub.recv() == b"\x01"  # the subscription arrived

    def received(self) -> list[bytes]:
        out = []
        while self.sub.poll(0):
            out.append(self.sub.recv())
        return out

    def close(self) -> None:
        self.pub.close(0)
        self.sub.close(0)
        self.ctx.term()


CALLS = [
    ("A", b"x"), ("A", b"y"), ("B.C", b""), ("A", {"k": 1}), ("A", "text"),
    ("A", Verbatim(b"Oomnm")), ("B.C", b"z" * 70_000), ("A", b"w"), ("B.C", [1, 2]),
    ("_INBOX.x", b"no"), ("", b"no"), ("A", b"last"),
]


def drive(sender_type: Any, sequenced: bool, entry: Any = None
          ) -> tuple[list[Any], list[bytes], int, int]:
    wire = Wire()
    try:
        builder = FrameBuilder(Codec.MSGPACK, publisher=77 if sequenced else None,
                               entry_type=entry)
        sender = sender_type(builder)
        outcomes: list[Any] = []
        try:
            sender.publish("A", b"closed", None)
        except Exception as exc:  # not open yet
            outcomes.append(f"{type(exc).__name__}: {exc}")
        sender.pub = wire.pub
        for subject, data in CALLS:
            try:
                sender.publish(subject, data, None)
                outcomes.append("sent")
            except SubjectError as exc:
                outcomes.append(f"SubjectError: {exc}")
        sender.publish("A", b"coded", Codec.RAW)
        # publish_many's side: frames built together (nothing numbered on an error)
        frames = sender.frames("A", [b"p", b"q" * 70_000, {"r": 1}, "s"], None)
        outcomes.append(sender.send_batch(frames, 1))
        try:
            sender.frames("A", [b"t", object()], None)
        except EncodeError as exc:
            outcomes.append(f"EncodeError: {exc}")
        sender.publish("A", b"after", None)
        # the block policy's side: built and numbered, then sent by the caller
        built = [sender.build("A", b"built", None), sender.build("B.C", {"b": 1}, None),
                 sender.build("N", b"new subject", None)]
        for frame in built:
            sender.send(frame)
        outcomes.append(built)
        received = wire.received()
        # every _YIELD_EVERY publishes the sender says "let the loop run", on both paths
        outcomes.append([i for i in range(600) if sender.publish("Y", b"", None)])
        outcomes.append([i for i in range(300) if sender.due()])
        return outcomes, received, sender.messages_out, sender.bytes_out
    finally:
        wire.close()


@compiled
@pytest.mark.parametrize("sequenced", [True, False])
def test_the_senders_put_the_same_bytes_on_the_wire(sequenced: bool) -> None:
    a, b = drive(_speedups.Sender, sequenced, _speedups.Entry), drive(_SenderPy, sequenced)
    assert a == b
    # a compiled Sender with the pure builder's entries takes the general path, alike
    assert drive(_speedups.Sender, sequenced) == b
    outcomes, wire, messages, nbytes = a
    assert outcomes.count("sent") == 10 and len(wire) == 18 and messages == 618
    assert outcomes[-2] == [255 - 12, 511 - 12]  # 12 publish calls came before the loop
    assert outcomes[-1] == [256 - (12 + 600 - 512) - 1]  # due() counts on from there
    assert nbytes == sum(map(len, wire)) + 600 * len(b"Y\0\x01\0") + (
        600 * (1 + 12) if sequenced else 600)
    assert outcomes[-5] == 4 and outcomes[-4].startswith("EncodeError")
    if sequenced:  # the failed batch numbered nothing: "after" follows "s"
        numbers = {f[17:]: int.from_bytes(f[13:17], "little") for f in wire
                   if f[:2] == b"A\0" and f[4] & 0x04}
        assert numbers[b"after"] == numbers[b"s"] + 1, numbers


@compiled
def test_the_senders_refuse_alike_at_a_full_queue() -> None:
    results = []
    for sender_type, entry in ((_speedups.Sender, _speedups.Entry), (_SenderPy, None)):
        wire = Wire(hwm=5)
        try:
            builder = FrameBuilder(Codec.MSGPACK, publisher=3, entry_type=entry)
            sender = sender_type(builder)
            sender.pub = wire.pub
            sent, refused = 0, None
            for _ in range(10_000):  # bounded: inproc's queues hold a few HWMs at most
                try:
                    sender.publish("A", b"x", None)
                    sent += 1
                except WouldBlock as exc:
                    refused = str(exc)
                    builder.rewind("A")  # as Node.publish_nowait does
                    break
            assert refused is not None
            sender.pub.close(0)
            with pytest.raises(Exception) as closed:
                sender.publish("A", b"x", None)
            results.append((sent, refused, sender.messages_out, type(closed.value).__name__,
                            wire.received()))
        finally:
            wire.close()
    assert results[0] == results[1]


def test_the_selected_path_is_reported() -> None:
    import aoz

    assert aoz.hot_path() in ("compiled", "python")
    assert aoz.hot_path() == hotpath.HOT_PATH
    assert hotpath.implementation() is (_hotpath if hotpath.HOT_PATH == "python"
                                        else _speedups)


def test_without_the_extension_the_pure_path_runs_by_itself() -> None:
    """Where the extension could not be built, importing aoz picks the pure-Python twin
    on its own (no setting needed) and a node works on it."""
    import subprocess

    code = """
import asyncio, sys
sys.modules["aoz._mesh._speedups"] = None  # as if the build had produced no extension
import aoz
assert aoz.hot_path() == "python", aoz.hot_path()
async def main():
    async with aoz.connect(bind=["tcp://127.0.0.1:*"]) as node:
        async with node.subscribe("T") as sub:
            await node.wait_for_interest("T")
            await node.publish_many("T", [b"a", b"b"])
            got = [(await sub.next(timeout=5)).data for _ in range(2)]
            assert got == [b"a", b"b"], got
            assert node.statistics().hot_path == "python"
asyncio.run(main())
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "AOZ_PURE_PYTHON"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@compiled
def test_the_senders_take_any_bytes_like_frame() -> None:
    """`publish_frames` hands the caller's frames on as they are (bytearray too)."""
    results = []
    for sender_type in (_speedups.Sender, _SenderPy):
        wire = Wire()
        try:
            sender = sender_type(FrameBuilder(Codec.MSGPACK))
            sender.pub = wire.pub
            sender.send(bytearray(b"B\0\x01\0\0ba"))
            sender.send(memoryview(b"B\0\x01\0\0mv"))
            results.append((wire.received(), sender.messages_out, sender.bytes_out))
        finally:
            wire.close()
    assert results[0] == results[1] == ([b"B\0\x01\0\0ba", b"B\0\x01\0\0mv"], 2, 14)


# ---------------------------------------------------------------------- publisher cache
def _store_state(store: Any) -> tuple[list[tuple[str, list[bytes]]], int, int]:
    """Everything a cache store holds, in its order (the byte bound's round robin)."""
    return [(s, list(d)) for s, d in store.deques.items()], store.nbytes, store.evicted


@compiled
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(depth=st.integers(1, 4), max_bytes=st.integers(0, 400),
       adds=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 120)), max_size=80))
def test_the_cache_stores_keep_and_evict_alike(depth: int, max_bytes: int,
                                               adds: list[tuple[int, int]]) -> None:
    stores = (_speedups.CacheStore(depth, max_bytes), _hotpath.CacheStore(depth, max_bytes))
    for i, (subject, size) in enumerate(adds):
        frame = bytes([i % 256]) * size
        for store in stores:
            store.add(f"S{subject}", frame)
    a, b = (_store_state(s) for s in stores)
    assert a == b
    kept, nbytes, evicted = a
    # exact bounds and accounting: what it holds is counted, what left is counted
    assert nbytes == sum(len(f) for _, frames in kept for f in frames) <= max_bytes
    assert all(len(frames) <= depth for _, frames in kept)
    assert evicted == len(adds) - sum(len(frames) for _, frames in kept)


def keep_and_send(sender_type: Any, store_type: Any, entry: Any = None
                  ) -> tuple[list[Any], list[bytes], Any]:
    """A sender with a cache store: every way a frame is numbered, then a full queue."""
    wire = Wire(hwm=40)
    try:
        builder = FrameBuilder(Codec.MSGPACK, publisher=5, entry_type=entry)
        sender = sender_type(builder)
        sender.store = store_type(2, 600)  # depth 2; 600 B: the byte bound evicts too
        sender.pub = wire.pub
        outcomes: list[Any] = []
        for subject, data in CALLS[:9]:  # the fast path, the builder's, a 70 kB frame
            sender.publish(subject, data, None)
        sender.publish("A", b"coded", Codec.RAW)
        headed = builder.publish_with("H", b"h", None, {"k": "v"})
        outcomes.append(sender.put("H", headed))
        outcomes.append(_store_state(sender.store))
        frames = sender.frames("M", [b"m1", {"m": 2}, b"m3"], None)  # kept as built
        outcomes.append(_store_state(sender.store))
        sender.send_batch(frames)
        try:
            sender.frames("M", [b"m4", object()], None)  # nothing numbered, nothing kept
        except EncodeError:
            outcomes.append(_store_state(sender.store))
        built = sender.build("B", b"built", None)  # not kept until the caller says so
        sender.send(built)
        outcomes.append(_store_state(sender.store))
        sender.keep("B", built)
        outcomes.append(_store_state(sender.store))
        # a full queue: the refused frame is left in `unsent`, not kept
        for i in range(1000):  # bounded: the HWM refuses long before
            try:
                sender.publish("F", b"f%d" % i, None)
            except WouldBlock:
                break
        outcomes.append((sender.unsent, _store_state(sender.store)))
        return outcomes, wire.received(), sender.store
    finally:
        wire.close()


@compiled
def test_the_senders_keep_what_they_number_alike() -> None:
    a = keep_and_send(_speedups.Sender, _speedups.CacheStore, _speedups.Entry)
    b = keep_and_send(_SenderPy, _hotpath.CacheStore)
    # the compiled Sender with the pure builder's entries (its general path) keeps alike
    c = keep_and_send(_speedups.Sender, _speedups.CacheStore)
    assert a[:2] == b[:2] == c[:2]
    outcomes, wire, store = b
    unsent, (kept, nbytes, evicted) = outcomes[-1]
    # what is kept went on the wire (or is the frame the caller kept itself), and it is
    # the last of its subject; the refused frame is not kept and not on the wire
    on_wire = set(wire)
    assert unsent is not None and unsent not in on_wire
    assert all(f in on_wire for _, frames in kept for f in frames)
    assert nbytes == sum(len(f) for _, frames in kept for f in frames) <= 600
    assert dict(kept)["F"][-1] == max((f for f in wire if f.startswith(b"F\0")),
                                      key=lambda f: int.from_bytes(f[13:17], "little"))
    # publish_many's frames were kept as built (before they were sent)
    assert dict(outcomes[2][0])["M"] == frames_of(wire, b"M")[-2:]
    # an encode error keeps nothing; build() keeps nothing until keep()
    assert outcomes[3] == outcomes[2]
    assert "B" not in dict(outcomes[4][0]) and dict(outcomes[5][0])["B"][-1] == wire_frame(
        wire, b"B\0", b"built")
    assert evicted > 0 and store.evicted == evicted


def frames_of(wire: list[bytes], subject: bytes) -> list[bytes]:
    return [f for f in wire if f.startswith(subject + b"\0")]


def wire_frame(wire: list[bytes], prefix: bytes, suffix: bytes) -> bytes:
    [frame] = [f for f in wire if f.startswith(prefix) and f.endswith(suffix)]
    return frame


@compiled
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(depth=st.integers(1, 3), max_bytes=st.integers(0, 300),
       calls=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 90), st.booleans()),
                      max_size=60))
def test_the_senders_keep_alike_under_both_bounds(depth: int, max_bytes: int,
                                                  calls: list[tuple[int, int, bool]]) -> None:
    """Publishes on a few subjects (the compiled fast path, which holds each subject's
    deque in its Entry, and the builder's path), with the byte bound emptying and
    dropping subjects in between: both twins keep the same frames, bytes and evictions."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        states = []
        for sender_type, store_type, entry in (
                (_speedups.Sender, _speedups.CacheStore, _speedups.Entry),
                (_SenderPy, _hotpath.CacheStore, None)):
            pub = ctx.socket(zmq.XPUB)  # no subscriber: every send succeeds, goes nowhere
            pub.bind(f"inproc://keep-{uuid.uuid4()}")
            sender = sender_type(FrameBuilder(Codec.MSGPACK, publisher=2, entry_type=entry))
            sender.store = store_type(depth, max_bytes)
            sender.pub = pub
            for subject, size, as_bytes in calls:
                sender.publish(f"S{subject}", bytes(size) if as_bytes else "t" * size, None)
            states.append(_store_state(sender.store))
            pub.close(0)
        assert states[0] == states[1]
        kept, nbytes, evicted = states[0]
        assert nbytes == sum(len(f) for _, frames in kept for f in frames) <= max_bytes
        assert evicted == len(calls) - sum(len(frames) for _, frames in kept)
    finally:
        ctx.term()


# ---------------------------------------------------------------------- request side
class FakeFuture:
    """A first-reply waiter as the inboxes see it (done, set_result)."""

    def __init__(self) -> None:
        self.result: Any = None
        self.sets = 0
        self.cancelled = False

    def done(self) -> bool:
        return self.sets > 0 or self.cancelled

    def set_result(self, msg: Any) -> None:
        self.sets += 1
        self.result = msg


def _seen(msg: Any) -> Any:
    """What a reply Message says (its fields, not its identity)."""
    if msg is None:
        return None
    return (msg.frame, msg.subject, msg.kind, msg.reply, msg.payload, msg.data,
            msg.received_at, msg.error)


@st.composite
def inbox_ops(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    ops: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(0, 40))):
        op = draw(st.sampled_from(["open", "timed", "timed", "stream", "reply", "reply",
                                   "reply", "junk", "close", "cancel", "due", "expire"]))
        if op in ("open", "timed", "stream"):
            ops.append((op, draw(st.floats(0, 20, allow_nan=False))))
        elif op == "reply":
            body = draw(st.binary(max_size=12))
            head = draw(st.sampled_from([b"\0", b"\x01", b"\x04", b"\x81\xa9aoz.error"]))
            ops.append((op, draw(st.integers(0, 45)), head + body))
        elif op == "junk":
            ops.append((op, draw(st.sampled_from(JUNK_SUBJECTS)), draw(st.binary(max_size=8))))
        elif op in ("close", "cancel"):
            ops.append((op, draw(st.integers(0, 45))))
        else:
            ops.append((op, draw(st.floats(0, 25, allow_nan=False))))
    return ops


# subjects a reply may come on that are not a handle of this inbox (or name serial 0)
_PREFIX = b"_INBOX." + NODE.encode() + b"."
JUNK_SUBJECTS = [
    _PREFIX + b"0000000000000000", _PREFIX + b"000000000000000A", _PREFIX + b"00000000000000g1",
    _PREFIX + b"000000000000001", _PREFIX + b"00000000000000011",
    _PREFIX[:-1] + b"x0000000000000001",
    make_handle(str(uuid.uuid4()), 1), b"_INBOX.x", b"", b"A",
    _PREFIX + b"ffffffffffffffff", _PREFIX + b" 000000000000001",
]


def run_inbox(inbox_type: Any, ops: list[tuple[Any, ...]]) -> list[Any]:
    """Put ``ops`` through an inbox; return everything it answered and left behind."""
    from aoz._mesh.requests import ReplyStream

    inbox = inbox_type(NODE, None)
    out: list[Any] = []
    waiters: dict[int, Any] = {}
    for op in ops:
        if op[0] in ("open", "timed"):
            fut = FakeFuture()
            if op[0] == "open":
                serial, handle = inbox.open(fut, op[1])
            else:
                serial, handle = inbox.open_timed(fut, op[1], f"S{len(waiters)}", op[1] / 2)
            waiters[serial] = fut
            out.append((op[0], serial, handle, len(inbox), inbox.next_deadline()))
        elif op[0] == "stream":
            stream = ReplyStream("S", op[1], None, lambda: None)
            serial, handle = inbox.open(stream, op[1] + 1.0)
            waiters[serial] = stream
            out.append(("stream", serial, handle, len(inbox)))
        elif op[0] == "reply":
            subject = make_handle(NODE, op[1]) if op[1] else _PREFIX + b"0" * 16
            frame = encode_reply(subject, op[2]) if op[1] else subject + b"\0\x03\0" + op[2]
            inbox.on_reply(subject, frame, 63, 5.0)
            out.append(("reply", inbox.replies_dropped, len(inbox)))
        elif op[0] == "junk":
            frame = op[1] + b"\0\x03\0" + op[2]
            inbox.on_reply(op[1], frame, len(op[1]) + 3, 5.0)
            out.append(("junk", inbox.replies_dropped, len(inbox)))
        elif op[0] == "close":
            w = inbox.close(op[1])
            out.append(("close", w is waiters.get(op[1]) if w is not None else None, len(inbox)))
        elif op[0] == "cancel":  # the caller went away: its future is done, unanswered
            w = waiters.get(op[1])
            if isinstance(w, FakeFuture):
                w.cancelled = True
        elif op[0] == "due":
            due = inbox.due(op[1])
            out.append(("due", [(next(s for s, w in waiters.items() if w is f), subj, t)
                                for f, subj, t in due], inbox.next_deadline()))
        else:
            gone = inbox.expire(op[1])
            out.append(("expire", sorted(s for s, w in waiters.items()
                                         if any(w is g for g in gone)), len(inbox)))
    for serial, w in sorted(waiters.items()):
        if isinstance(w, FakeFuture):
            out.append((serial, w.sets, _seen(w.result)))
        else:
            out.append((serial, [_seen(m) for m in w._queue]))
    out.append(("left", len(inbox), inbox.lookup(1) is not None, inbox.replies_dropped,
                len(inbox.drain()), len(inbox), inbox.next_deadline()))
    return out


@compiled
@settings(max_examples=int(os.environ.get("AOZ_TWIN_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(ops=inbox_ops())
def test_the_inboxes_answer_alike(ops: list[tuple[Any, ...]]) -> None:
    """Opening, replies (to open, closed, timed-out and streamed requests, and junk),
    deadlines, expiry and draining leave the same answers and waiters in both twins."""
    assert run_inbox(_speedups.Inbox, ops) == run_inbox(_hotpath.Inbox, ops)


@pytest.mark.parametrize("inbox_type", [
    _hotpath.Inbox, pytest.param(getattr(_speedups, "Inbox", None), marks=compiled),
], ids=["pure", "compiled"])
def test_an_inbox_keeps_its_deadline_heap_near_its_open_requests(inbox_type: Any) -> None:
    """Finished requests leave their deadlines in the heap until they are due or
    outnumber the open ones (then the heap is rebuilt): thousands of answered requests
    never pile up, and an open request's deadline is never lost."""
    inbox = inbox_type(NODE, None)
    keep = FakeFuture()
    serial, _ = inbox.open_timed(keep, 1.0, "S", 1.0)
    for i in range(5000):
        fut = FakeFuture()
        s, _ = inbox.open_timed(fut, 100.0 + i, "S", 1.0)
        inbox.close(s)
        fut.set_result(None)
        assert inbox.deadlines <= 2 * (len(inbox) + 1) + 64  # the one just closed counted
    assert inbox.next_deadline() == 1.0
    assert inbox.due(0.5) == []
    assert inbox.due(1.0) == [(keep, "S", 1.0)]
    assert inbox.lookup(serial) is keep  # due() does not close: the caller does
    assert inbox.due(10_000.0) == []  # everything else was answered
    assert inbox.next_deadline() is None


def test_a_reply_handle_round_trips_through_both_inboxes() -> None:
    from aoz._protocol.frames import parse_handle

    for inbox_type in filter(None, [_hotpath.Inbox, getattr(_speedups, "Inbox", None)]):
        inbox = inbox_type(NODE, None)
        inbox._next = 2**64 - 2  # the last serials, then the wrap to 1
        got = []
        for _ in range(3):
            serial, handle = inbox.open(object(), 0.0)
            assert handle == make_handle(NODE, serial)
            assert parse_handle(handle) == (NODE, serial)
            got.append(serial)
        assert got == [2**64 - 2, 2**64 - 1, 1]
