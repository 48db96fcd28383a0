"""Helpers for tests that run real processes: the ``aoz`` console script, uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from aoz._discovery.nsd import NamingDaemon

REPO = Path(__file__).resolve().parents[2]
AOZ = Path(sys.executable).with_name("aoz")  # the installed console script
STEP = 20.0  # upper bound for any single wait on a subprocess


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without the caller's AOZ_* settings (AOZ_PURE_PYTHON, the hot
    path this run tests, is not a setting and stays), plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AOZ_") or k == "AOZ_PURE_PYTHON"}
    env.update(extra)
    return env


def clean_pytest_env() -> dict[str, str]:
    """:func:`clean_env` without this run's PYTEST_* variables: for a pytest run of its
    own in a temporary project."""
    return {k: v for k, v in clean_env().items() if not k.startswith("PYTEST_")}


class Proc:
    """A running subprocess whose stderr is read line by line as it is needed."""

    def __init__(self, proc: asyncio.subprocess.Process, argv: list[str]) -> None:
        self.proc = proc
        self.argv = argv
        self.stderr_lines: list[str] = []

    async def wait_stderr(self, needle: str, timeout: float = STEP) -> str:
        """Read stderr until a line contains ``needle``; returns that line."""
        assert self.proc.stderr is not None
        async with asyncio.timeout(timeout):
            while True:
                raw = await self.proc.stderr.readline()
                if not raw:
                    rc = await self.proc.wait()
                    raise AssertionError(
                        f"{self.argv} exited ({rc}) before printing {needle!r}; "
                        f"stderr so far: {''.join(self.stderr_lines)}"
                    )
                line = raw.decode(errors="replace")
                self.stderr_lines.append(line)
                if needle in line:
                    return line

    async def finish(self, timeout: float = STEP) -> tuple[int, str, str]:
        """Wait for the exit; returns (status, stdout, all of stderr)."""
        async with asyncio.timeout(timeout):
            out, err = await self.proc.communicate()
        stderr = "".join(self.stderr_lines) + err.decode(errors="replace")
        assert self.proc.returncode is not None
        return self.proc.returncode, out.decode(errors="replace"), stderr

    async def terminate(self) -> int:
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                async with asyncio.timeout(5):
                    await self.proc.wait()
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        return self.proc.returncode or 0


Spawn = Callable[..., Awaitable[Proc]]


@pytest.fixture
async def spawn() -> AsyncIterator[Spawn]:
    """``await spawn(argv, env=..., stdin=b"...")`` starts a process; all are killed at teardown."""
    procs: list[Proc] = []

    async def start(
        argv: list[str], *, env: dict[str, str] | None = None, stdin: bytes | None = None,
        cwd: Path | None = None,
    ) -> Proc:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env if env is not None else clean_env(),
            cwd=cwd or REPO,
            start_new_session=True,  # its own process group: teardown kills its children too
        )
        if stdin is not None:
            assert proc.stdin is not None
            proc.stdin.write(stdin)
            await proc.stdin.drain()
            proc.stdin.close()
        p = Proc(proc, argv)
        procs.append(p)
        return p

    try:
        yield start
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.proc.pid, signal.SIGKILL)
            await p.proc.wait()


@pytest.fixture
async def aoz_cli(spawn: Spawn, aoz_nsd: NamingDaemon) -> Callable[..., Awaitable[Proc]]:
    """``await aoz_cli("sub", "X")`` runs the real ``aoz`` script joined to ``aoz_nsd``."""

    async def run(*args: str, stdin: bytes | None = None, **env: Any) -> Proc:
        return await spawn(
            [str(AOZ), *args], env=clean_env(AOZ_NAMING=aoz_nsd.endpoint, **env), stdin=stdin
        )

    return run
