"""Messages for people and for JSON consumers (used by the CLI, the FastAPI relay...).

:func:`message_to_dict` has a *stable* shape: the type of ``data`` depends only on
``encoding``, and ``encoding`` only on the payload's codec (and on whether it decodes):

============  ==============  ==========================================
codec         ``encoding``     ``data``
============  ==============  ==========================================
msgpack/json  ``"json"``       the decoded value (object, array, number...)
omnm          ``"json"``       the fields, typed (``aoz.omnm.to_json``)
text          ``"text"``       a string
raw/unknown   ``"base64"``     the payload's bytes, base64
malformed     ``"base64"``     the payload's bytes, base64
============  ==============  ==========================================

``headers`` is always a str -> str object (``{}`` without headers).
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from ._mesh.message import Message
from ._protocol.codecs import Codec
from .errors import DecodeError

__all__ = ["UNDECODABLE", "headers_of", "message_text", "message_to_dict"]

_VALUE_CODECS = (Codec.MSGPACK, Codec.JSON)
#: OpenMAMA's omnm payloads, where this aoz has the codec (aoz.omnm)
OMNM: Any = getattr(Codec, "OMNM", None)


def _omnm() -> Any:
    import importlib

    return importlib.import_module("aoz.omnm")


class _Undecodable:
    """How many payloads were shown as bytes because they could not be decoded."""

    count = 0


#: payloads that did not decode, or decoded to what JSON cannot hold (msgpack
#: extension types, tuple keys), and were shown as their bytes instead
UNDECODABLE = _Undecodable()
_UNDECODABLE = (
    DecodeError,
    TypeError,
    ValueError,
    OverflowError,
    RecursionError,
    msgspec.EncodeError,
)


def headers_of(msg: Message) -> dict[str, str]:
    """The message's headers; ``{}`` (and counted as undecodable) for a malformed block."""
    try:
        return msg.headers
    except DecodeError:
        UNDECODABLE.count += 1
        return {}


def message_to_dict(msg: Message) -> dict[str, Any]:
    """A JSON-ready view of a message with a stable shape (see the module docstring).

    >>> msgspec.json.encode(message_to_dict(msg))  # doctest: +SKIP
    b'{"subject":"MD.IBM","kind":"publish","codec":"text","reply":null,...,"data":"hi"}'
    """
    data, encoding = _data(msg)
    return {
        "subject": msg.subject,
        "kind": msg.kind.name.lower(),
        "codec": msg.codec.name.lower(),
        "reply": msg.reply,
        "headers": headers_of(msg),
        "received_at": msg.received_at,
        "size": len(msg.data),
        "encoding": encoding,
        "data": data,
    }


def message_text(msg: Message) -> str:
    """The payload for a human: text as is, msgpack/JSON as JSON, raw bytes as UTF-8
    (undecodable bytes backslash-escaped)."""
    if OMNM is not None and msg.codec is OMNM:  # fields one per line, like mamasubscriberc
        try:
            return str(_omnm().format_fields(msg.decode()))
        except _UNDECODABLE:
            UNDECODABLE.count += 1  # shown as bytes below
    if msg.codec in (*_VALUE_CODECS, Codec.TEXT):
        try:
            value = msg.decode()
            return value if isinstance(value, str) else msgspec.json.encode(value).decode()
        except _UNDECODABLE:
            UNDECODABLE.count += 1  # shown as bytes below
    return msg.data.decode("utf-8", errors="backslashreplace")


def _data(msg: Message) -> tuple[Any, str]:
    codec = msg.codec
    if OMNM is not None and codec is OMNM:  # typed fields as JSON (aoz.omnm.to_json)
        try:
            value = _omnm().to_json(msg.decode())
            msgspec.json.encode(value)
            return value, "json"
        except _UNDECODABLE:
            UNDECODABLE.count += 1
    if codec in _VALUE_CODECS or codec is Codec.TEXT:
        try:
            value = msg.decode()
            msgspec.json.encode(value)  # the caller will: fail here, not there
            return value, "text" if codec is Codec.TEXT else "json"
        except _UNDECODABLE:
            UNDECODABLE.count += 1  # a malformed payload is given as its bytes
    return base64.b64encode(msg.data).decode("ascii"), "base64"
