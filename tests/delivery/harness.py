"""Role processes for the delivery tests: spawn, read JSON events, signal, stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[2]


class Role:
    def __init__(self, popen: subprocess.Popen[str]) -> None:
        self.popen = popen

    async def event(self, name: str, timeout: float = 30.0) -> dict[str, Any]:
        """The next event called ``name`` (earlier ones are skipped); bounded in time."""
        return (await self.events_until(name, timeout))[-1]

    async def events_until(self, name: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Every event up to and including the first called ``name``."""
        return await self.until(lambda e: e["event"] == name, repr(name), timeout)

    async def until(
        self, done: Callable[[dict[str, Any]], bool], what: str, timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Every event up to and including the first for which ``done`` is true."""
        assert self.popen.stdout is not None
        out: list[dict[str, Any]] = []
        with anyio.fail_after(timeout):
            for _ in range(1_000_000):
                line = await anyio.to_thread.run_sync(
                    self.popen.stdout.readline, abandon_on_cancel=True
                )
                if not line:
                    err = self.popen.stderr.read() if self.popen.stderr else ""
                    raise AssertionError(f"role exited before {what}: {err[-2000:]}")
                out.append(json.loads(line))
                if done(out[-1]):
                    return out
        raise AssertionError(f"no {what}")

    def stop_input(self) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.close()

    def signal(self, sig: signal.Signals) -> None:
        self.popen.send_signal(sig)


@contextmanager
def role(name: str, params: dict[str, Any], prefix: list[str] | None = None) -> Iterator[Role]:
    """Run ``python -m tests.delivery.roles NAME PARAMS`` (inside ``prefix``, e.g.
    ``ip netns exec NS``); killed and reaped on exit."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    popen = subprocess.Popen(
        [*(prefix or []), sys.executable, "-m", "tests.delivery.roles", name, json.dumps(params)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, cwd=ROOT,
    )
    try:
        yield Role(popen)
    finally:
        if popen.poll() is None:
            popen.send_signal(signal.SIGCONT)
            popen.kill()
        popen.wait(timeout=10)
        for stream in (popen.stdin, popen.stdout, popen.stderr):
            if stream is not None:
                stream.close()
