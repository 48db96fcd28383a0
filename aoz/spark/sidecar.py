"""The sink's sidecar: a long-lived aoz node that publishes rows handed over by Spark tasks.

One sidecar runs on every host that runs Spark executors or the driver, on the same
fixed port everywhere (``tcp://127.0.0.1:5758`` by default), so that every task can reach
"its" sidecar by one address::

    $ aoz sidecar --bind tcp://127.0.0.1:5758 --naming tcp://nsd-host:5756
    aoz sidecar ready on tcp://127.0.0.1:5758 (node 5b0c...)
    $ aoz sidecar --probe tcp://127.0.0.1:5758        # health: exit 0 and the counters

In Python: :func:`run_sidecar` (what the command runs), :class:`SinkSidecar` (on a node
you already have), :func:`sink_sidecar` (a node and a sidecar in a background thread,
for synchronous Spark programs) and :func:`probe_sidecar`.

Wire (ZeroMQ multipart, task DEALER -> sidecar ROUTER):

* ``[b"P", seq, table, index, offsets, bodies]``: publish a chunk of rows, in order.
  ``table`` is msgpack ``[codec, [subject, ...]]`` or ``[codec, [subject, ...], pack]``;
  ``index`` holds each row's subject number (uint16, little-endian), ``offsets`` the row
  boundaries in ``bodies`` (uint32, ``n + 1`` of them). The sidecar builds each aoz
  publish frame itself, from subjects it validated once per chunk
  (:mod:`aoz._protocol.frames`), so bad input can never become a bad frame and nothing
  is parsed per row. With ``pack`` > 1, each run of consecutive rows on one subject
  goes out as packed frames of up to ``pack`` rows (:mod:`aoz._protocol.packed`: one
  ZeroMQ frame, which the receiving aoz node unpacks into one message per row; a run
  of one row is a plain frame); the sink's tasks group a chunk's rows by subject, which
  the sidecar finds with a bisection per subject, so no Python runs per row. Reply
  ``[b"A", seq, n]`` once all ``n`` rows are in the node's ZeroMQ queues, or
  ``[b"N", seq, n, reason]`` when only the first ``n`` got there within
  ``publish_timeout`` (the task then fails; Spark retries).
* ``[b"H", token]``: health probe; reply ``[b"H", token, msgpack SidecarStatistics]``.

No silent loss: the sidecar's node must use ``send_policy="block"`` (``XPUB_NODROP``;
:func:`run_sidecar` and :func:`sink_sidecar` set it), so a subscriber that falls
``send_hwm`` frames behind makes the send fail instead of dropping frames; the sidecar
then waits (back-pressure on the tasks, which stop after a
window of unacknowledged chunks) and acknowledges only what ZeroMQ accepted. ZeroMQ
delivers what it accepted unless the subscriber's connection goes away.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import struct
import sys
import time
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator
from itertools import accumulate, groupby, pairwise
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import msgspec
import zmq
import zmq.asyncio

from .._mesh.errmap import mapped
from .._mesh.tasks import TaskOwner
from .._protocol.codecs import AOZ_CODEC_IDS
from .._protocol.frames import publish_header
from .._protocol.packed import MAX_ROWS, pack_span
from .._protocol.subjects import is_reserved, subject_bytes
from ..errors import AozError, ConfigError, TransportError, WaitTimeout

if TYPE_CHECKING:
    from .._mesh.node import Node

__all__ = [
    "DEFAULT_SIDECAR",
    "SidecarHandle",
    "SidecarStatistics",
    "SinkSidecar",
    "probe_sidecar",
    "run_sidecar",
    "sink_sidecar",
]

log = logging.getLogger("aoz.spark")

DEFAULT_SIDECAR: Final = "tcp://127.0.0.1:5758"

PUBLISH: Final = b"P"
ACK: Final = b"A"
NACK: Final = b"N"
HEALTH: Final = b"H"
_U64: Final = struct.Struct("!Q")
_U16: Final = struct.Struct("<H")


class SidecarStatistics(msgspec.Struct, frozen=True, kw_only=True):
    rows: int  #: rows published
    chunks: int  #: chunks acknowledged in full
    refused: int  #: chunks not (fully) published within publish_timeout (nacked)
    waits: int  #: publishes of the node that waited for a full subscriber queue
    malformed: int  #: messages or frames that were not sidecar protocol (dropped)
    node_uuid: str = ""
    endpoint: str = ""


class _Table(msgspec.Struct, array_like=True):
    codec: int
    subjects: list[str]
    pack: int = 1  #: most rows per frame (1: a frame per row, the wire before packing)


_TABLE: Final = msgspec.msgpack.Decoder(_Table)


class ChunkError(ValueError):
    """A publish chunk that does not follow the sidecar wire (counted, nacked)."""


def encode_table(codec: int, subjects: list[str], pack: int = 1) -> bytes:
    """A chunk's subject table (its first part)."""
    return msgspec.msgpack.encode((codec, subjects) if pack == 1 else (codec, subjects, pack))


