"""The market-data example: domain types and a simulated feed (:mod:`.feed`), and the
end-to-end demo (:mod:`.demo`, ``make demo`` or ``python -m examples.marketdata`` from
the repository root). Not part of the aoz library: aoz knows nothing of quotes or bars.
"""

from .feed import DEFAULT_SYMBOLS, Bar, MarketSimulator, Quote, Trade, decode_event, run_feed

__all__ = [
    "DEFAULT_SYMBOLS", "Bar", "MarketSimulator", "Quote", "Trade", "decode_event", "run_feed",
]  # fmt: skip
