"""AsyncAPI documents from what a node serves and publishes. Pure (no I/O).

A :class:`Catalog` lists a node's services (filled in by :func:`aoz.serve`, with the
reply type read from the handler's return annotation, or given) and its typed
publications (declared with :meth:`Catalog.publishes`); :func:`document` turns it into
an AsyncAPI 3.0 document whose payload schemas are msgspec's JSON schemas of the types
(``msgspec.Struct``, dataclasses, ``TypedDict``...). Every node has one,
``node.catalog``; the FastAPI integration serves it (``aoz.fastapi.asyncapi_route``)
and ``aoz asyncapi MODULE:ATTRIBUTE`` prints the document of a catalog or node.

    node.catalog.publishes("MD.*.IBM", Quote, summary="IBM quotes, every exchange")
    async with aoz.serve(node, "SVC.quote", quote):   # def quote(req) -> Quote
        print(aoz.asyncapi.document(node.catalog, title="quotes"))
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

import msgspec

from .errors import UsageError

__all__ = ["Catalog", "Publication", "ServiceEntry", "document", "reply_type_of"]

ASYNCAPI_VERSION = "3.0.0"


class Publication(msgspec.Struct, frozen=True):
    """A subject (or pattern) this node publishes on, and the type of its payload."""

    subject: str
    type: Any
    summary: str = ""


class ServiceEntry(msgspec.Struct, frozen=True):
    """A service this node answers: its request and reply types (``None``: unknown)."""

    name: str
    request: Any = None
    reply: Any = None
    queue: str | None = None
    summary: str = ""


class Catalog:
    """What a node serves and publishes (see the module docstring)."""

    def __init__(self) -> None:
        self.publications: dict[str, Publication] = {}
        self.services: dict[str, ServiceEntry] = {}

    def publishes(self, subject: str, type: Any, *, summary: str = "") -> None:
        """Declare that this node publishes ``type`` on ``subject`` (a pattern is fine)."""
        _check_type(type)
        self.publications[subject] = Publication(subject, type, summary)

    def add_service(self, name: str, *, request: Any = None, reply: Any = None,
                    queue: str | None = None, summary: str = "") -> None:
        """Record a service (what :func:`aoz.serve` calls)."""
        for t in (request, reply):
            if t is not None:
                _check_type(t)
        self.services[name] = ServiceEntry(name, request, reply, queue, summary)

    def remove_service(self, name: str) -> None:
        self.services.pop(name, None)


def _check_type(t: Any) -> None:
    try:
        msgspec.json.schema(t)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{t!r} has no JSON schema ({exc}); use a msgspec.Struct, a "
                         "dataclass, a TypedDict or a builtin type") from None


def reply_type_of(handler: Callable[..., Any]) -> Any:
    """The return annotation of a service handler (unwrapping ``Awaitable``), or None."""
    target = inspect.unwrap(handler)
    if not inspect.isfunction(target) and not inspect.ismethod(target):
        target = getattr(target, "__call__", target)  # noqa: B004 - a callable object
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # unresolvable annotations: no schema, not an error
        return None
    ret = hints.get("return")
    if ret is None or ret is type(None):
        return None
    try:
        msgspec.json.schema(ret)
    except (TypeError, ValueError):
        return None
    return ret


def _key(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", text)


def document(catalog: Catalog, *, title: str = "aoz node", version: str = "1.0.0",
             description: str = "") -> dict[str, Any]:
    """The AsyncAPI 3.0 document of ``catalog`` (a dict, ready for JSON)."""
    types = [p.type for p in catalog.publications.values()]
    for s in catalog.services.values():
        types += [t for t in (s.request, s.reply) if t is not None]
    schemas: tuple[Any, ...] = ()
    components: dict[str, Any] = {}
    if types:
        schemas, components = msgspec.json.schema_components(
            types, ref_template="#/components/schemas/{name}")
    schema_of = dict(zip([id(t) for t in types], schemas, strict=True))
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}

    def message(name: str, t: Any) -> dict[str, str]:
        messages[name] = {"name": name, "contentType": "application/msgpack",
                          "payload": schema_of[id(t)]}
        return {"$ref": f"#/components/messages/{name}"}

    for p in catalog.publications.values():
        key = _key(p.subject)
        channels[key] = {"address": p.subject,
                         "messages": {"publication": message(f"{key}.publication", p.type)}}
        operations[f"publish.{key}"] = {
            "action": "send", "channel": {"$ref": f"#/channels/{key}"},
            **({"summary": p.summary} if p.summary else {}),
        }
    for s in catalog.services.values():
        key = _key(s.name)
        channel: dict[str, Any] = {"address": s.name, "messages": {}}
        if s.request is not None:
            channel["messages"]["request"] = message(f"{key}.request", s.request)
        channels[key] = channel
        op: dict[str, Any] = {"action": "receive", "channel": {"$ref": f"#/channels/{key}"}}
        if s.summary:
            op["summary"] = s.summary
        if s.queue:
            op["x-aoz-queue-group"] = s.queue
        if s.reply is not None:
            reply_key = f"{key}.reply"
            channels[reply_key] = {
                "address": None,  # the requester's inbox (_INBOX.<uuid>.<serial>)
                "messages": {"reply": message(reply_key, s.reply)},
            }
            op["reply"] = {"channel": {"$ref": f"#/channels/{reply_key}"}}
        operations[f"serve.{key}"] = op
    info: dict[str, Any] = {"title": title, "version": version}
    if description:
        info["description"] = description
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": info,
        "defaultContentType": "application/msgpack",
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages, "schemas": components},
    }