def encode_chunk(
    codec: int, subjects: list[str], index: list[int], bodies: list[bytes], pack: int = 1
) -> list[bytes]:
    """The four parts after ``[b"P", seq]`` for rows ``bodies`` on ``subjects[index[i]]``,
    at most ``pack`` rows per frame."""
    offsets = array("I", [0])
    offsets.extend(accumulate(map(len, bodies)))
    return [
        encode_table(codec, subjects, pack),
        array("H", index).tobytes(),
        offsets.tobytes(),
        b"".join(bodies),
    ]


def decode_chunk(parts: list[bytes], headers: dict[str, bytes]) -> list[bytes]:
    """Build the aoz publish frames of a chunk (see the module docstring).

    ``headers`` caches validated subject headers across chunks. Raises
    :class:`ChunkError` for anything malformed; no frame is built from invalid input.
    """
    return chunk_frames(parts, headers)[0]


def chunk_frames(
    parts: list[bytes], headers: dict[str, bytes]
) -> tuple[list[bytes], list[int] | None]:
    """:func:`decode_chunk`, and how many rows the frames carry up to each one
    (cumulative; ``None`` when each frame is one row)."""
    if len(parts) != 4:
        raise ChunkError("a publish chunk has 4 parts after the sequence number")
    table, index_raw, offsets_raw, blob = parts
    try:
        t = _TABLE.decode(table)
    except (msgspec.DecodeError, RecursionError) as exc:  # nesting is input too
        raise ChunkError(f"bad subject table: {exc}") from None
    codec, subjects, pack = t.codec, t.subjects, t.pack
    # only aoz's own codec ids (0..3): a payload's first byte must stay OZ-safe
    # (aoz._protocol.sequence, "the OZ-safe first-byte rule")
    if not 0 <= codec < AOZ_CODEC_IDS or len(index_raw) % 2 or len(offsets_raw) % 4:
        raise ChunkError("bad codec, index or offsets")
    if not 1 <= pack <= MAX_ROWS:
        raise ChunkError(f"rows per frame must be 1..{MAX_ROWS}, not {pack}")
    heads = []
    tail = b"\0" + bytes([codec])
    for subject in subjects:
        h = headers.get(subject)
        if h is None:
            if is_reserved(subject):
                raise ChunkError(f"subject {subject!r} is reserved")
            try:
                h = publish_header(subject_bytes(subject))[:-1] + tail
            except AozError as exc:
                raise ChunkError(str(exc)) from None
            if len(headers) > 100_000:
                headers.clear()
            headers[subject] = h
        elif h[-1] != codec:
            h = h[:-1] + bytes([codec])
        heads.append(h)
    index = array("H")
    index.frombytes(index_raw)
    offsets = array("I")
    offsets.frombytes(offsets_raw)
    n = len(index)
    if len(offsets) != n + 1 or (n and (offsets[0] != 0 or offsets[n] != len(blob))):
        raise ChunkError("offsets do not match the rows")
    if n and max(index) >= len(heads):
        raise ChunkError("a row names a subject the table does not have")
    if pack == 1 or n < 2:
        pairs = pairwise(offsets)
        return [heads[i] + blob[a:b] for i, (a, b) in zip(index, pairs, strict=False)], None
    if offsets != array("I", sorted(offsets)):  # linear for what tasks send
        raise ChunkError("offsets go backwards")
    frames, ends = [], []
    for k, lo, hi in _runs(index, index_raw, len(heads)):
        head = heads[k][:-1]
        for a in range(lo, hi, pack):
            b = min(hi, a + pack)
            if b - a == 1:  # a single row goes as a plain frame
                frames.append(heads[k] + blob[offsets[a] : offsets[b]])
            else:
                frames.append(head + pack_span(codec, offsets_raw, blob, a, b))
            ends.append(b)
    return frames, ends


def _runs(index: array[int], raw: bytes, subjects: int) -> list[tuple[int, int, int]]:
    """``(subject, first, end)`` of each run of rows on one subject, in row order. A
    chunk whose rows are grouped by subject in subject order (what the sink's tasks
    send) costs a bisection per subject and one comparison of the index's bytes; any
    other order a pass over the rows."""
    runs = []
    lo, n = 0, len(index)
    for k in range(subjects):
        hi = bisect_right(index, k, lo)
        if hi > lo:
            runs.append((k, lo, hi))
            lo = hi
    if lo == n and b"".join(_U16.pack(k) * (hi - lo) for k, lo, hi in runs) == raw:
        return runs
    runs, lo = [], 0
    for k, group in groupby(index):
        hi = lo + sum(1 for _ in group)
        runs.append((k, lo, hi))
        lo = hi
    return runs


