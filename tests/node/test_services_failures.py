"""Services survive their handlers (issue 9, bug 5): an unencodable result, a raising
handler, a sync handler, a service closed from another task, queue-group services."""

from __future__ import annotations

import logging
import threading
from collections import Counter

import anyio
import pytest

import aoz

pytestmark = pytest.mark.timeout(30)


class Unencodable:
    pass


async def test_unencodable_result_is_a_service_error_and_the_service_lives_on(
    static_pair: tuple[aoz.Node, aoz.Node], caplog: pytest.LogCaptureFixture
) -> None:
    client, server = static_pair

    async def handler(req: aoz.Message) -> object:
        return Unencodable() if req.decode() == "bad" else {"ok": req.decode()}

    caplog.set_level(logging.ERROR, logger="aoz.services")
    async with aoz.serve(server, "SVC.enc", handler) as svc:
        await aoz.wait_for_service(client, "SVC.enc")
        with pytest.raises(aoz.ServiceError, match="EncodeError"):
            await aoz.call(client, "SVC.enc", "bad", timeout=5)
        # node.request raises the same error (it used to return the error reply, and
        # only check_reply turned it into one: issue #25)
        with pytest.raises(aoz.ServiceError, match=r"SVC\.enc") as caught:
            await client.request("SVC.enc", "bad", timeout=5)
        assert caught.value.remote_type == "EncodeError"
        assert await aoz.call(client, "SVC.enc", "good", timeout=5) == {"ok": "good"}
        assert aoz.check_reply(await client.request("SVC.enc", "x", timeout=5), "SVC.enc")
    assert (svc.handled, svc.failed) == (2, 2)
    assert svc.failure is None
    records = [r for r in caplog.records if "cannot be encoded" in r.getMessage()]
    assert records and records[0].exc_info is not None  # logged with its traceback


async def test_sync_handler_runs_in_a_worker_thread(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    client, server = static_pair
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def handler(req: aoz.Message) -> str:
        threads.append(threading.get_ident())
        if req.decode() == "boom":
            raise ValueError("boom")
        return req.decode().upper()

    async with aoz.serve(server, "SVC.sync", handler):
        await aoz.wait_for_service(client, "SVC.sync")
        assert await aoz.call(client, "SVC.sync", "hi", timeout=5) == "HI"
        with pytest.raises(aoz.ServiceError, match="ValueError: boom"):
            await aoz.call(client, "SVC.sync", "boom", timeout=5)
    assert threads and loop_thread not in threads


async def test_service_started_in_one_task_closed_in_another(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    client, server = static_pair

    async def echo(req: aoz.Message) -> object:
        return req.decode()

    svc = aoz.serve(server, "SVC.echo", echo)
    async with anyio.create_task_group() as tg:
        tg.start_soon(svc.start)
    await aoz.wait_for_service(client, "SVC.echo")
    assert await aoz.call(client, "SVC.echo", "x", timeout=5) == "x"
    async with anyio.create_task_group() as tg:
        tg.start_soon(svc.aclose)
    await svc.aclose()  # twice is harmless
    # nobody answers any more (NoResponders once the unsubscription has arrived)
    with pytest.raises((aoz.NoResponders, aoz.RequestTimeout)):
        await aoz.call(client, "SVC.echo", "x", timeout=0.5)


async def test_queue_group_services_split_the_calls(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    client, server = static_pair
    served: Counter[int] = Counter()

    def make(i: int) -> object:
        async def handler(req: aoz.Message) -> int:
            served[i] += 1
            return i

        return handler

    async with (
        aoz.serve(server, "SVC.q", make(1), queue="w"),  # type: ignore[arg-type]
        aoz.serve(server, "SVC.q", make(2), queue="w"),  # type: ignore[arg-type]
    ):
        await aoz.queues.wait_for_members(client, "SVC.q", "w", 2)
        answers = [await aoz.call(client, "SVC.q", timeout=5) for _ in range(10)]
    assert sorted(answers) == [1] * 5 + [2] * 5
    assert served == {1: 5, 2: 5}
