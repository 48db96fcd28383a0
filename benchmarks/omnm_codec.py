"""``python -m benchmarks.omnm_codec [--quick] [--json]``: omnm encode/decode cost per message.

A typical 10-field quote (symbol, bid, ask, sizes, last, volume, sequence, time stamp,
venue) is encoded and decoded with :mod:`aoz.omnm` and, in the same run, with msgpack
(msgspec, aoz's default codec) as the baseline: the same values as a dict, and as a
``msgspec.Struct``. The variants run in interleaved rounds (A, B, C, A, B, C...) so
machine drift hits all alike; each figure is the median over rounds (min-max shown), and
omnm's ratio to msgpack is taken round by round.

"new Message per call" builds a Message from the quote's ready Fields each call; "new
Fields and Message" also builds the ten Fields (a NamedTuple each: Python code).

omnm is measured with the codec this process runs (``aoz.omnm.implementation()``: the
compiled one where it is built) and again, in a second process with
``AOZ_PURE_PYTHON=1``, with its pure-Python twin, each against msgpack in its own run.
Every encode ratio is against msgpack encoding the prebuilt dict. Lookups: reading every
field of a message by name, index building included, per lookup, at 10, 200 and 2000
fields (the same cost at each size: O(1)).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec

from aoz import omnm
from aoz.omnm import Field, FieldType, Time

WHEN = dt.datetime(2026, 11, 23, 14, 30, 0, 123456, tzinfo=dt.UTC)

QUOTE_FIELDS = [
    Field("wIssueSymbol", 305, FieldType.STRING, "IBM"),
    Field("wBidPrice", 237, FieldType.F64, 141.52),
    Field("wAskPrice", 109, FieldType.F64, 141.57),
    Field("wBidSize", 238, FieldType.U32, 300),
    Field("wAskSize", 110, FieldType.U32, 500),
    Field("wLastPrice", 404, FieldType.F64, 141.55),
    Field("wTotalVolume", 475, FieldType.U64, 12_345_678),
    Field("MdSeqNum", 10, FieldType.U32, 987_654),
    Field("wQuoteTime", 482, FieldType.TIME, Time.from_datetime(WHEN)),
    Field("wPartId", 463, FieldType.STRING, "XNYS"),
]
QUOTE = omnm.Message(QUOTE_FIELDS)
QUOTE_DICT: dict[str, Any] = {
    f.name: (WHEN if f.type is FieldType.TIME else f.value) for f in QUOTE_FIELDS if f.name
}


class Quote(msgspec.Struct):
    wIssueSymbol: str
    wBidPrice: float
    wAskPrice: float
    wBidSize: int
    wAskSize: int
    wLastPrice: float
    wTotalVolume: int
    MdSeqNum: int
    wQuoteTime: dt.datetime
    wPartId: str


QUOTE_STRUCT = Quote(**QUOTE_DICT)
_ENC = msgspec.msgpack.Encoder()
_DEC = msgspec.msgpack.Decoder()
_DEC_STRUCT = msgspec.msgpack.Decoder(Quote)
OMNM_BYTES = omnm.encode(QUOTE)
MSGPACK_BYTES = _ENC.encode(QUOTE_DICT)
STRUCT_BYTES = _ENC.encode(QUOTE_STRUCT)

# (name, fid, type, value) of a message of n fields: U32 and STRING fields, alternating
def _wide(n: int) -> list[Field]:
    return [
        Field(f"field{i}", i + 1, FieldType.U32, i) if i % 2 else
        Field(f"field{i}", i + 1, FieldType.STRING, f"v{i}")
        for i in range(n)
    ]


WIDE = {n: _wide(n) for n in (10, 200, 2000)}
WIDE_NAMES = {n: [f.name for f in fields] for n, fields in WIDE.items()}


def _read_all(n: int) -> Callable[[], object]:
    fields = WIDE[n]
    names = WIDE_NAMES[n]

    def read() -> object:
        msg = omnm.Message(fields)  # a new message: its index is built by the first lookup
        return [msg[name] for name in names]

    return read


_QUOTE_PARTS = [tuple(f) for f in QUOTE_FIELDS]


def _new_fields() -> list[Field]:
    # what building the quote's Fields costs (Field is a NamedTuple: a Python __new__)
    return [Field(name, fid, t, value) for name, fid, t, value in _QUOTE_PARTS]


CASES: dict[str, Callable[[], object]] = {
    "omnm encode (Message, typed fields)": lambda: omnm.encode(QUOTE),
    "omnm encode (new Message per call)": lambda: omnm.encode(omnm.Message(QUOTE_FIELDS)),
    "omnm encode (new Fields and Message)": lambda: omnm.encode(omnm.Message(_new_fields())),
    "omnm encode (dict, types inferred)": lambda: omnm.encode(QUOTE_DICT),
    "msgpack encode (dict)": lambda: _ENC.encode(QUOTE_DICT),
    "msgpack encode (Struct)": lambda: _ENC.encode(QUOTE_STRUCT),
    "omnm decode (-> Message)": lambda: omnm.decode(OMNM_BYTES),
    "msgpack decode (-> dict)": lambda: _DEC.decode(MSGPACK_BYTES),
    "msgpack decode (-> Struct)": lambda: _DEC_STRUCT.decode(STRUCT_BYTES),
}
RATIOS = {
    "omnm/msgpack decode": ("omnm decode (-> Message)", "msgpack decode (-> dict)"),
    "omnm/msgpack encode": ("omnm encode (Message, typed fields)", "msgpack encode (dict)"),
    "omnm/msgpack encode, new Message": (
        "omnm encode (new Message per call)", "msgpack encode (dict)"),
    "omnm/msgpack encode, new Fields+Message": (
        "omnm encode (new Fields and Message)", "msgpack encode (dict)"),
    "omnm/msgpack encode, dict": (
        "omnm encode (dict, types inferred)", "msgpack encode (dict)"),
}
LOOKUPS = {n: _read_all(n) for n in WIDE}


def _time_per_call(fn: Callable[[], object], n: int) -> float:
    """Microseconds per call over ``n`` calls."""
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def run(rounds: int, calls: int) -> dict[str, Any]:
    """Interleaved rounds of every case; medians, ranges and per-round ratios."""
    samples: dict[str, list[float]] = {name: [] for name in CASES}
    for fn in CASES.values():  # warm-up (caches, allocator)
        _time_per_call(fn, max(1, calls // 10))
    for _ in range(rounds):
        for name, fn in CASES.items():
            samples[name].append(_time_per_call(fn, calls))
    figures = {
        name: {"us_median": statistics.median(s), "us_min": min(s), "us_max": max(s)}
        for name, s in samples.items()
    }
    ratios = {
        label: statistics.median(x / y for x, y in zip(samples[a], samples[b], strict=True))
        for label, (a, b) in RATIOS.items()
    }
    lookups = {
        str(n): statistics.median(
            _time_per_call(fn, max(1, calls // n)) / n for _ in range(rounds)
        )
        for n, fn in LOOKUPS.items()
    }
    return {
        "implementation": omnm.implementation(),
        "rounds": rounds,
        "calls_per_round": calls,
        "bytes": {"omnm": len(OMNM_BYTES), "msgpack": len(MSGPACK_BYTES)},
        "us_per_message": figures,
        "ratios": ratios,
        "us_per_lookup_by_name": lookups,
        "python": sys.version.split()[0],
        "msgspec": msgspec.__version__,
    }


def _pure_run(quick: bool) -> dict[str, Any] | None:
    """The same run in a process on the pure-Python codec (None if this one is it)."""
    if omnm.implementation() == "python":
        return None
    args = [sys.executable, "-m", "benchmarks.omnm_codec", "--json", "--this-process"]
    proc = subprocess.run(
        [*args, *(["--quick"] if quick else [])],
        env={**os.environ, "AOZ_PURE_PYTHON": "1"},
        capture_output=True, text=True, timeout=900, check=True,
    )
    result: dict[str, Any] = msgspec.json.decode(proc.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.omnm_codec", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few rounds (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--this-process", action="store_true",
                        help="measure only the codec this process runs (no pure-Python run)")
    args = parser.parse_args(argv)
    rounds, calls = (3, 2_000) if args.quick else (15, 20_000)
    result = run(rounds, calls)
    if not args.this_process:
        result["pure"] = _pure_run(args.quick)
    if args.json:
        print(msgspec.json.encode(result).decode())
        return 0
    pure = result.get("pure")
    size = result["bytes"]
    print(f"10-field quote: omnm {size['omnm']} B, msgpack {size['msgpack']} B; "
          f"{rounds} interleaved rounds x {calls} calls; omnm codec: "
          f"{result['implementation']}" + (" (pure-Python figures beside)" if pure else ""))
    print(f"{'case':<38} {'us/msg':>8}  {'min-max':>15}" + (f"  {'pure':>8}" if pure else ""))
    for name, f in result["us_per_message"].items():
        span = f"{f['us_min']:.2f}-{f['us_max']:.2f}"
        other = f"  {pure['us_per_message'][name]['us_median']:8.2f}" if pure else ""
        print(f"{name:<38} {f['us_median']:8.2f}  {span:>15}{other}")
    for label, ratio in result["ratios"].items():
        other = f"  {pure['ratios'][label]:7.1f}x" if pure else ""
        print(f"{label:<38} {ratio:7.2f}x  {'':>15}{other}")
    for n, us in result["us_per_lookup_by_name"].items():
        other = f"  {pure['us_per_lookup_by_name'][n]:8.3f}" if pure else ""
        every = f"(all {n}: {us * int(n):.0f} us)"
        print(f"{'lookup by name, ' + n + ' fields (us each)':<38} {us:8.3f}  {every:>15}{other}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
