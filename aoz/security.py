"""CURVE keys for a secured mesh: make, write and read the Z85 key pairs that
``aoz.connect(curve_secret=..., curve_peers=...)`` and ``aoz keygen`` use.

    from aoz.security import keypair

    public, secret = keypair()

The rest of CURVE (ZAP, keys bound to identities) is the node's own machinery; see
docs/SECURITY.md for what a secured mesh guarantees.
"""

from __future__ import annotations

from ._mesh.security import keypair, public_key, read_key, read_keys, write_keypair

__all__ = ["keypair", "public_key", "read_key", "read_keys", "write_keypair"]
