"""Which omnm codec runs: the compiled one or its pure-Python twin. Chosen once, here.

Two implementations of :func:`encode`, :func:`decode` and ``Message.__init__`` (for a
list of ready Fields) with one contract: the pure ones in ``_codec.py`` and
``_model.py``, the compiled ones in ``_fast.pyx`` (built with the package where a C
compiler and Cython exist; see ``setup.py``). They give the same bytes, the same
messages and the same errors (``tests/omnm/test_twins.py`` feeds both the same input).
The compiled ones are used when the module imports and matches this source (``ABI`` and
the format's numbers it has built in), unless ``AOZ_PURE_PYTHON=1``, as pyzmq's
``select_backend`` picks its backend. This module owns that choice and nothing else.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, Final, Literal, NamedTuple

from ._codec import MAX_DEPTH
from ._codec import decode as _decode_py
from ._codec import encode as _encode_py
from ._model import FieldsLike, FieldType, Message

__all__ = ["IMPLEMENTATION", "Backend", "decode", "encode", "implementation", "select_backend"]

log = logging.getLogger("aoz.omnm")

#: bump with any change to the compiled functions' contract (and _fast.ABI with it)
OMNM_ABI: Final = 1

# the type bytes the compiled codec treats one by one (the rest go to the shared writers
# and readers of _codec)
_BUILT_IN_TYPES: Final = (
    "MSG", "OPAQUE", "STRING", "BOOL", "CHAR", "I8", "U8", "I16", "U16", "I32", "U32",
    "I64", "U64", "F32", "F64", "TIME", "PRICE", "VECTOR_MSG",
)


class Backend(NamedTuple):
    """One twin's functions."""

    name: Literal["compiled", "python"]
    encode: Callable[[FieldsLike], bytes]
    decode: Callable[[bytes | bytearray | memoryview], Message]
    #: Message.__init__ for a list of ready Fields (None: the one in _model.py)
    message_init: Callable[..., None] | None


PURE: Final = Backend("python", _encode_py, _decode_py, None)


def constants() -> dict[str, Any]:
    """The format's numbers that the compiled module has built in, from this source."""
    return {
        "MAX_DEPTH": MAX_DEPTH,
        "U32_MAX": 0xFFFF_FFFF,
        "TYPES": tuple(sorted((n, int(FieldType[n])) for n in _BUILT_IN_TYPES)),
    }


def select_backend() -> Backend:
    """The twin to use: the compiled one (``aoz.omnm._fast``) when it is built, current
    and wanted, else the pure one (``aoz.omnm._codec``)."""
    if os.environ.get("AOZ_PURE_PYTHON", "") not in ("", "0"):
        log.debug("omnm codec: pure Python (AOZ_PURE_PYTHON is set)")
        return PURE
    try:
        from ._fast import ABI, CONSTANTS
    except ImportError as exc:
        log.debug("omnm codec: pure Python (the compiled module is not built: %s)", exc)
        return PURE
    except Exception as exc:  # built, but does not fit this source: never fail the import
        log.warning("aoz.omnm._fast does not load (%s: %s); using the pure-Python omnm codec",
                    type(exc).__name__, exc)
        return PURE
    if ABI != OMNM_ABI or constants() != CONSTANTS:
        log.warning("aoz.omnm._fast is out of date with this source tree (rebuild it with "
                    "`pip install -e .`); using the pure-Python omnm codec")
        return PURE
    from ._fast import decode as decode_c
    from ._fast import encode as encode_c
    from ._fast import message_init

    log.debug("omnm codec: compiled")
    return Backend("compiled", encode_c, decode_c, message_init)


_backend: Final = select_backend()
#: which omnm codec runs: "compiled" or "python"
IMPLEMENTATION: Final[Literal["compiled", "python"]] = _backend.name
encode: Final[Callable[[FieldsLike], bytes]] = _backend.encode
decode: Final[Callable[[bytes | bytearray | memoryview], Message]] = _backend.decode
if _backend.message_init is not None:
    encode.__doc__ = _encode_py.__doc__  # one documentation for both twins
    decode.__doc__ = _decode_py.__doc__
    # a Message of ready Fields, built per message to send, without a Python frame
    Message.__init__ = _backend.message_init  # type: ignore[method-assign]


def implementation() -> Literal["compiled", "python"]:
    """Which omnm codec this process runs: ``"compiled"`` (``aoz.omnm._fast``, built with
    the package) or ``"python"`` (the pure twin: where it could not be built, or with
    ``AOZ_PURE_PYTHON=1``). Both give the same bytes, messages and errors.

    >>> implementation() in ("compiled", "python")
    True
    """
    return IMPLEMENTATION
