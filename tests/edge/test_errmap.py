"""The one ZeroMQ error map (aoz._mesh.errmap): which aoz error, and a message that helps."""

from __future__ import annotations

import errno
import logging

import pytest
import zmq

from aoz._mesh.errmap import mapped, tolerated, translate
from aoz.errors import AozError, ClosedError, ConfigError, TransportError


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (zmq.EINVAL, ConfigError),
        (zmq.ETERM, ClosedError),
        (zmq.ENOTSOCK, ClosedError),
        (zmq.EADDRINUSE, TransportError),
        (zmq.EPROTONOSUPPORT, TransportError),
        (errno.ENOENT, TransportError),
        (zmq.EHOSTUNREACH, TransportError),
    ],
)
def test_translate_decides_the_kind(code: int, kind: type[AozError]) -> None:
    err = translate(zmq.ZMQError(code), "cannot bind x")
    assert type(err) is kind
    assert str(err).startswith("cannot bind x: ")


def test_message_says_what_to_do() -> None:
    assert "choose another port" in str(translate(zmq.ZMQError(zmq.EADDRINUSE), "bind"))
    assert "check the endpoint" in str(translate(zmq.ZMQError(zmq.EINVAL), "bind"))


def test_mapped_raises_from_the_zmq_error() -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUB)
    try:
        with pytest.raises(ConfigError) as info, mapped("cannot bind the publisher"):
            sock.bind("tcp://127.0.0.1:notaport")
        assert isinstance(info.value.__cause__, zmq.ZMQError)
    finally:
        sock.close(linger=0)
        ctx.term()


def test_mapped_on_a_closed_socket_is_closed_error() -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUB)
    sock.close(linger=0)
    ctx.term()
    with pytest.raises(ClosedError), mapped("cannot send"):
        sock.send(b"x")


def test_mapped_lets_other_errors_through() -> None:
    with pytest.raises(KeyError), mapped("anything"):
        raise KeyError("x")


def test_tolerated_logs_and_continues(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="aoz.zmq")
    with tolerated("cannot disconnect", "the peer is already gone"):
        raise zmq.ZMQError(errno.ENOENT)
    assert "cannot disconnect" in caplog.text
    assert "the peer is already gone" in caplog.text