def _check_lossless(node: Node) -> None:
    if node.settings.send_policy != "block":
        raise ConfigError(
            "the sink sidecar needs a lossless node: aoz.connect(send_policy='block', ...)"
        )
    if node.closed:
        raise TransportError("the sidecar's node is closed; use `async with aoz.connect()`")


class SinkSidecar:
    """Publishes rows handed over by Spark tasks on ``node``. An async context manager.

    >>> async with aoz.connect(send_policy="block") as node:  # doctest: +SKIP
    ...     async with SinkSidecar(node) as sidecar:
    ...         df.write.format("aoz").option("sidecar", sidecar.endpoint)...

    ``bind`` defaults to an ephemeral loopback port (fine for ``local[N]``; on a cluster
    use the same fixed port on every host). ``node`` must be lossless,
    ``aoz.connect(send_policy="block")``, or :class:`aoz.ConfigError` is raised. Opening
    and closing may happen in different tasks.
    """

    def __init__(
        self, node: Node, bind: str = "tcp://127.0.0.1:*", *, publish_timeout: float = 5.0
    ) -> None:
        if publish_timeout <= 0:
            raise ConfigError("publish_timeout must be > 0 seconds")
        self.node = node
        self.bind = bind
        self.publish_timeout = publish_timeout
        self.endpoint = ""
        self._ctx: zmq.asyncio.Context | None = None
        self._sock: zmq.asyncio.Socket | None = None
        self._owner = TaskOwner("aoz-sink-sidecar")
        self._rows = self._chunks = self._refused = self._malformed = 0
        self._headers: dict[str, bytes] = {}

    async def __aenter__(self) -> SinkSidecar:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Bind and start serving (returns once the socket is bound)."""
        _check_lossless(self.node)
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 1000)
        try:
            with mapped(f"the sink sidecar cannot bind {self.bind}"):
                sock.bind(self.bind)
        except AozError:
            sock.close()
            ctx.term()
            raise
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._ctx, self._sock = ctx, sock

        async def setup(tg: anyio.abc.TaskGroup) -> None:
            tg.start_soon(self._serve, sock, name="aoz-sink-sidecar")

        await self._owner.start(setup)

    async def aclose(self) -> None:
        """Stop serving and release the socket; safe from any task, and twice."""
        await self._owner.aclose()
        sock, ctx, self._sock, self._ctx = self._sock, self._ctx, None, None
        if sock is not None:
            sock.close(linger=0)
        if ctx is not None:
            ctx.term()

    async def _serve(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            parts = await sock.recv_multipart()
            if len(parts) < 3:
                self._malformed += 1
                continue
            peer, kind, seq = parts[0], parts[1], parts[2]
            if kind == PUBLISH:
                reason: str | None
                try:
                    frames, ends = chunk_frames(parts[3:], self._headers)
                except ChunkError as exc:
                    self._malformed += 1
                    sent, reason = 0, str(exc)
                else:
                    sent, reason = await self._publish(frames, ends)
                if reason is None:
                    self._chunks += 1
                    await sock.send_multipart([peer, ACK, seq, _U64.pack(sent)])
                else:
                    self._refused += 1
                    await sock.send_multipart([peer, NACK, seq, _U64.pack(sent), reason.encode()])
            elif kind == HEALTH:
                stats = msgspec.msgpack.encode(self.statistics())
                await sock.send_multipart([peer, HEALTH, seq, stats])
            else:
                self._malformed += 1

    async def _publish(
        self, frames: list[bytes], ends: list[int] | None
    ) -> tuple[int, str | None]:
        """Send; return the rows the sent frames carry, and why not all were sent."""
        # The node's send path for prebuilt frames: one C call per frame, and on a full
        # subscriber queue it waits for room (never drops), at most publish_timeout.
        try:
            sent = await self.node.publish_frames(frames, timeout=self.publish_timeout)
        except AozError as exc:
            return 0, f"publish failed: {exc}"
        rows = sent if ends is None or not sent else ends[sent - 1]
        self._rows += rows
        if sent < len(frames):
            return rows, f"subscribers did not keep up for {self.publish_timeout} s"
        return rows, None

    def statistics(self) -> SidecarStatistics:
        return SidecarStatistics(
            rows=self._rows, chunks=self._chunks, refused=self._refused,
            waits=self.node.statistics().blocked_sends,
            malformed=self._malformed, node_uuid=self.node.uuid, endpoint=self.endpoint,
        )  # fmt: skip


def probe_sidecar(endpoint: str = DEFAULT_SIDECAR, timeout: float = 2.0) -> SidecarStatistics:
    """Ask a sidecar for its counters (blocking): the health probe.

    Raises :class:`aoz.WaitTimeout` when no sidecar answers within ``timeout`` seconds.

    >>> probe_sidecar("tcp://127.0.0.1:5758").rows   # doctest: +SKIP
    """
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        with mapped(f"cannot reach the aoz sink sidecar at {endpoint}"):
            sock.connect(endpoint)
            token = _U64.pack(time.monotonic_ns())
            sock.send_multipart([HEALTH, token])
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                if not sock.poll(int(left * 1000) + 1):
                    break
                parts = sock.recv_multipart()
                if len(parts) == 3 and parts[0] == HEALTH and parts[1] == token:
                    return msgspec.msgpack.decode(parts[2], type=SidecarStatistics)
    finally:
        sock.close(linger=0)
        ctx.term()
    raise WaitTimeout(
        f"no aoz sink sidecar answered at {endpoint} within {timeout} s; start one on this "
        "host with `aoz sidecar --bind <that address>`",
        timeout=timeout,
    )


class SidecarHandle:
    """A sidecar running in a background thread (see :func:`sink_sidecar`)."""

    def __init__(self, sidecar: SinkSidecar) -> None:
        self._sidecar = sidecar
        self.endpoint = sidecar.endpoint
        self.node_uuid = sidecar.node.uuid

    def statistics(self) -> SidecarStatistics:
        return self._sidecar.statistics()


@contextlib.contextmanager
def sink_sidecar(bind: str = "tcp://127.0.0.1:*", **settings: Any) -> Iterator[SidecarHandle]:
    """Run a node and a :class:`SinkSidecar` in a background thread, for synchronous
    Spark programs. ``settings`` go to :func:`aoz.connect`.

    >>> with sink_sidecar(naming=["tcp://127.0.0.1:5756"]) as sc:  # doctest: +SKIP
    ...     df.write.format("aoz").option("sidecar", sc.endpoint)...
    """
    from anyio.from_thread import start_blocking_portal

    from .._mesh.node import connect

    settings.setdefault("send_policy", "block")
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(connect(**settings)) as node,
        portal.wrap_async_context_manager(SinkSidecar(node, bind)) as sidecar,
    ):
        yield SidecarHandle(sidecar)


async def run_sidecar(
    address: str = DEFAULT_SIDECAR,
    *,
    publish_timeout: float = 5.0,
    on_ready: Callable[[SinkSidecar], None] | None = None,
    **settings: Any,
) -> SidecarStatistics:
    """Run a sidecar until SIGINT/SIGTERM (what ``aoz sidecar`` runs); return its counters.

    Joins the mesh with ``aoz.connect(send_policy="block", **settings)``, binds
    ``address`` (where tasks hand rows over; ``settings`` may have a ``bind`` of their
    own, for static mode), then prints the readiness line
    ``aoz sidecar ready on <endpoint> (node <uuid>)`` to stdout (or calls ``on_ready``).
    A signal stops it cleanly: the current chunk is finished or nacked, the node leaves
    the mesh.
    """
    from .._mesh.node import connect

    settings.setdefault("send_policy", "block")
    async with connect(**settings) as node:
        sidecar = SinkSidecar(node, address, publish_timeout=publish_timeout)
        await sidecar.start()
        try:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                if on_ready is not None:
                    on_ready(sidecar)
                else:
                    print(f"aoz sidecar ready on {sidecar.endpoint} (node {node.uuid})", flush=True)
                async for signum in signals:
                    print(f"aoz sidecar: {signal.strsignal(signum)}, stopping", file=sys.stderr)
                    break
        finally:
            await sidecar.aclose()
        return sidecar.statistics()


async def sidecar_main(
    conn: dict[str, Any],
    address: str = DEFAULT_SIDECAR,
    *,
    probe: str | None = None,
    publish_timeout: float = 5.0,
    timeout: float = 2.0,
) -> int:
    """``aoz sidecar``: run one (until SIGINT/SIGTERM; counters as JSON on stdout at the
    end), or with ``probe`` ask the sidecar at that endpoint for its counters (exit 0,
    JSON on stdout) and exit 1 when none answers within ``timeout``."""
    if probe is not None:
        stats = await anyio.to_thread.run_sync(probe_sidecar, probe, timeout)
    else:
        stats = await run_sidecar(address, publish_timeout=publish_timeout, **conn)
    sys.stdout.write(msgspec.json.encode(stats).decode() + "\n")
    sys.stdout.flush()
    return 0
