"""sockopts.Backoff and HandshakeGuard as units: a fake socket, time passed in, no zmq I/O."""

from __future__ import annotations

import errno
from typing import Any

import zmq

from aoz._mesh.sockopts import HANDSHAKE_FAILED, Backoff, HandshakeGuard
from aoz.config import Settings

EP, OTHER = "tcp://127.0.0.1:1", "tcp://127.0.0.1:2"
FAILED = next(iter(HANDSHAKE_FAILED))


class FakeSocket:
    """What the guard calls on its socket, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.closed = False
        self.fail_disconnect = False

    def connect(self, endpoint: str) -> None:
        self.calls.append(("connect", endpoint))

    def disconnect(self, endpoint: str) -> None:
        if self.fail_disconnect:  # libzmq already dropped the endpoint
            raise zmq.ZMQError(errno.ENOENT)
        self.calls.append(("disconnect", endpoint))


def guard(
    wanted: set[str] | None = None, **kw: Any
) -> tuple[HandshakeGuard, FakeSocket, list[str]]:
    sock = FakeSocket()
    counted: list[str] = []
    want = {EP, OTHER} if wanted is None else wanted
    g = HandshakeGuard(sock, Settings(**kw), wanted=want.__contains__,  # type: ignore[arg-type]
                       count=counted.append)
    return g, sock, counted


# ---------------------------------------------------------------- Backoff


def test_backoff_grows_to_its_maximum_per_endpoint() -> None:
    b = Backoff(first=1.0, factor=4.0, maximum=60.0)
    assert [b.failed(EP, 0.0) for _ in range(5)] == [1.0, 4.0, 16.0, 60.0, 60.0]
    assert b.failed(OTHER, 0.0) == 1.0  # endpoints are independent


def test_backoff_due_returns_each_endpoint_once_per_failure() -> None:
    b = Backoff()
    b.failed(EP, 10.0)
    b.failed(OTHER, 10.0)
    assert b.due(10.5) == []
    assert sorted(b.due(11.0)) == [EP, OTHER]
    assert b.due(100.0) == []


def test_a_newer_failure_replaces_the_older_wait() -> None:
    b = Backoff()
    b.failed(EP, 0.0)  # due at 1
    b.failed(EP, 0.5)  # due at 4.5: the first schedule is stale
    assert b.due(2.0) == []
    assert b.due(4.5) == [EP]


def test_success_restarts_and_forget_cancels() -> None:
    b = Backoff()
    b.failed(EP, 0.0)
    b.failed(EP, 0.0)
    b.succeeded(EP)
    assert b.failed(EP, 0.0) == 1.0
    b.forget(EP)
    assert b.due(1000.0) == []


# ---------------------------------------------------------------- HandshakeGuard


def test_a_failed_handshake_disconnects_then_reconnects_after_the_backoff() -> None:
    g, sock, counted = guard()
    g.event(FAILED, EP, 0.0)
    assert sock.calls == [("disconnect", EP)]
    assert (g.failures, counted) == (1, ["handshake_failures"])
    g.event(FAILED, EP, 0.1)  # the same failure reported again while waiting: no new delay
    assert g.failures == 1
    g.tick(0.9)
    assert sock.calls == [("disconnect", EP)]
    g.tick(1.0)
    assert sock.calls[-2:] == [("disconnect", EP), ("connect", EP)]


def test_consecutive_failures_wait_longer_and_success_resets() -> None:
    g, sock, _ = guard()
    g.event(FAILED, EP, 0.0)
    g.tick(1.0)
    g.event(FAILED, EP, 1.0)  # second failure: 4 s
    g.tick(4.9)
    assert sock.calls.count(("connect", EP)) == 1
    g.tick(5.0)
    assert sock.calls.count(("connect", EP)) == 2
    g.event(zmq.EVENT_HANDSHAKE_SUCCEEDED, EP, 5.1)
    g.event(FAILED, EP, 6.0)
    g.tick(7.0)  # back to 1 s
    assert sock.calls.count(("connect", EP)) == 3


def test_an_endpoint_no_longer_wanted_is_not_retried() -> None:
    wanted = {EP}
    g, sock, _ = guard(wanted)
    g.event(FAILED, EP, 0.0)
    wanted.clear()  # the peer left meanwhile
    g.tick(10.0)
    assert ("connect", EP) not in sock.calls


def test_a_closed_socket_is_left_alone() -> None:
    g, sock, _ = guard()
    sock.closed = True
    g.event(FAILED, EP, 0.0)
    g.tick(10.0)
    assert sock.calls == []


def test_a_link_libzmq_abandoned_is_connected_again() -> None:
    """A disconnect with no retry within the grace period: libzmq gave up (protocol error)."""
    g, sock, counted = guard()
    g.event(zmq.EVENT_DISCONNECTED, EP, 0.0)
    g.event(zmq.EVENT_DISCONNECTED, OTHER, 0.0)
    g.event(zmq.EVENT_CONNECT_RETRIED, OTHER, 0.2)  # libzmq is retrying this one itself
    g.tick(0.5)
    assert g.abandoned == 0
    g.tick(1.0)
    assert (g.abandoned, counted) == (1, ["links_abandoned"])
    g.tick(2.0)
    assert sock.calls == [("disconnect", EP), ("connect", EP)]
    assert all(ep == EP for _, ep in sock.calls)


def test_reset_forgets_the_backoff() -> None:
    g, sock, _ = guard()
    g.event(FAILED, EP, 0.0)
    g.reset(EP)  # the peer came back on a fresh link
    g.tick(10.0)
    assert ("connect", EP) not in sock.calls
    g.event(FAILED, EP, 10.0)
    assert g.backoff.failed(OTHER, 0.0) == 1.0


def test_a_disconnect_libzmq_already_did_is_tolerated() -> None:
    g, sock, _ = guard()
    sock.fail_disconnect = True
    g.event(FAILED, EP, 0.0)  # does not raise
    sock.fail_disconnect = False
    g.tick(1.0)
    assert sock.calls == [("disconnect", EP), ("connect", EP)]


def test_the_maximum_comes_from_the_settings() -> None:
    g, _, _ = guard(reconnect_backoff_max=5.0)
    assert [g.backoff.failed(EP, 0.0) for _ in range(3)] == [1.0, 4.0, 5.0]
