"""An AsyncAPI catalog for ``aoz asyncapi examples.catalog:catalog`` (see aoz.asyncapi).

A node fills its own ``node.catalog`` as it serves (``aoz.serve``) and as the code
declares publications; this module-level one shows the same for a tool that prints or
checks the document without a running node.
"""

from __future__ import annotations

import msgspec

from aoz.asyncapi import Catalog


class Quote(msgspec.Struct):
    symbol: str
    bid: float
    ask: float


catalog = Catalog()
catalog.publishes("MD.*.IBM", Quote, summary="IBM quotes from every exchange")
catalog.add_service("SVC.quote", request=str, reply=Quote, summary="the last quote of a symbol")
