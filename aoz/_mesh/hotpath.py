"""Which hot path runs: the compiled twin (``aoz/_mesh/_speedups.pyx``) or the pure one
(``aoz/_mesh/_hotpath.py``), chosen once, at import, in this one place.

The compiled module is used when it imports and its ``ABI`` and ``CONSTANTS`` match
the pure twin's (the contract and the protocol's numbers it has built in), unless
``AOZ_PURE_PYTHON=1`` asks for the pure one. A module that does not match is a stale
build: a warning names the fix and the pure twin runs. Everything else imports the
hot path from here (``drain_sub``, ``Sender``, ``Entry``, ``CacheStore``, ``Inbox``,
``DONE``), never from either twin; the compiled twin also gives
``Subscription.__anext__`` (set here, once).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import Any, cast

from . import _hotpath
from .subscription import Subscription

__all__ = ["DONE", "HOT_PATH", "CacheStore", "Entry", "Inbox", "Sender", "drain_sub",
           "implementation", "node_publish"]

log = logging.getLogger("aoz.node")


def _compiled() -> ModuleType | None:
    """aoz._mesh._speedups when it is built, current and wanted, else None."""
    if os.environ.get("AOZ_PURE_PYTHON", "") not in ("", "0"):
        log.debug("aoz hot path: pure Python (AOZ_PURE_PYTHON is set)")
        return None
    try:
        from . import _speedups
    except ImportError as exc:
        log.debug("aoz hot path: pure Python (the compiled module is not built: %s)", exc)
        return None
    if _speedups.ABI != _hotpath.ABI or _speedups.CONSTANTS != _hotpath.CONSTANTS:
        log.warning("aoz._mesh._speedups is out of date with this source tree (rebuild it with "
                    "`pip install -e .`); using the pure-Python hot path")
        return None
    log.debug("aoz hot path: compiled (%s)", _speedups.__file__)
    return _speedups


_module: ModuleType = _compiled() or _hotpath

#: which implementation of the hot path runs: "compiled" or "python"
HOT_PATH = "python" if _module is _hotpath else "compiled"
drain_sub: Callable[[_hotpath.ReceiveSide, Any], int] = _module.drain_sub
#: the FrameBuilder entries that go with Sender (the compiled Sender reads them from C)
Entry: Callable[[bytes, bytes], _hotpath.Entry] = _module.Entry
Sender: type[_hotpath.Sender] = cast(type[_hotpath.Sender], _module.Sender)
#: the publisher cache's store (aoz._mesh.cache), which a Sender keeps its frames in
CacheStore: type[_hotpath.CacheStore] = cast(type[_hotpath.CacheStore], _module.CacheStore)
#: the request side: open requests, their deadlines, and replies to them
Inbox: type[_hotpath.Inbox] = cast(type[_hotpath.Inbox], _module.Inbox)
#: ``Node.publish`` of the compiled twin (aoz._mesh.node puts it in place), or None
node_publish: Callable[..., Any] | None = _module.node_publish
#: what a publish or a reply returns when it is already sent (awaiting it gives None)
DONE: Coroutine[Any, Any, None] = _module.DONE
# the compiled twin's Subscription.__anext__ (a queued message needs no coroutine); the
# pure twin keeps the subscription's own
if _module.subscription_anext is not None:
    Subscription.__anext__ = _module.subscription_anext  # type: ignore[method-assign]


def implementation() -> ModuleType:
    """The module that runs the hot path (``aoz._mesh._speedups`` or ``aoz._mesh._hotpath``)."""
    return _module
