"""Owned tasks: an anyio task group that lives in a root task of its own.

aoz runs on asyncio and uses anyio for structure: every long-lived object (a node,
a service, a recorder, the Spark sink's sidecar, the pytest fixtures) owns one anyio
task group, and every task it runs lives in that group. Entering a task group by hand
(``await tg.__aenter__()`` in one task, ``__aexit__`` in another) breaks anyio's cancel
scopes, so :class:`TaskOwner` keeps the group inside a root task that it creates: the
object can then be opened in one task and closed in another (a FastAPI lifespan, a
pytest fixture, a thread-safe facade), and closing it is cancel-safe.

    owner = TaskOwner("aoz-recorder")
    await owner.start(setup)        # setup(tg) runs inside the group; start returns after it
    owner.start_soon(fn, *args)     # more tasks in the same group, from any task
    await owner.aclose()            # cancel and await everything; from any task, twice too

When a task of the group fails after ``start`` returned, the group is cancelled, the
exception is kept in :attr:`TaskOwner.failure`, and ``on_failure`` (if given) is called
with it, so the owner can end its consumers with an error instead of a clean end.
Cancelling ``start`` cancels the root task too: nothing keeps running behind a caller
that gave up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
import anyio.abc

from ..errors import UsageError

__all__ = ["TaskOwner", "unwrap"]


def unwrap(exc: BaseException) -> BaseException:
    """The single exception inside (nested) one-member exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


class TaskOwner:
    """An anyio task group in a root task of its own (see the module docstring)."""

    __slots__ = ("_on_failure", "_runner", "_stop", "_tg", "failure", "name")

    def __init__(
        self, name: str, on_failure: Callable[[BaseException], None] | None = None
    ) -> None:
        self.name = name
        self.failure: BaseException | None = None
        self._on_failure = on_failure
        self._runner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def running(self) -> bool:
        """Whether the group is up (started and neither closed nor failed)."""
        return self._tg is not None

    async def start(
        self, setup: Callable[[anyio.abc.TaskGroup], Awaitable[None]] | None = None
    ) -> None:
        """Start the root task and run ``setup(tg)`` inside the group.

        Returns once ``setup`` has returned; raises what ``setup`` raised (unwrapped
        from exception groups). Cancelling this call cancels the root task.
        """
        if self._runner is not None:
            raise UsageError(f"{self.name} was already started; create a new one instead")
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        started: asyncio.Future[None] = loop.create_future()
        self._runner = loop.create_task(self._root(setup, started), name=self.name)
        try:
            await asyncio.shield(started)
        except BaseException:
            self._stop.set()
            if not self._runner.done():
                self._runner.cancel()
            # the root's own error was put into `started`; only wait for it to end
            await asyncio.gather(self._runner, return_exceptions=True)
            raise

    async def _root(
        self,
        setup: Callable[[anyio.abc.TaskGroup], Awaitable[None]] | None,
        started: asyncio.Future[None],
    ) -> None:
        assert self._stop is not None
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                if setup is not None:
                    await setup(tg)
                if not started.done():
                    started.set_result(None)
                await self._stop.wait()
                tg.cancel_scope.cancel()
        except BaseException as exc:
            err = unwrap(exc)
            if not started.done():
                if isinstance(err, asyncio.CancelledError):
                    started.cancel()  # start() itself was cancelled: nobody reads it
                else:
                    started.set_exception(err)
            elif not isinstance(err, asyncio.CancelledError):
                self.failure = err
                if self._on_failure is not None:
                    self._on_failure(err)
            if isinstance(err, asyncio.CancelledError):
                raise
        finally:
            self._tg = None
            if not started.done():  # cancelled before setup finished
                started.cancel()

    def start_soon(
        self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: str | None = None
    ) -> None:
        """Run ``fn(*args)`` as a task of the group (from any task of the same loop)."""
        tg = self._tg
        if tg is None:
            raise UsageError(f"{self.name} is not running; start it first (or it was closed)")
        tg.start_soon(fn, *args, name=name)

    async def aclose(self) -> None:
        """Cancel every task of the group and wait for them; safe twice and from any task."""
        if self._runner is None:
            return
        assert self._stop is not None
        self._stop.set()
        with anyio.CancelScope(shield=True):
            await asyncio.gather(self._runner, return_exceptions=True)
