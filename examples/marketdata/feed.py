"""A simulated market-data feed and the typed messages it publishes.

Shared by the demo, the pipeline tests and the examples::

    MD.<venue>.<symbol>   Quote or Trade (msgpack, tagged: {"type": "quote"|"trade", ...})
    BARS.<symbol>         Bar, published back by the Spark job through the ``aoz`` sink

Quotes and trades travel on the same subject and are told apart by the tag field
``type``; decode either with ``msgspec.msgpack.decode(msg.data, type=MarketEvent)`` or
:func:`decode_event`. Every event carries ``seq`` (per-feed sequence number), ``ts``
(send time, float seconds since the epoch, UTC) and ``sender`` (the feed's name): the
fields :class:`aoz.record.Recorder` turns into its ``sequence``, ``send_ts`` and
``sender`` columns, since aoz's wire frame has none of them.

:class:`MarketSimulator` is pure (seeded random walk, time passed in); :func:`run_feed`
is the I/O shell that publishes its events on a node at a given rate.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Final

import anyio
import msgspec

if TYPE_CHECKING:
    from aoz import Node

__all__ = [
    "DEFAULT_SYMBOLS",
    "DEFAULT_VENUES",
    "Bar",
    "MarketEvent",
    "MarketSimulator",
    "Quote",
    "Trade",
    "decode_event",
    "run_feed",
    "subject_for",
]

DEFAULT_VENUES: Final = ("XNYS", "XNAS", "BATS")
DEFAULT_SYMBOLS: Final = (
    "AAPL", "MSFT", "GOOG", "AMZN", "META", "NVDA", "TSLA", "IBM", "ORCL", "INTC",
    "AMD", "CSCO", "ADBE", "CRM", "NFLX", "PYPL", "QCOM", "TXN", "AVGO", "MU",
    "JPM", "BAC", "C", "WFC", "GS", "MS", "V", "MA", "KO", "PEP",
    "XOM", "CVX", "PFE", "MRK", "JNJ", "UNH",
)  # fmt: skip


class Quote(msgspec.Struct, tag="quote", kw_only=True, frozen=True):
    """Best bid and offer of one symbol on one venue."""

    symbol: str
    venue: str
    bid: float
    ask: float
    bid_size: int
    ask_size: int
    seq: int  #: the feed's sequence number (all subjects)
    ts: float  #: send time, seconds since the epoch (UTC)
    sender: str = ""


class Trade(msgspec.Struct, tag="trade", kw_only=True, frozen=True):
    """One execution."""

    symbol: str
    venue: str
    price: float
    size: int
    seq: int
    ts: float
    sender: str = ""


MarketEvent = Quote | Trade


class Bar(msgspec.Struct, kw_only=True, frozen=True):
    """An OHLCV bar as :func:`aoz.spark.jobs.ohlcv_bars` computes and the sink publishes it.

    ``last_ts`` is the send time of the bar's last trade: a consumer measures the
    pipeline's publish-to-bar latency as ``received_at - last_ts``.
    """

    symbol: str
    start: datetime
    end: datetime
    open: float
    high: float
    low: float
    close: float
    volume: int
    vwap: float
    trades: int
    last_ts: datetime | None = None


_EVENT_DECODER: Final[msgspec.msgpack.Decoder[Quote | Trade]] = msgspec.msgpack.Decoder(MarketEvent)


def decode_event(data: bytes) -> Quote | Trade:
    """Decode a msgpack quote/trade body (``msg.data``). Raises ``msgspec.ValidationError``."""
    return _EVENT_DECODER.decode(data)


def subject_for(venue: str, symbol: str) -> str:
    return f"MD.{venue}.{symbol}"


class _Book:
    __slots__ = ("mid", "spread")

    def __init__(self, mid: float, spread: float) -> None:
        self.mid = mid
        self.spread = spread


class MarketSimulator:
    """A seeded random walk of mid prices that yields quotes and trades. Pure: no clock.

    >>> sim = MarketSimulator(["IBM"], seed=1, sender="t")
    >>> subject, event = sim.next_event(now=1_700_000_000.0)
    >>> subject.startswith("MD.") and event.symbol == "IBM"
    True
    """

    def __init__(
        self,
        symbols: Sequence[str] = DEFAULT_SYMBOLS,
        venues: Sequence[str] = DEFAULT_VENUES,
        *,
        seed: int | None = None,
        trade_ratio: float = 0.3,
        sender: str = "sim",
    ) -> None:
        if not symbols or not venues:
            raise ValueError("the simulator needs at least one symbol and one venue")
        self.symbols = list(symbols)
        self.venues = list(venues)
        self.sender = sender
        self.trade_ratio = trade_ratio
        self._rng = random.Random(seed)
        self._books = {
            s: _Book(mid=round(self._rng.uniform(20, 500), 2), spread=0.01) for s in self.symbols
        }
        self.seq = 0

    def next_event(self, now: float) -> tuple[str, Quote | Trade]:
        """The next (subject, event), stamped with ``now`` as its send time."""
        rng = self._rng
        symbol = rng.choice(self.symbols)
        venue = rng.choice(self.venues)
        book = self._books[symbol]
        book.mid = max(1.0, book.mid * math.exp(rng.gauss(0.0, 0.0005)))
        book.spread = max(0.01, round(book.mid * rng.uniform(0.0001, 0.0005), 2))
        bid = round(book.mid - book.spread / 2, 2)
        ask = round(bid + book.spread, 2)
        self.seq += 1
        event: Quote | Trade
        if rng.random() < self.trade_ratio:
            price = ask if rng.random() < 0.5 else bid
            event = Trade(
                symbol=symbol, venue=venue, price=price, size=rng.randint(1, 20) * 100,
                seq=self.seq, ts=now, sender=self.sender,
            )  # fmt: skip
        else:
            event = Quote(
                symbol=symbol, venue=venue, bid=bid, ask=ask,
                bid_size=rng.randint(1, 50) * 100, ask_size=rng.randint(1, 50) * 100,
                seq=self.seq, ts=now, sender=self.sender,
            )  # fmt: skip
        return subject_for(venue, symbol), event


async def run_feed(
    node: Node,
    simulator: MarketSimulator,
    *,
    rate: float = 1000.0,
    count: int | None = None,
    duration: float | None = None,
) -> int:
    """Publish the simulator's events at about ``rate`` per second; return how many.

    Stops after ``count`` events or ``duration`` seconds (whichever first), or when
    cancelled. Events are sent in small bursts every 10 ms so high rates cost few
    wake-ups; each event's ``ts`` is the time it was handed to the node.
    """
    if rate <= 0:
        raise ValueError("rate must be > 0 events per second")
    start = time.monotonic()
    deadline = None if duration is None else start + duration
    sent = 0
    tick = 0.01
    while (count is None or sent < count) and (deadline is None or time.monotonic() < deadline):
        due = int((time.monotonic() - start) * rate) + 1
        if count is not None:
            due = min(due, count)
        while sent < due:
            subject, event = simulator.next_event(time.time())
            node.publish_nowait(subject, event)
            sent += 1
        await anyio.sleep(tick)  # pacing, not synchronisation
    return sent
