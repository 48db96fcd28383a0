"""An error reply raises from every request API (issue #25 item 1)."""

from __future__ import annotations

import anyio
import pytest

import aoz


def fail(req: aoz.Message) -> None:
    raise ValueError("feed down")


async def test_request_raises_the_remote_error(static_pair: tuple[aoz.Node, aoz.Node]) -> None:
    a, b = static_pair
    async with aoz.serve(b, "SVC.fail", fail):
        await aoz.wait_for_service(a, "SVC.fail")
        with pytest.raises(aoz.ServiceError) as caught:
            await a.request("SVC.fail", b"x", timeout=5)
    err = caught.value
    assert (err.service, err.remote_type, err.remote_message) == (
        "SVC.fail", "ValueError", "feed down")
    assert err.remote == "ValueError: feed down" and "feed down" in str(err)


async def test_request_many_raises_at_the_error_reply(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    a, b = static_pair
    async with aoz.serve(b, "SVC.fail", fail):
        await aoz.wait_for_service(a, "SVC.fail")
        with pytest.raises(aoz.ServiceError, match="feed down"):
            async with a.request_many("SVC.fail", timeout=5, max_replies=1) as replies:
                async for _ in replies:
                    pytest.fail("an error reply was handed out as a reply")


async def test_a_reply_that_only_looks_like_an_error_is_a_reply(
    static_pair: tuple[aoz.Node, aoz.Node],
) -> None:
    """A value with the key among others, or a non-string, is an ordinary reply."""
    a, b = static_pair
    answers = [{"aoz.error": "x", "other": 1}, {"aoz.error": 7}, "aoz.error"]
    async with b.subscribe("SVC.odd") as sub, anyio.create_task_group() as tg:
        async def respond() -> None:
            for value in answers:
                req = await sub.next(timeout=5)
                await req.respond(value)

        tg.start_soon(respond)
        await a.wait_for_interest("SVC.odd")
        got = [(await a.request("SVC.odd", timeout=5)).decode() for _ in answers]
    assert got == answers


def test_the_blocking_facade_raises_it_too() -> None:
    import threading

    with (
        aoz.BlockingNode(bind=["tcp://127.0.0.1:*"]) as server,
        aoz.BlockingNode(bind=["tcp://127.0.0.1:*"], connect=[server.endpoint]) as client,
    ):
        server._call(server.node.connect_endpoint, client.endpoint)
        with server.subscribe("SVC.fail") as requests:
            def answer() -> None:  # what aoz.serve answers when a handler raises
                server.respond(requests.next(timeout=10), {"aoz.error": "ValueError: feed down"})

            responder = threading.Thread(target=answer)
            responder.start()
            client.wait_for_interest("SVC.fail", timeout=10)
            with pytest.raises(aoz.ServiceError, match="ValueError: feed down"):
                client.request("SVC.fail", b"x", timeout=5)
            responder.join(10)
