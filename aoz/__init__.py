"""aoz: asyncio-native, brokerless messaging over ZeroMQ, wire-compatible with OZ.

    import aoz

    async with aoz.connect() as node:                    # joins via the nsd at 127.0.0.1:5756
        await node.publish("MD.NYSE.IBM", {"bid": 1.0})
        async with node.subscribe("MD.NYSE.*") as sub:
            async for msg in sub:
                print(msg.subject, msg.decode())
        reply = await node.request("SVC.quote", b"IBM", timeout=1.0)

See docs/ARCHITECTURE.md for the layout and README.md for more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import omnm, queues
from ._discovery.peers import Peer, PeerEvent
from ._mesh.blocking import BlockingNode, BlockingSubscription
from ._mesh.message import Message
from ._mesh.node import Node, NodeStatistics, ReplyStream, connect
from ._mesh.services import Service, call, check_reply, serve, wait_for_service
from ._mesh.subscription import Subscription, SubscriptionStatistics
from ._protocol.codecs import Codec, Verbatim
from ._protocol.frames import Kind
from .config import Settings, load_settings
from .errors import (
    AozError,
    ClosedError,
    ConfigError,
    DecodeError,
    EncodeError,
    MessagesLost,
    NamingTimeout,
    NoResponders,
    RequestError,
    RequestTimeout,
    ServiceError,
    SubjectError,
    TransportError,
    UsageError,
    UsageTypeError,
    WaitTimeout,
    WouldBlock,
)

# No NullHandler on purpose: aoz logs a WARNING when data is lost (a subscription's full
# queue, a sequence gap) and an ERROR when a service's handler fails; an application
# that configured no logging should still see those on stderr (Python's last-resort
# handler prints WARNING and above), not have them vanish. Configure the "aoz" logger
# to route or silence them; aoz.connect(error_cb=...) reports losses to code.

if TYPE_CHECKING:
    from ._discovery.broker import Broker
    from ._discovery.nsd import NamingDaemon


def __getattr__(name: str) -> Any:
    # The daemons are imported on first use: most programs only run nodes.
    if name == "NamingDaemon":
        from ._discovery.nsd import NamingDaemon

        return NamingDaemon
    if name == "Broker":
        from ._discovery.broker import Broker

        return Broker
    raise AttributeError(f"module 'aoz' has no attribute {name!r}")


def _version() -> str:
    # One place for the version: pyproject.toml, read back from the installed metadata.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aoz")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


__version__ = _version()


def hot_path() -> str:
    """Which implementation of the data plane's hot path this process runs:
    ``"compiled"`` (aoz._mesh._speedups, built with the package) or ``"python"`` (the
    pure-Python twin: where the extension could not be built, or with
    ``AOZ_PURE_PYTHON=1``). Both behave the same; the compiled one is faster.
    ``node.statistics().hot_path`` says the same."""
    from ._mesh.hotpath import HOT_PATH

    return HOT_PATH


def __dir__() -> list[str]:
    # `dir(aoz)` shows the public API only, not the modules and helpers behind it.
    return sorted(__all__)


__all__ = [
    "AozError",
    "BlockingNode",
    "Broker",
    "BlockingSubscription",
    "ClosedError",
    "Codec",
    "ConfigError",
    "DecodeError",
    "EncodeError",
    "Kind",
    "Message",
    "NamingDaemon",
    "NamingTimeout",
    "NoResponders",
    "Node",
    "NodeStatistics",
    "Peer",
    "PeerEvent",
    "ReplyStream",
    "RequestError",
    "RequestTimeout",
    "Service",
    "MessagesLost",
    "ServiceError",
    "Settings",
    "SubjectError",
    "Subscription",
    "SubscriptionStatistics",
    "TransportError",
    "UsageError",
    "UsageTypeError",
    "Verbatim",
    "WaitTimeout",
    "WouldBlock",
    "__version__",
    "call",
    "check_reply",
    "connect",
    "hot_path",
    "load_settings",
    "queues",
    "omnm",
    "serve",
    "wait_for_service",
]
