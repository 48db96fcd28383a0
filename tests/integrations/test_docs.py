"""The documentation's code runs as written: the README's quick start is
examples/quickstart.py (run by tests/node/test_examples.py), every Python block of the
README and docs/ compiles, and the complete programs of docs/USAGE.md run here."""

from __future__ import annotations

import ast
import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, clean_pytest_env

_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
DOCS = [REPO / "README.md", REPO / "docs" / "USAGE.md", REPO / "docs" / "PROTOCOL.md"]


def blocks(path: Path) -> list[str]:
    return _BLOCK.findall(path.read_text())


def block_with(path: Path, needle: str) -> str:
    (found,) = [b for b in blocks(path) if needle in b]
    return found


def test_readme_quick_start_is_the_tested_example() -> None:
    quick = block_with(REPO / "README.md", "asyncio.run(main())")
    example = (REPO / "examples" / "quickstart.py").read_text()
    # the example adds a module docstring, the __future__ import and a __main__ guard
    body = example[example.index("import asyncio") :].replace(
        'if __name__ == "__main__":\n    asyncio.run(main())', "asyncio.run(main())"
    )
    assert quick == body


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_python_block_compiles(doc: Path) -> None:
    for code in blocks(doc):
        # fragments may use `await` at top level, as in an async REPL
        compile(code, str(doc), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def test_usage_fastapi_testing_recipe_runs() -> None:
    code = block_with(REPO / "docs" / "USAGE.md", "def test_health():")
    namespace: dict[str, object] = {"__name__": "usage_recipe"}
    exec(compile(code, "docs/USAGE.md", "exec"), namespace)
    test = namespace["test_health"]
    assert callable(test)
    test()


def toml_block(path: Path) -> str:
    (found,) = re.findall(r"```toml\n(.*?)```", path.read_text(), re.S)
    return str(found)


async def _pytest_in_a_project(tmp_path: Path, code: str, passed: int) -> None:
    """Run ``code`` as a project's test file, with USAGE.md's pytest configuration."""
    (tmp_path / "test_usage.py").write_text(code)
    (tmp_path / "pyproject.toml").write_text(toml_block(REPO / "docs" / "USAGE.md"))
    env = clean_pytest_env()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:anyio",
        cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with asyncio.timeout(100):
            out, _ = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, out.decode()
    assert f"{passed} passed".encode() in out, out.decode()


@pytest.mark.timeout(120)
async def test_usage_pytest_example_runs_in_a_project(tmp_path: Path) -> None:
    code = block_with(REPO / "docs" / "USAGE.md", "async def test_quote_service")
    await _pytest_in_a_project(tmp_path, code, 1)


@pytest.mark.timeout(120)
async def test_usage_testing_recipes_run_in_a_project(tmp_path: Path) -> None:
    """Issue #25 item 3: the TestClient, ASGITransport and test-mesh recipes, as
    printed, in a project configured as USAGE.md says (ASGITransport answered 500 and
    TestClient beside the async fixtures 503 before)."""
    usage = REPO / "docs" / "USAGE.md"
    code = "\n\n".join((block_with(usage, "def test_health():"),
                        block_with(usage, "async def test_health_async"),
                        block_with(usage, "async def test_quote_through_the_mesh")))
    await _pytest_in_a_project(tmp_path, code, 3)


def test_usage_error_cb_recipe_runs() -> None:
    code = block_with(REPO / "docs" / "USAGE.md", "error_cb=on_error")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "MD.>: " in proc.stdout and "dropped" in proc.stdout, proc.stdout
