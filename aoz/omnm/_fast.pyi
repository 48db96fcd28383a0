"""Types of the compiled omnm codec (aoz/omnm/_fast.pyx); see aoz/omnm/_backend.py."""

from typing import Any

from ._model import FieldsLike, Message

ABI: int
CONSTANTS: dict[str, Any]

def encode(message: FieldsLike) -> bytes: ...
def decode(data: bytes | bytearray | memoryview) -> Message: ...
def message_init(self: Message, fields: FieldsLike | None = None) -> None: ...
