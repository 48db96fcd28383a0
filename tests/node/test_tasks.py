"""TaskOwner: one way to own tasks, openable in one task and closable in another."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from aoz._mesh.tasks import TaskOwner
from aoz.errors import AozError


async def test_open_in_one_task_close_in_another() -> None:
    owner = TaskOwner("t")
    ran = anyio.Event()
    cancelled = anyio.Event()

    async def forever() -> None:
        ran.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    async def setup(tg: anyio.abc.TaskGroup) -> None:
        tg.start_soon(forever)

    await asyncio.create_task(owner.start(setup))  # opened by another task
    with anyio.fail_after(5):
        await ran.wait()
    assert owner.running
    await asyncio.create_task(owner.aclose())  # closed by yet another task
    assert cancelled.is_set()
    assert not owner.running
    await owner.aclose()  # twice is fine


async def test_setup_error_is_raised_by_start() -> None:
    owner = TaskOwner("t")

    async def setup(tg: anyio.abc.TaskGroup) -> None:
        raise AozError("boom")

    with pytest.raises(AozError, match="boom"):
        await owner.start(setup)
    assert not owner.running


async def test_failure_after_start_is_reported() -> None:
    seen: list[BaseException] = []
    failed = anyio.Event()

    def on_failure(exc: BaseException) -> None:
        seen.append(exc)
        failed.set()

    owner = TaskOwner("t", on_failure=on_failure)
    await owner.start()

    async def crash() -> None:
        raise ValueError("task failed")

    owner.start_soon(crash)
    with anyio.fail_after(5):
        await failed.wait()
    assert isinstance(owner.failure, ValueError)
    assert seen == [owner.failure]
    await owner.aclose()


async def test_cancelling_start_cancels_the_root() -> None:
    owner = TaskOwner("t")
    entered = anyio.Event()
    left = anyio.Event()

    async def setup(tg: anyio.abc.TaskGroup) -> None:
        entered.set()
        try:
            await anyio.sleep_forever()
        finally:
            left.set()

    task = asyncio.create_task(owner.start(setup))
    with anyio.fail_after(5):
        await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert left.is_set()
    assert not owner.running


async def test_start_twice_and_start_soon_when_stopped_raise_aoz_errors() -> None:
    owner = TaskOwner("t")
    with pytest.raises(AozError):
        owner.start_soon(anyio.sleep, 0)
    await owner.start()
    with pytest.raises(AozError):
        await owner.start()
    await owner.aclose()
