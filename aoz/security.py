"""CURVE encryption and key-based authentication for the data plane.

Model
-----
A mesh shares one *server* keypair: every node's data publisher is a CURVE server
with the mesh secret key, and every data subscriber is a CURVE client that knows the
mesh public key and has a keypair of its own. All data traffic is then encrypted.
Authentication is an allow-list of client public keys (``curve_allow``): a publisher
hands its frames only to subscribers whose key is on the list (the node's own key is
always allowed, for self-delivery). Without a list, any client that knows the mesh
public key may subscribe: encryption without authentication.

The naming plane (nsd traffic) stays in the clear, as in OZ: it carries endpoints,
not data, and a peer announced by an impostor cannot complete the CURVE handshake.

Keys are Z85 text (40 characters), as ``zmq.curve_keypair()`` and ``aoz keys`` make::

    server_public, server_secret = aoz.security.keypair()
    node_public, node_secret = aoz.security.keypair()
    aoz.connect(curve_server_public=server_public, curve_server_secret=server_secret,
                curve_public=node_public, curve_secret=node_secret,
                curve_allow=[node_public, other_node_public])

This module's ZAP logic is pure (frames in, frames out); the node owns the socket.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import zmq
from zmq.utils import z85

__all__ = ["ZAP_ENDPOINT", "keypair", "zap_reply"]

#: where ZeroMQ looks for the authentication handler of a context
ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_ZAP_VERSION = b"1.0"


def keypair() -> tuple[str, str]:
    """A new CURVE keypair as Z85 text: ``(public, secret)``."""
    public, secret = zmq.curve_keypair()
    return public.decode("ascii"), secret.decode("ascii")


def zap_reply(request: Sequence[bytes], allowed: Collection[str]) -> tuple[list[bytes], bool]:
    """Answer one ZAP request (RFC 27): allow CURVE clients whose key is in ``allowed``.

    Returns the reply frames and whether the client was allowed. A request that is not
    a well-formed ZAP 1.0 CURVE request is denied (status 400) or, when even the request
    id is missing, answered with a 500.
    """
    if len(request) < 6 or request[0] != _ZAP_VERSION:
        rid = request[1] if len(request) > 1 else b""
        return [_ZAP_VERSION, rid, b"500", b"malformed ZAP request", b"", b""], False
    rid, mechanism = request[1], request[5]
    if mechanism != b"CURVE" or len(request) < 7 or len(request[6]) != 32:
        return [_ZAP_VERSION, rid, b"400", b"CURVE required", b"", b""], False
    key = z85.encode(request[6]).decode("ascii")
    if key in allowed:
        return [_ZAP_VERSION, rid, b"200", b"OK", key.encode("ascii"), b""], True
    return [_ZAP_VERSION, rid, b"400", b"key not allowed", b"", b""], False
