"""One error map at the ZeroMQ edge: ``zmq.ZMQError`` in, an aoz error out.

Owns the single decision of which aoz error a ZeroMQ failure becomes, and the words
that tell the user what to do about it. Every module that calls a socket wraps the
call in :func:`mapped` (raise) or :func:`tolerated` (a failure that is harmless
there, e.g. a disconnect while closing: logged, never raised), so a ZMQError is
handled one way everywhere. ``zmq.Again`` from a non-blocking ``recv`` is flow
control ("nothing more to read"), not an error, and is caught where it happens.

The map::

    EINVAL              -> ConfigError     a value ZeroMQ cannot accept (endpoint, option)
    ETERM, ENOTSOCK     -> ClosedError     the context or socket is already closed
    anything else       -> TransportError  address in use, unreachable, unsupported...

Touches nothing but the exception: no sockets are created or closed here.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import zmq

from ..errors import AozError, ClosedError, ConfigError, TransportError

__all__ = ["drain_error", "mapped", "tolerated", "translate"]

log = logging.getLogger("aoz.zmq")

# What to do about the failures people actually meet; others get ZeroMQ's own words.
_HINTS: dict[int, str] = {
    zmq.EINVAL: "ZeroMQ rejected a value; check the endpoint (tcp://host:port or "
                "ipc:///path) and the settings",
    zmq.ETERM: "the ZeroMQ context is terminated; the node or daemon was closed",
    zmq.ENOTSOCK: "the socket is closed; the node or daemon was closed",
    zmq.EADDRINUSE: "the address is in use; is another node or daemon bound there? "
                    "choose another port (or port 0 / * for an ephemeral one)",
    zmq.EADDRNOTAVAIL: "the address is not local to this host; bind to one of this "
                       "host's interfaces (or 0.0.0.0)",
    zmq.EPROTONOSUPPORT: "unsupported transport; use tcp:// (or ipc:// between aoz nodes)",
    errno.ENODEV: "no such network interface; check the host part of the endpoint",
    errno.ENOENT: "no such file or directory; check the ipc:// path",
    errno.EACCES: "permission denied; check the ipc:// path's directory or the port "
                  "(ports below 1024 need privileges)",
    zmq.EAGAIN: "the operation would block; the peer is slow or the queue is full",
}


def translate(exc: zmq.ZMQError, what: str) -> AozError:
    """The aoz error for ``exc``, raised while doing ``what`` (e.g. "cannot bind ...").

    The caller raises it ``from exc``. The message is ``"<what>: <zmq's words>; <what
    to do>"``.
    """
    code = exc.errno
    hint = _HINTS.get(code) if code is not None else None
    message = f"{what}: {exc.strerror}" + (f"; {hint}" if hint else "")
    if code == zmq.EINVAL:
        return ConfigError(message)
    if code in (zmq.ETERM, zmq.ENOTSOCK):
        return ClosedError(message)
    return TransportError(message)


@contextmanager
def mapped(what: str) -> Iterator[None]:
    """Run ZeroMQ calls; a ``ZMQError`` leaves as :func:`translate`'s aoz error.

    >>> import zmq
    >>> with mapped("cannot bind"):  # doctest: +SKIP
    ...     sock.bind("tcp://256.0.0.1:1")
    """
    try:
        yield
    except zmq.ZMQError as exc:
        raise translate(exc, what) from exc


@contextmanager
def tolerated(what: str, why: str) -> Iterator[None]:
    """Run ZeroMQ calls whose failure is harmless here (``why`` says why); log, not raise.

    The failure is logged at debug level as its translated aoz error, so the log reads
    the same as a raised error would.
    """
    try:
        yield
    except zmq.ZMQError as exc:
        log.debug("%s (ignored: %s)", translate(exc, what), why)


def drain_error(exc: zmq.ZMQError, what: str, *, closing: bool) -> None:
    """A socket error in a drain (a reader's callback): ignored while its owner closes
    (or on a socket already closed), else raised as :func:`translate`'s error, which
    ends the reader and fails the node."""
    if closing or exc.errno in (zmq.ENOTSOCK, zmq.ETERM):
        return
    raise translate(exc, f"{what} failed") from exc
