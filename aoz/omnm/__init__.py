"""OpenMAMA's omnm payload format: what OZ programs put in their messages. Pure codec.

OZ programs send OpenMAMA messages through the OpenMAMA-omnm payload bridge; its bytes
start with ``'O'`` (the payload id) and hold typed fields, each with a name, a field id
(fid) and a value. aoz reads and writes them byte for byte::

    from aoz import omnm

    msg = omnm.Message({"wIssueSymbol": "IBM", "wBidPrice": 135.25})
    msg.add("wBidSize", 300, fid=102, type=omnm.FieldType.U32)  # fix the width and fid
    data = omnm.encode(msg)               # b"O\\x01\\x00..." - what OpenMAMA writes
    back = omnm.decode(data)              # raises aoz.DecodeError on malformed input
    back["wBidPrice"], back[102]          # by name or by fid (the first match wins)

=================  ===========================================  =======================
omnm type          Python value (decode gives / encode takes)   inferred from
=================  ===========================================  =======================
BOOL               ``bool`` (other byte values: ``int``)        ``bool``
CHAR               1-character ``str`` (code point < 256)       (``Typed`` only)
I8 ... U64         ``int``                                      ``int``: the narrowest
                                                                type (unsigned if >= 0)
F32, F64           ``float``                                    ``float`` -> F64
STRING             ``str`` (UTF-8, no NUL inside)               ``str``
OPAQUE             ``bytes``                                    ``bytes``/``bytearray``
TIME               :class:`Time`                                aware ``datetime``, Time
PRICE              :class:`Price`                               :class:`Price`
MSG                :class:`Message`                             ``dict``, Message
VECTOR_*           ``list`` of the element values               ``list`` of one kind
=================  ===========================================  =======================

Widths: OpenMAMA getters accept any integer field no wider than themselves, so an
inferred int takes the narrowest type; fix a width with ``Typed(FieldType.I64, n)`` in
a dict, ``Message.add(..., type=...)`` or a :class:`Field`. OpenMAMA's vector getters
do not convert at all: give vectors the exact type OpenMAMA readers expect.

OpenMAMA quirks aoz follows or guards against:

- VECTOR_MSG elements of unequal encoded size are misread by OpenMAMA (it reads every
  element with the first one's length): :func:`encode` warns with
  :class:`OpenMamaCompatWarning`; :func:`decode` reads them correctly.
- TIME keeps whole microseconds and seconds in 0..2**32-1 (1970..2106) and no time
  zone; encoding anything else raises. Like OpenMAMA's reader, :func:`decode` adds the
  HAS_DATE hint to a TIME more than one day past the epoch.
- PRICE drops the currency; its ``hints`` byte keeps precision and the valid flag.
- A STRING ends at its first NUL; a field needs a name or a non-zero fid.

Speed: the codec is compiled where the package was built with a C compiler (about
2x msgspec's msgpack for a 10-field quote, both ways); elsewhere, and with
``AOZ_PURE_PYTHON=1``, its pure-Python twin runs, with the same bytes, messages and
errors. :func:`implementation` says which. Lookups by name or fid cost O(1).
"""

from ._backend import decode, encode, implementation
from ._codec import MAX_DEPTH
from ._json import format_fields, from_json, to_json, value_to_json
from ._model import (
    Field,
    FieldType,
    Message,
    OpenMamaCompatWarning,
    Price,
    Time,
    Typed,
    field_from_value,
    narrowest_int_type,
)

__all__ = [
    "MAX_DEPTH",
    "Field",
    "FieldType",
    "Message",
    "OpenMamaCompatWarning",
    "Price",
    "Time",
    "Typed",
    "decode",
    "encode",
    "field_from_value",
    "format_fields",
    "from_json",
    "implementation",
    "narrowest_int_type",
    "to_json",
    "value_to_json",
]
