"""What a subscriber receives: :class:`Message`.

A message keeps the frame exactly as it came off the wire and parses the parts a
consumer asks for, so a subscriber that only counts or forwards messages pays for
almost nothing.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Coroutine, Generator
from itertools import pairwise
from typing import Any, Protocol, TypeVar, overload

import msgspec

from .._protocol.codecs import AOZ_CODEC_IDS, Codec, decode_payload, split_payload
from .._protocol.frames import Kind
from .._protocol.headers import data_start, parse_headers
from .._protocol.packed import PACKED, row_bounds
from .._protocol.sequence import FLAG, HEADER_LEN, PACK
from ..errors import AozError, ClosedError, UsageError

__all__ = [
    "DONE", "Message", "Responder", "WeakResponder", "data_start", "expand_packed", "rows_of",
]

T = TypeVar("T")


class Responder(Protocol):
    """What a message answers through (the node that received it): ``respond_to``
    returns what the responder awaits (a coroutine, or :data:`DONE` when the reply has
    already gone)."""

    def respond_to(self, handle: str, data: object, codec: Codec | None
                   ) -> Awaitable[None]: ...


class _Done(Coroutine[Any, Any, None]):
    """An awaitable that is already done: what a publish or a reply sent at once
    returns (a coroutine per call cost more than the send). It is a
    ``collections.abc.Coroutine``, so ``asyncio.create_task`` and anyio's ``start_soon``
    take it as they take a coroutine; it holds no state, so one serves every call."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]

    def send(self, value: Any) -> Any:
        raise StopIteration

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        raise typ if val is None else val

    def close(self) -> None:
        return None


#: awaiting it returns None at once (the pure twin's; aoz._mesh.hotpath.DONE is the one used)
DONE: Coroutine[Any, Any, None] = _Done()


class WeakResponder:
    """A node as its messages hold it: weakly.

    Messages are not tracked by Python's cyclic garbage collector (``gc=False``): a
    receiver builds one per frame, keeps thousands queued, and a collector walking
    them cost about a fifth of the receive path. That is safe only if a message can
    never be part of a reference cycle, and what it holds (bytes, str, numbers, this
    object) refers to nothing that could lead back to it: the node, which does (its
    subscriptions queue messages), is reached through a weak reference.
    """

    __slots__ = ("_ref",)

    def __init__(self, node: Responder) -> None:
        self._ref = weakref.ref(node)

    def respond_to(
        self, handle: str, data: object, codec: Codec | None
    ) -> Awaitable[None]:
        # the node's awaitable itself, not one more coroutine around it (one per reply)
        node = self._ref()
        if node is None:
            raise ClosedError("the node that received this request is gone; it cannot be "
                              "answered")
        return node.respond_to(handle, data, codec)


#: the key of an error reply: the msgpack map ``{"aoz.error": "<type>: <message>"}``
ERROR_KEY = "aoz.error"
_ERROR_MARK = b"\xa9" + ERROR_KEY.encode()  # the key as msgpack writes it (fixstr 9)

_CODEC_BITS = AOZ_CODEC_IDS - 1  # the codec's bits of aoz's first byte (0x03)


