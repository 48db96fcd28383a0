"""Packaging: the license ships in the wheel, one version, extras named when missing,
``dir(aoz)`` shows the public API only."""

from __future__ import annotations

import importlib
import os
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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from this checkout (once for the module's tests)."""
    pytest.importorskip("setuptools", reason="the build backend is not installed")
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(REPO)],
        capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (built,) = out.glob("aoz-*.whl")
    return built


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_wheel_carries_the_license(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        licenses = [n for n in names if n.endswith("LICENSE") and ".dist-info/" in n]
        assert licenses, names
        assert "MIT License" in zf.read(licenses[0]).decode()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in meta
    assert "aoz/py.typed" in names and "aoz/_mesh/_speedups.pyi" in names
    assert "aoz/omnm/_fast.pyi" in names
    if shutil.which("cc") or shutil.which("gcc"):  # the compiled twins are in the wheel
        assert any(n.startswith("aoz/_mesh/_speedups.") and n.endswith(".so") for n in names), names
        assert any(n.startswith("aoz/omnm/_fast.") and n.endswith(".so") for n in names), names
    assert not any(n.endswith((".c", ".pyx")) for n in names), names
    assert (REPO / "LICENSE").read_text().startswith("MIT License")


def test_a_core_only_import_of_aoz_spark_names_everything_missing() -> None:
    """Issue #25 item 6: it named aoz[record]; once that was installed, local_session()
    named aoz[spark]. One message now names the extra and every module it lacks."""
    code = ("import sys\n"
            "for m in ('pyarrow', 'pyspark', 'pandas'): sys.modules[m] = None\n"
            "import aoz.spark\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1
    assert ("aoz.spark needs the 'spark' extra: pip install 'aoz[spark]' "
            "(pyspark, pyarrow, pandas are missing)") in proc.stderr, proc.stderr[-1000:]


def test_aoz_version_needs_no_cli_extra() -> None:
    code = ("import sys\n"
            "sys.modules['typer'] = sys.modules['rich'] = None\n"
            "from aoz.cli import main\n"
            "sys.exit(main(['--version']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"aoz {aoz.__version__} (hot path: "), proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_repaired_manylinux_wheel_imports_the_compiled_path(
    wheel: Path, tmp_path: Path
) -> None:
    """Issue #25 item 6: the wheel was tagged linux_x86_64, which an index refuses.
    auditwheel repairs it to a manylinux tag, and that wheel's compiled hot path loads."""
    pytest.importorskip("auditwheel", reason="auditwheel is not installed")
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler: the wheel has no compiled hot path to repair")
    fixed = tmp_path / "fixed"
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    proc = subprocess.run([sys.executable, "-m", "auditwheel", "repair", "-w", str(fixed),
                           str(wheel)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (repaired,) = fixed.glob("aoz-*.whl")
    assert "-manylinux" in repaired.name, repaired.name
    site = tmp_path / "site"
    with zipfile.ZipFile(repaired) as zf:
        zf.extractall(site)
    code = ("import aoz, aoz._mesh._speedups as s, aoz.omnm._fast as f; "
            "print(aoz.hot_path(), s.__file__, aoz.omnm.implementation(), f.__file__)")
    env = {k: v for k, v in os.environ.items() if k != "AOZ_PURE_PYTHON"}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    path, loaded, codec, codec_loaded = proc.stdout.split()
    assert path == "compiled" and loaded.startswith(str(site)), proc.stdout
    assert codec == "compiled" and codec_loaded.startswith(str(site)), proc.stdout
