"""aoz._mesh.endpoints: parsing and checking tcp/ipc addresses, the bind address, the OZ rule."""

from __future__ import annotations

import pytest

from aoz._mesh.endpoints import (
    IPC_PATH_MAX,
    Endpoint,
    bind_endpoint,
    connectable,
    daemon_endpoint,
    ipc_dir,
    ipc_mesh,
    is_aoz_endpoint,
    is_ipc_endpoint,
    is_oz_endpoint,
    parse_endpoint,
)
from aoz.config import Settings
from aoz.errors import ConfigError, UsageError

UUID = "3669840e-d043-11ea-adc2-fcaa146e6b01"


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("tcp://127.0.0.1:5756", Endpoint("tcp", "127.0.0.1:5756", "127.0.0.1", 5756)),
        ("tcp://[::1]:1", Endpoint("tcp", "[::1]:1", "[::1]", 1)),
        ("tcp://host-1.example.com:65535", Endpoint("tcp", "host-1.example.com:65535",
                                                    "host-1.example.com", 65535)),
        ("ipc:///tmp/x.ipc", Endpoint("ipc", "/tmp/x.ipc")),
        ("ipc://rel/x", Endpoint("ipc", "rel/x")),
        ("ipc://@abstract", Endpoint("ipc", "@abstract")),
    ],
)
def test_connect_addresses(text: str, parsed: Endpoint) -> None:
    assert parse_endpoint(text) == parsed
    assert str(parsed) == text
    assert is_aoz_endpoint(text)
    assert is_oz_endpoint(text) is (parsed.transport == "tcp")
    assert is_ipc_endpoint(text) is (parsed.transport == "ipc")


@pytest.mark.parametrize("text", ["tcp://*:5556", "tcp://0.0.0.0:*", "tcp://127.0.0.1:0",
                                  "ipc://*", "tcp://eth0:*"])
def test_bind_only_addresses(text: str) -> None:
    assert str(parse_endpoint(text, bind=True)) == text
    with pytest.raises(ConfigError, match="is for binding"):
        parse_endpoint(text)
    assert not is_aoz_endpoint(text)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "aoz speaks"),
        ("udp://1.2.3.4:5", "aoz speaks"),
        ("inproc://x", "aoz speaks"),
        ("127.0.0.1:5756", "aoz speaks"),
        ("tcp://127.0.0.1", "tcp://host:port"),
        ("tcp://127.0.0.1:65536", "1..65535"),
        ("tcp://127.0.0.1:57x6", "1..65535"),
        ("tcp://a b:1", "no spaces"),
        ("tcp://127.0.0.1:5756\n", "no spaces"),
        ("tcp://::1:5", "bracketed IPv6"),
        ("ipc://", "ipc:///path"),
        ("ipc://@", "ipc:///path"),
        ("ipc:///" + "x" * IPC_PATH_MAX, "at most 107 bytes"),
    ],
)
def test_bad_addresses_say_what_is_accepted(text: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_endpoint(text, bind=True)
    assert not is_aoz_endpoint(text)


def test_not_a_string() -> None:
    with pytest.raises(ConfigError, match="must be a str"):
        parse_endpoint(5756)  # type: ignore[arg-type]


def test_connectable() -> None:
    assert connectable("tcp://0.0.0.0:1") == "tcp://127.0.0.1:1"
    assert connectable("tcp://[::]:1") == "tcp://[::1]:1"
    assert connectable("ipc:///tmp/x") == "ipc:///tmp/x"
    assert connectable("tcp://10.0.0.1:1") == "tcp://10.0.0.1:1"


def test_bind_endpoint_per_mode_and_transport() -> None:
    assert bind_endpoint(Settings(), UUID) == "tcp://127.0.0.1:*"
    assert bind_endpoint(Settings(mode="udp", publish_address="0.0.0.0"), UUID) == "tcp://0.0.0.0:*"
    s = Settings(mode="udp", transport="ipc", ipc_dir="/run/aoz/")
    assert bind_endpoint(s, UUID) == f"ipc:///run/aoz/aoz-{UUID}.ipc"
    ipc_naming = Settings(naming=["ipc:///run/nsd"], transport="ipc")
    env = {"XDG_RUNTIME_DIR": "/run/user/7"}
    assert bind_endpoint(ipc_naming, UUID, env) == f"ipc:///run/user/7/aoz-{UUID}.ipc"
    assert ipc_dir(ipc_naming, {}) == "/tmp"
    assert ipc_dir(ipc_naming, {"TMPDIR": "/var/tmp/"}) == "/var/tmp"
    with pytest.raises(ConfigError, match="shorter directory"):
        bind_endpoint(Settings(mode="udp", transport="ipc", ipc_dir="/" + "d" * 80), UUID)
    for static in (Settings(mode="static", bind=["tcp://127.0.0.1:*"]),
                   Settings(mode="broker", broker_pub="tcp://h:1", broker_sub="tcp://h:2")):
        with pytest.raises(UsageError, match="no chosen bind address"):
            bind_endpoint(static, UUID)


def test_the_oz_rule() -> None:
    assert ipc_mesh(Settings(mode="udp"))
    assert ipc_mesh(Settings(naming=["ipc:///run/nsd"]))
    assert not ipc_mesh(Settings())  # an nsd on tcp may relay to OZ programs
    assert not ipc_mesh(Settings(naming=["ipc:///run/nsd", "tcp://127.0.0.1:5756"]))
    # static mode announces nothing
    assert not ipc_mesh(Settings(mode="static", bind=["ipc:///tmp/x"]))
    with pytest.raises(ConfigError, match="OZ programs"):
        Settings(transport="ipc")
    with pytest.raises(ConfigError, match="OZ programs"):
        Settings(naming=["ipc:///run/nsd", "tcp://127.0.0.1:5756"], transport="ipc")


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("bind", ["tcp://127.0.0.1"], "bind endpoint"),
        ("connect", ["tcp://*:1"], "connect endpoint"),
        ("naming", ["udp://1.2.3.4:5"], "naming endpoint"),
        ("broker_pub", "tcp://h", "broker_pub"),
        ("publish_address", "a b", "publish_address"),
        ("transport", "udp", "transport"),
    ],
)
def test_settings_check_every_endpoint(field: str, value: object, words: str) -> None:
    base: dict[str, object] = {"broker_sub": "tcp://h:2"} if field == "broker_pub" else {}
    with pytest.raises(ConfigError, match=words):
        Settings(**{field: value, **base})  # type: ignore[arg-type]


def test_settings_accept_ipc_in_static_and_broker_modes() -> None:
    assert Settings(mode="static", bind=["ipc:///tmp/a"], connect=["ipc://@b"]).bind
    assert Settings(mode="broker", broker_pub="ipc:///tmp/b.pub", broker_sub="ipc:///tmp/b.sub")


def test_daemon_endpoint() -> None:
    assert daemon_endpoint("127.0.0.1", 5756) == "tcp://127.0.0.1:5756"
    assert daemon_endpoint("0.0.0.0", 0) == "tcp://0.0.0.0:*"
    assert daemon_endpoint("ipc:///run/nsd", 5756) == "ipc:///run/nsd"
    assert daemon_endpoint("ipc:///run/b", 0, suffix=".pub") == "ipc:///run/b.pub"
    with pytest.raises(ConfigError, match="whole ipc"):
        daemon_endpoint("tcp://127.0.0.1:1", 0)
