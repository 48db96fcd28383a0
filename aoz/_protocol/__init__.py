"""The pure protocol core: bytes in, values out (no asyncio, no zmq, no clock).

* :mod:`aoz._protocol.frames` -- application frames and reply handles (SPEC §1, §2)
* :mod:`aoz._protocol.naming` -- 882-byte naming frames (SPEC §3)
* :mod:`aoz._protocol.codecs` -- payload codecs chosen by the first payload byte
* :mod:`aoz._protocol.subjects` -- subject validation, wildcards, ZeroMQ prefixes (SPEC §7)

Import the submodules directly; this package re-exports nothing so that importing it
never depends on a sibling module.
"""
