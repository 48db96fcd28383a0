"""Coverage-guided fuzzing of every decoder with atheris, run by hand (not in CI)::

    pip install atheris
    python tests/hostile/fuzz_atheris.py -max_total_time=300

Any exception that is not an :class:`aoz.errors.AozError` is a finding: atheris stops
and writes the input to ``crash-*``. The first input byte picks the decoder.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from aoz._discovery.udp import decode_datagram
from aoz._protocol.codecs import decode_payload, split_payload
from aoz._protocol.frames import decode_frame, parse_handle
from aoz._protocol.inbox import InboxTable
from aoz._protocol.naming import decode_beacon, decode_naming
from aoz.errors import AozError

_TABLE: InboxTable[object] = InboxTable("3669840e-d043-11ea-adc2-fcaa146e6b01")


def _payload(data: bytes) -> Any:
    return decode_payload(*split_payload(data))


DECODERS: list[Callable[[bytes], Any]] = [
    decode_frame,
    parse_handle,
    _TABLE.serial_of,
    decode_naming,
    decode_beacon,
    decode_datagram,
    _payload,
]


def one_input(data: bytes) -> None:
    if not data:
        return
    decoder = DECODERS[data[0] % len(DECODERS)]
    try:
        decoder(data[1:])
    except AozError:
        pass


def main() -> None:  # pragma: no cover - needs atheris
    import atheris  # type: ignore[import-not-found]

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
