"""UsageError: a bad argument (or a call the state does not allow) says what to do."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import aoz
from aoz._mesh.services import Service
from aoz._mesh.tasks import TaskOwner
from aoz.errors import ConfigError, SubjectError, UsageError, UsageTypeError
from aoz.omnm import Time
from aoz.record.schema import columns_for


def test_the_tree() -> None:
    assert aoz.UsageError is UsageError and aoz.UsageTypeError is UsageTypeError
    assert issubclass(UsageError, aoz.AozError) and issubclass(UsageError, ValueError)
    assert issubclass(UsageTypeError, UsageError) and issubclass(UsageTypeError, TypeError)
    assert issubclass(SubjectError, UsageError) and issubclass(ConfigError, UsageError)


def test_service_arguments() -> None:
    node: Any = object()  # the arguments are checked before the node is touched
    with pytest.raises(UsageTypeError, match="must be callable"):
        Service(node, "SVC", 42, max_concurrency=1)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="max_concurrency must be >= 1"):
        Service(node, "SVC", lambda m: m, max_concurrency=0)


async def test_task_owner_misuse() -> None:
    owner = TaskOwner("owner")
    with pytest.raises(UsageError, match="start it first"):
        owner.start_soon(TaskOwner("x").aclose)
    await owner.start()
    try:
        with pytest.raises(UsageError, match="create a new one"):
            await owner.start()
    finally:
        await owner.aclose()


def test_schema_wants_struct_types() -> None:
    with pytest.raises(TypeError, match=r"not a msgspec\.Struct"):
        columns_for([int])
    with pytest.raises(UsageTypeError):
        columns_for([int])


def test_omnm_time_wants_an_aware_datetime() -> None:
    with pytest.raises(UsageError, match="aware datetime"):
        Time.from_datetime(dt.datetime(2024, 1, 1))
