"""aoz's exceptions: one base class, names by meaning.

Every error aoz raises on purpose derives from :class:`AozError`, so
``except aoz.AozError`` catches them all. Foreign exceptions (``zmq.ZMQError``,
``msgspec`` errors, ``UnicodeDecodeError``...) are translated where they enter aoz.

::

    AozError
    ├── UsageError             aoz was called wrongly: a bad argument, or a call the object's
    │   │                      state does not allow (also ValueError); the message says what
    │   │                      to do instead
    │   ├── UsageTypeError     an argument of the wrong type (also TypeError)
    │   ├── SubjectError       a subject or subscription pattern is invalid
    │   └── ConfigError        a setting, config file or endpoint is invalid
    ├── DecodeError            bytes from the network are not a valid frame or payload
    ├── EncodeError            a value cannot be encoded with the chosen codec (also TypeError)
    ├── ClosedError            the node (or subscription) is closed
    ├── RequestError
    │   ├── RequestTimeout     no (more) replies before the deadline (also TimeoutError)
    │   └── NoResponders       nobody subscribes to the request's subject
    ├── NamingTimeout          no nsd forwarded our announcement in time (also TimeoutError)
    ├── WaitTimeout            waiting for a message/subscriber/peer ran out (also TimeoutError)
    ├── TransportError         ZeroMQ refused an operation (bad endpoint, address in use...)
    ├── WouldBlock             publish_nowait on a blocking node: a subscriber's queue is full
    ├── MessagesLost           a subscription is losing messages (error_cb's report)
    └── ServiceError           a named service call failed on the remote side
"""

from __future__ import annotations

__all__ = [
    "AozError",
    "ClosedError",
    "ConfigError",
    "DecodeError",
    "EncodeError",
    "MessagesLost",
    "NamingTimeout",
    "NoResponders",
    "RequestError",
    "RequestTimeout",
    "ServiceError",
    "SubjectError",
    "TransportError",
    "UsageError",
    "UsageTypeError",
    "WaitTimeout",
    "WouldBlock",
]


class AozError(Exception):
    """Base class of every error aoz raises."""


class UsageError(AozError, ValueError):
    """aoz was called wrongly: a bad argument value, or a call that the object's state
    does not allow (starting twice, using what is not running). Fix the calling code;
    the message says how.

    >>> isinstance(UsageError("max_replies must be >= 1"), ValueError)
    True
    """


class UsageTypeError(UsageError, TypeError):
    """An argument of the wrong type (also a :class:`TypeError`)."""


class DecodeError(AozError, ValueError):
    """Bytes could not be decoded as a frame or payload.

    ``what`` names the thing being decoded (``"frame"``, ``"naming frame"``...).
    """

    def __init__(self, message: str, *, what: str = "frame") -> None:
        super().__init__(message)
        self.what = what


class EncodeError(AozError, TypeError):
    """A value could not be encoded as a payload with the chosen codec."""


class SubjectError(UsageError):
    """A subject or subscription pattern is not valid."""

    def __init__(self, message: str, *, subject: str | bytes | None = None) -> None:
        super().__init__(message)
        self.subject = subject


class ConfigError(UsageError):
    """A setting is invalid, or a configuration source could not be read."""


class ClosedError(AozError):
    """The node or subscription has been closed; it cannot be used any more."""


class RequestError(AozError):
    """A request did not get the answer it asked for."""

    def __init__(self, message: str, *, subject: str) -> None:
        super().__init__(message)
        self.subject = subject


class RequestTimeout(RequestError, TimeoutError):
    """No reply (or not enough replies) arrived before the request's deadline."""

    def __init__(self, message: str, *, subject: str, timeout: float) -> None:
        super().__init__(message, subject=subject)
        self.timeout = timeout


class NoResponders(RequestError):
    """Nobody subscribes to the request's subject, so no reply can come."""


class NamingTimeout(AozError, TimeoutError):
    """No naming daemon forwarded this node's announcement within the allowed time."""

    def __init__(self, message: str, *, endpoints: list[str], timeout: float) -> None:
        super().__init__(message)
        self.endpoints = endpoints
        self.timeout = timeout


class WaitTimeout(AozError, TimeoutError):
    """Waiting for a message, a subscriber, a peer or a service took longer than allowed."""

    def __init__(self, message: str, *, timeout: float) -> None:
        super().__init__(message)
        self.timeout = timeout


class TransportError(AozError):
    """ZeroMQ refused an operation (invalid endpoint, address in use, ...)."""


class WouldBlock(AozError):
    """A node with ``send_policy="block"`` could not queue a message without waiting.

    Raised by ``publish_nowait``; ``await node.publish(...)`` waits instead. The message
    was not sent (nothing was dropped).
    """

    def __init__(self, message: str, *, subject: str | None = None) -> None:
        super().__init__(message)
        self.subject = subject


class MessagesLost(AozError):
    """A subscription is losing messages (what ``aoz.connect(error_cb=...)`` is told,
    at most every 5 s per subscription): ``dropped`` by its own full queue, ``lost``
    upstream (sequence gaps: a publisher's full queue, a cut link). Totals so far."""

    def __init__(self, message: str, *, pattern: str, dropped: int, lost: int) -> None:
        super().__init__(message)
        self.pattern = pattern
        self.dropped = dropped
        self.lost = lost


class ServiceError(AozError):
    """A service (a named one, or any responder of a request) answered with an error.

    ``service`` is the subject; ``remote`` the remote error as it was sent
    (``"ValueError: feed down"``), split into ``remote_type`` and ``remote_message``.
    """

    def __init__(self, message: str, *, service: str, remote: str | None = None) -> None:
        super().__init__(message)
        self.service = service
        self.remote = remote
        head, sep, tail = (remote or "").partition(": ")
        self.remote_type = head if sep and head.isidentifier() else None
        self.remote_message = tail if self.remote_type else (remote or "")

    @classmethod
    def from_reply(cls, service: str, remote: str) -> ServiceError:
        """The error for an error reply (``Message.error``) to a request on ``service``."""
        return cls(f"service {service!r} failed: {remote}", service=service, remote=remote)