class Message(msgspec.Struct, repr_omit_defaults=True, eq=False, gc=False):
    """One received publication, request or reply.

    >>> # inside `async for msg in node.subscribe("MD.>")`:
    >>> # msg.subject == "MD.NYSE.IBM"; msg.decode(Quote) -> Quote(...)

    Attributes:
        subject: the message's real subject (also for wildcard subscriptions).
        kind: :class:`aoz.Kind` (``PUBLISH``, ``REQUEST`` or ``REPLY``).
        reply: the reply handle (``_INBOX.<uuid>.<serial>``) of a request, else ``None``.
        received_at: ``time.time()`` when the node read the frame's batch (seconds).
        gap: how many messages of the same publisher on this subject were lost upstream
            just before this one (0 normally; see :attr:`sequence`), as detected: with
            ``recover=True`` the recovered ones were delivered before it.
        replayed: ``True`` for a message that came from a publisher's cache (history
            of ``subscribe(history=N)``, or recovered by ``recover=True``) rather than
            live; it is byte for byte what the publisher sent.

    A message is a ``msgspec.Struct`` only because that is the cheapest Python object
    to build: the node makes one per received frame. It is not tracked by the cyclic
    garbage collector, so it holds its node only weakly (:class:`WeakResponder`).
    Build messages through a node.
    """

    _frame: bytes
    _nul: int
    _start: int  # the payload
    _data: int  # the data: after the codec byte, or the sequence header (data_start)
    kind: Kind
    reply: str | None
    received_at: float
    _node: Responder | None
    _subject: str | None = None
    gap: int = 0
    replayed: bool = False

    @property
    def subject(self) -> str:
        """The message's real subject (also under a wildcard subscription)."""
        s = self._subject
        if s is None:
            # The node only builds messages whose subject it has matched against a
            # valid subscription, so the bytes are valid UTF-8.
            s = self._subject = self._frame[: self._nul].decode()
        return s

    @property
    def payload(self) -> bytes:
        """The whole payload as on the wire, codec byte included."""
        return self._frame[self._start :]

    def _sequenced(self) -> bool:
        # data past the first byte: an aoz payload with flags (0x04..0x0F)
        return self._data - self._start >= HEADER_LEN and bool(self._frame[self._start] & FLAG)

    def _split(self) -> tuple[Codec, bytes]:
        f, st = self._frame, self._start
        if self._data > st + 1:  # flags, sequence header, headers: the codec and the data
            return split_payload(bytes((f[st] & _CODEC_BITS,)) + f[self._data :])
        return split_payload(self.payload)

    @property
    def headers(self) -> dict[str, str]:
        """The message's headers (``publish(..., headers=...)``), ``{}`` without any;
        read from the frame on first use. Raises :class:`aoz.DecodeError` for a
        malformed header block."""
        if self._data <= self._start + 1:
            return {}
        return parse_headers(self._frame, self._start)

    @property
    def codec(self) -> Codec:
        """The payload's codec, from its first byte (``Codec.UNKNOWN`` for foreign payloads)."""
        return self._split()[0]

    @property
    def data(self) -> bytes:
        """The payload without aoz's header (whole for omnm and foreign payloads)."""
        return self._frame[self._data :]

    @property
    def publisher(self) -> int | None:
        """The publishing node's sequence id, or ``None`` for an unsequenced payload (an
        OZ program's, a request or reply)."""
        return PACK.unpack_from(self._frame, self._start + 1)[0] if self._sequenced() else None

    @property
    def sequence(self) -> int | None:
        """This message's number among its publisher's messages on this subject (from 1,
        wrapping at 2**32), or ``None`` for an unsequenced payload."""
        return PACK.unpack_from(self._frame, self._start + 1)[1] if self._sequenced() else None

    @property
    def frame(self) -> bytes:
        """The complete ZeroMQ frame (SPEC §1 layout)."""
        return self._frame

    @property
    def error(self) -> str | None:
        """For a reply that reports a failure (a service's handler raised): the remote
        error, ``"<type>: <message>"``; ``None`` for any other message. The request
        APIs raise :class:`aoz.ServiceError` for such replies."""
        if self.kind is not Kind.REPLY or self._frame.find(
                _ERROR_MARK, self._data, self._data + 16) < 0:
            return None  # the cheap test: an error reply is a one-key msgpack map
        try:
            value = self.decode()
        except AozError:
            return None
        remote = value.get(ERROR_KEY) if isinstance(value, dict) and len(value) == 1 else None
        return remote if isinstance(remote, str) else None

    @overload
    def decode(self, type: None = None) -> Any: ...
    @overload
    def decode(self, type: type[T]) -> T: ...
    def decode(self, type: type[T] | None = None) -> Any:
        """Decode the payload with its codec, into ``type`` when given.

        msgpack/JSON payloads give Python objects (or a ``msgspec.Struct``, dataclass,
        ...); text gives ``str``; raw bytes give ``bytes``. Raises
        :class:`aoz.DecodeError` if the payload does not fit.

        >>> quote = msg.decode(Quote)  # doctest: +SKIP
        """
        codec, body = self._split()
        return decode_payload(codec, body, type)

    def respond(self, data: object = b"", *, codec: Codec | None = None) -> Awaitable[None]:
        """Answer a request: publish ``data`` to the requester's inbox (await it).

        The reply leaves when this is called; what it returns is done at once, unless
        the reply must wait for a route (then a task of the node sends it). Not a
        coroutine of its own: one per reply was a good part of a reply's cost.

        >>> async for req in node.subscribe("SVC.time"):  # doctest: +SKIP
        ...     await req.respond({"now": time.time()})
        """
        if self.reply is None:
            raise UsageError(
                f"message on {self.subject!r} is a {self.kind.name.lower()}, not a request: "
                "only requests (node.request / request_many) can be answered"
            )
        if self._node is None:
            raise UsageError("this message is not attached to a node, so it cannot be "
                             "answered")
        return self._node.respond_to(self.reply, data, codec)

    def __repr__(self) -> str:
        size = len(self._frame) - self._start
        extra = f" reply={self.reply!r}" if self.reply else ""
        return f"<Message {self.kind.name.lower()} {self.subject!r} {size} B{extra}>"


_CODEC_BYTES = [bytes((c,)) for c in range(AOZ_CODEC_IDS)]
_PUBLISH = Kind.PUBLISH


def rows_of(msg: Message) -> list[Message] | None:
    """The messages of a packed frame's rows (:mod:`aoz._protocol.packed`), in order;
    ``None`` when ``msg`` is not packed, or when its packed payload is malformed (then
    it is delivered whole, as a foreign payload)."""
    f, st = msg._frame, msg._start
    if msg._data != st or len(f) <= st or f[st] & 0xFC != PACKED or msg.kind is not _PUBLISH:
        return None  # only publications are packed (a packed request is delivered whole)
    try:
        codec, bounds = row_bounds(f, st)
    except AozError:
        return None
    head = f[:st] + _CODEC_BYTES[codec]
    data = st + 1
    nul, at, node = msg._nul, msg.received_at, msg._node
    return [Message(head + f[a:b], nul, st, data, _PUBLISH, None, at, node)
            for a, b in pairwise(bounds)]


def expand_packed(items: list[Message]) -> list[Message]:
    """``items`` with every packed message replaced by its rows' messages (the list
    itself when none is packed: one comparison per message)."""
    for msg in items:
        if msg._data == msg._start:  # not an aoz codec byte: omnm, foreign, packed...
            break
    else:
        return items
    out: list[Message] = []
    for msg in items:
        rows = rows_of(msg) if msg._data == msg._start else None
        if rows is None:
            out.append(msg)
        else:
            out += rows
    return out
