"""Types of the compiled hot path (aoz/_speedups.pyx); see aoz/dataplane.py."""

from typing import Any

ABI: int
BATCH: int
CONSTANTS: dict[str, int]

def drain_sub(plane: Any, sock: Any) -> int: ...

class Entry:
    header: bytes
    prefix: bytes
    seq: int
    def __init__(self, header: bytes, prefix: bytes) -> None: ...

class Sender:
    pub: Any
    messages_out: int
    bytes_out: int
    def __init__(self, builder: Any) -> None: ...
    def publish(self, subject: str, data: object, codec: Any) -> bool: ...
    def send(self, frame: bytes | bytearray | memoryview) -> None: ...
    def frames(self, subject: str, items: Any, codec: Any) -> list[bytes]: ...
    def send_batch(self, frames: Any, start: int = 0) -> int: ...
