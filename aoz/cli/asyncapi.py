"""``aoz asyncapi MODULE:ATTRIBUTE``: print the AsyncAPI document of a catalog or node."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated, Any

import msgspec
import typer

import aoz.cli._common as c

from ..asyncapi import Catalog, document

EXAMPLE = """Examples:
  aoz asyncapi myapp.services:catalog              # an aoz.asyncapi.Catalog
  aoz asyncapi myapp.main:node --title "quotes"    # a Node's catalog (node.catalog)"""


def load_catalog(target: str) -> Catalog:
    """The catalog named by ``MODULE:ATTRIBUTE`` (a Catalog, or anything with
    ``.catalog``: a Node); a user error (exit 2) otherwise."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise c.UserError(f"{target!r} is not MODULE:ATTRIBUTE (e.g. myapp.services:catalog)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as uvicorn does: the current project's modules
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise c.UserError(f"cannot import {module_name!r}: {exc}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise c.UserError(f"{module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    catalog = obj if isinstance(obj, Catalog) else getattr(obj, "catalog", None)
    if not isinstance(catalog, Catalog):
        raise c.UserError(f"{target} is neither an aoz.asyncapi.Catalog nor a node")
    return catalog


def register(app: typer.Typer) -> None:
    @app.command("asyncapi", epilog=EXAMPLE)
    def _asyncapi(
        target: Annotated[str, typer.Argument(help="MODULE:ATTRIBUTE of a Catalog or a node.")],
        title: Annotated[str, typer.Option("--title", help="The document's title.")] = "aoz node",
        version: Annotated[str, typer.Option("--version", help="The API's version.")] = "1.0.0",
    ) -> None:
        """Print the AsyncAPI 3.0 document (JSON) of a catalog of services and publications."""
        try:
            doc = document(load_catalog(target), title=title, version=version)
        except c.UserError as exc:
            c.error(str(exc))
            raise typer.Exit(2) from None
        c.write(msgspec.json.format(msgspec.json.encode(doc)) + b"\n")
