"""No import cycles inside the ``aoz`` package.

Every import counts: module level, under ``TYPE_CHECKING`` and inside functions. A
cycle hidden behind a lazy import is still two modules that cannot be read apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

import aoz

ROOT = Path(aoz.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        pkg = module.split(".") if is_pkg else module.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join([*pkg, *(node.module.split(".") if node.module else [])])
    out = [base]
    for alias in node.names:  # `from . import x` may name a submodule
        out.append(f"{base}.{alias.name}")
    return out


def import_graph() -> dict[str, set[str]]:
    files = {p: _module_name(p) for p in ROOT.rglob("*.py")}
    known = set(files.values())
    graph: dict[str, set[str]] = {}
    for path, module in files.items():
        is_pkg = path.name == "__init__.py"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = _resolve(module, is_pkg, node)
            for name in names:
                if name in known and name != module and name != "aoz":
                    deps.add(name)
        graph[module] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m):], m]
            if m not in state and (found := visit(m)) is not None:
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)) is not None:
            return found
    return None


def test_the_graph_sees_imports() -> None:
    graph = import_graph()
    assert "aoz._mesh.dataplane" in graph["aoz._mesh.node"]
    assert "aoz._discovery.links" in graph["aoz._discovery.driver"]


def test_no_import_cycle_in_aoz() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_zmq_stays_at_the_edge() -> None:
    """Of the node's modules only the data plane imports zmq."""
    for name in ("node", "routing", "interest", "requests", "message", "subscription"):
        tree = ast.parse((ROOT / "_mesh" / f"{name}.py").read_text())
        mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        mods |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not any(m == "zmq" or m.startswith("zmq.") for m in mods), name
