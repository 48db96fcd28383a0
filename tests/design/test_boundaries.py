"""Rooms keep to themselves: no module reads another's private attributes, and only the
rooms that own ZeroMQ sockets (or map ZeroMQ's errors) import zmq.

Both checks read the source (AST), like ``test_imports.py``.

Private attributes. ``x._name`` is fine when ``x`` is ``self``/``cls``, or when
``_name`` is defined in the same module (a module may touch the privates of its own
classes, e.g. ``other._x`` in ``__eq__``). Anything else -- ``plane._pub`` in another
module, ``from .builder import _Entry`` -- reaches into another room and is listed.
The heuristic is by name: a private name defined in both modules hides the access.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import aoz

from .test_imports import ROOT, _module_name

# Accesses across modules that stay, each with its reason: "module: expr".
# Each line is a debt; delete it when the access goes (the test fails on stale lines).
ALLOWED_PRIVATE: dict[str, str] = {
    # -- a package-internal constructor of omnm's public Message (no validation):
    "aoz.omnm._codec: Message._of": "decoding builds Messages from trusted fields",
    # -- PySpark exposes the JVM only through these:
    "aoz.spark.session: spark._jsparkSession": "PySpark's own private, no public way",
    "aoz.spark.session: spark.sparkContext._jvm": "PySpark's own private, no public way",
}

# Modules that import zmq: the rooms that own sockets, plus the error map and the
# socket-option policy (which sets options on sockets it is handed).
ZMQ_MODULES = {
    "aoz._mesh.errmap": "maps ZMQError to aoz errors (owns no socket)",
    "aoz._mesh.sockopts": "sets options on sockets it is handed; HandshakeGuard reconnects",
    "aoz._mesh.security": "CURVE keys (zmq.curve_*), the nsd's ZAP thread socket",
    "aoz._mesh.dataplane": "the node's data sockets",
    "aoz._mesh.peerlinks": "connects/disconnects the data SUB, reads its monitor",
    "aoz._mesh._hotpath": "the pure hot path: recv/send on the data sockets",
    "aoz._discovery.driver": "the naming SUB/PUB and their monitors",
    "aoz._discovery.broker": "the broker's XSUB/XPUB and the proxy thread",
    "aoz._discovery.nsd": "the nsd's XSUB/XPUB",
    "aoz.spark.sink": "a Spark task's DEALER to its sidecar",
    "aoz.spark.sidecar": "the sidecar's ROUTER",
    "aoz.cli.daemons": "aoz nsd's mesh watcher SUB",
}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(ROOT.rglob("*.py")):
        yield _module_name(path), ast.parse(path.read_text(), str(path))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_names(tree: ast.Module) -> set[str]:
    """Every name a module defines: functions, classes, assignments (self._x = ...),
    class-level annotations and __slots__ strings."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__slots__" for t in targets):
                value = node.value
                if isinstance(value, ast.Tuple | ast.List):
                    out |= {e.value for e in value.elts if isinstance(e, ast.Constant)
                            and isinstance(e.value, str)}
        elif isinstance(node, ast.alias):
            out.add(node.asname or node.name.split(".")[0])
    return out


def _is_submodule(module: str, node: ast.ImportFrom, name: str) -> bool:
    """``from . import _speedups``: a package-private module (pyzmq's backend choice),
    not a private attribute."""
    if not node.level:
        return False
    parts = module.split(".")[1:]  # under aoz/
    is_pkg = (ROOT.joinpath(*parts) / "__init__.py").exists()
    base = ROOT.joinpath(*parts[: len(parts) - node.level + (1 if is_pkg else 0)])
    if node.module:
        base = base.joinpath(*node.module.split("."))
    return any((base / f"{name}{ext}").exists() for ext in (".py", ".pyx")) or \
        (base / name).is_dir()


def private_reaches() -> set[str]:
    """``"module: expr"`` for every access to another module's private attribute."""
    found: set[str] = set()
    for module, tree in _modules():
        own = _defined_names(tree)
        imported_private: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                for alias in node.names:
                    if _private(alias.name) and not _is_submodule(module, node, alias.name):
                        imported_private.add(alias.asname or alias.name)
                        where = "." * node.level + (node.module or "")
                        found.add(f"{module}: from {where} import {alias.name}")
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) \
                    and base.func.id == "super":
                continue
            if node.attr in own and node.attr not in imported_private:
                continue
            found.add(f"{module}: {ast.unparse(node)}")
    return found


def test_no_module_reads_another_modules_privates() -> None:
    new = sorted(private_reaches() - set(ALLOWED_PRIVATE))
    assert not new, "private attributes read across modules:\n" + "\n".join(new)


def test_no_stale_allow_list_entries() -> None:
    stale = sorted(set(ALLOWED_PRIVATE) - private_reaches())
    assert not stale, "gone from the code, delete from ALLOWED_PRIVATE:\n" + "\n".join(stale)


def test_the_check_sees_a_reach() -> None:
    tree = ast.parse("def f(plane):\n    return plane._pub\n")
    assert not {"_pub"} & _defined_names(tree)
    assert any(isinstance(n, ast.Attribute) and n.attr == "_pub" for n in ast.walk(tree))


def _type_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` (no import at run time)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def zmq_importers() -> set[str]:
    out: set[str] = set()
    for module, tree in _modules():
        type_only = _type_only(tree)
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue  # a type annotation does not talk to ZeroMQ
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            if any(n == "zmq" or n.startswith("zmq.") for n in names):
                out.add(module)
    return out


def test_zmq_only_in_the_rooms_that_own_sockets() -> None:
    assert zmq_importers() == set(ZMQ_MODULES)


def test_the_listed_modules_exist() -> None:
    assert Path(aoz.__file__).parent == ROOT
    known = {m for m, _ in _modules()}
    assert set(ZMQ_MODULES) <= known


# The calls that hand a ZMQError to aoz._mesh.errmap (outside it, nothing else may catch one).
_MAP_CALLS = {"drain_error", "translate", "socket_error"}


def zmq_handlers_off_the_map() -> list[str]:
    """``except zmq.ZMQError`` clauses that do not hand the error to ``aoz._mesh.errmap``."""
    out: list[str] = []
    for module, tree in _modules():
        if module == "aoz._mesh.errmap":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("suppress") \
                    and "ZMQError" in ast.unparse(node):
                out.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
            if not isinstance(node, ast.ExceptHandler) or node.type is None:
                continue
            caught = ast.unparse(node.type)
            if "ZMQError" not in caught:
                continue
            calls = {
                (c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", ""))
                for c in ast.walk(node) if isinstance(c, ast.Call)
            }
            if not calls & _MAP_CALLS:
                out.append(f"{module}:{node.lineno}: except {caught}")
    return out


def test_zmq_errors_are_handled_one_way() -> None:
    """Outside the error map, a ZMQError is caught only to hand it to the map (the
    readers' drains, the hot path's send); elsewhere `with mapped(...)`/`tolerated(...)`."""
    off = zmq_handlers_off_the_map()
    assert not off, "ZMQError handled outside aoz._mesh.errmap:\n" + "\n".join(off)
