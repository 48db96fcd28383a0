"""Packaging: the license ships in the wheel, one version, extras named when missing,
``dir(aoz)`` shows the public API only."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import aoz

from .conftest import REPO


@pytest.mark.parametrize(
    ("module", "dependency", "extra"),
    [
        ("aoz.fastapi", "fastapi", "fastapi"),
        ("aoz.metrics", "prometheus_client", "prometheus"),
        ("aoz.spark.sink", "pyspark", "spark"),
        ("aoz.record", "pyarrow", "record"),
    ],
)
def test_a_missing_extra_names_the_extra(
    module: str, dependency: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    for name in [m for m in sys.modules if m == dependency or m.startswith(dependency + ".")]:
        monkeypatch.setitem(sys.modules, name, None)  # already imported by another test
    monkeypatch.setitem(sys.modules, dependency, None)  # import -> ImportError
    with pytest.raises(ImportError, match=rf"pip install 'aoz\[{extra}\]'"):
        importlib.import_module(module)


def test_spark_session_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import aoz.spark  # the consumer side (delivery, sidecar) needs no pyspark

    monkeypatch.setitem(sys.modules, "pyspark", None)
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    with pytest.raises(ImportError, match=r"pip install 'aoz\[spark\]'"):
        aoz.spark.local_session()


def test_dir_shows_the_public_api_only() -> None:
    names = dir(aoz)
    assert names == sorted(aoz.__all__)
    assert not [n for n in names if n.startswith("_") and n != "__version__"]
    for hidden in ("annotations", "logging", "TYPE_CHECKING", "Any"):
        assert hidden not in names
    for name in aoz.__all__:
        assert getattr(aoz, name) is not None


def test_the_version_comes_from_the_package_metadata() -> None:
    assert aoz.__version__ == metadata.version("aoz")
    assert 'version = "' in (REPO / "pyproject.toml").read_text()
    assert "__version__ =" not in (REPO / "aoz" / "__init__.py").read_text().replace(
        "__version__ = _version()", ""
    )


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_wheel_carries_the_license(tmp_path: Path) -> None:
    pytest.importorskip("setuptools", reason="the build backend is not installed")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), str(REPO)],
        capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("aoz-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        licenses = [n for n in names if n.endswith("LICENSE") and ".dist-info/" in n]
        assert licenses, names
        assert "MIT License" in zf.read(licenses[0]).decode()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in meta
    assert "aoz/py.typed" in names and "aoz/_speedups.pyi" in names
    if shutil.which("cc") or shutil.which("gcc"):  # the compiled hot path is in the wheel
        assert any(n.startswith("aoz/_speedups.") and n.endswith(".so") for n in names), names
    assert not any(n.endswith((".c", ".pyx")) for n in names), names
    assert (REPO / "LICENSE").read_text().startswith("MIT License")
