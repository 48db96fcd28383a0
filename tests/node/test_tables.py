"""The node's pure parts, without sockets: routing table, interest set, inbox table."""

from __future__ import annotations

from aoz._mesh.interest import InterestSet
from aoz._mesh.routing import RoutingTable
from aoz._protocol.inbox import InboxTable
from aoz._protocol.subjects import compile_pattern


def test_routing_exact_then_wildcards_in_order() -> None:
    t: RoutingTable[str] = RoutingTable()
    t.add(compile_pattern("MD.>"), "tail")
    t.add(compile_pattern("MD.NYSE.IBM"), "exact")
    t.add(compile_pattern("^MD\\.[A-Z]+\\.IBM$"), "regex")
    assert t.route(b"MD.NYSE.IBM") == ("exact", "tail", "regex")
    assert t.route(b"MD.LSE.VOD") == ("tail",)
    assert t.route(b"FX.EUR") == ()
    assert len(t) == 3 and sorted(t) == ["exact", "regex", "tail"]


def test_routing_cache_is_invalidated_by_changes() -> None:
    t: RoutingTable[str] = RoutingTable()
    t.add(compile_pattern("A.*"), "a")
    assert t.route(b"A.x") == ("a",)
    assert t.cache[b"A.x"] == ("a",)
    t.add(compile_pattern("A.x"), "ax")
    assert b"A.x" not in t.cache
    assert t.route(b"A.x") == ("ax", "a")
    t.remove(compile_pattern("A.*"), "a")
    assert t.route(b"A.x") == ("ax",)
    t.remove(compile_pattern("A.x"), "ax")
    assert t.route(b"A.x") == () and len(t) == 0


def test_routing_keeps_aoz_traffic_from_wildcards_and_flags_bad_utf8() -> None:
    t: RoutingTable[str] = RoutingTable()
    t.add(compile_pattern(">"), "all")
    assert t.route(b"_INBOX.x") == ()
    assert t.route(b"_NAMING") == ()
    assert t.route(b"\xff\xfe") is None
    assert t.route(b"ok") == ("all",)


def test_routing_cache_is_bounded() -> None:
    t: RoutingTable[str] = RoutingTable(cache_max=10)
    t.add(compile_pattern(">"), "all")
    for i in range(100):
        assert t.route(b"s%d" % i) == ("all",)
        assert len(t.cache) <= 10


def test_same_subscriber_twice_is_listed_once() -> None:
    t: RoutingTable[str] = RoutingTable()
    a = "a"
    t.add(compile_pattern("x"), a)
    t.add(compile_pattern("y"), a)
    assert list(t) == ["a"]
    assert t.clear() == ["a"] and t.route(b"x") == ()


def test_interest_set_follows_events() -> None:
    s = InterestSet()
    assert not s.covers(b"MD.IBM")
    assert s.apply(b"\x01MD.") and not s.apply(b"\x01MD.")
    v = s.version
    assert s.covers(b"MD.IBM") and not s.covers(b"M")
    assert s.apply(b"\x01MD.IBM\x00")
    assert s.apply(b"\x00MD.")
    assert s.covers(b"MD.IBM") and not s.covers(b"MD.IBMX")
    assert s.version == v + 2
    assert not s.apply(b"\x00nope") and not s.apply(b"") and not s.apply(b"\x05x")
    assert len(s) == 1


def test_catch_all_counts_for_publications_not_for_responders() -> None:
    s = InterestSet()
    s.apply(b"\x01")
    assert s.covers(b"SVC.x")
    assert not s.covers(b"SVC.x", responders=True)
    s.apply(b"\x01SVC.")
    assert s.covers(b"SVC.x", responders=True)


def test_routable_needs_the_inbox_filter() -> None:
    uuid = "3669840e-d043-11ea-adc2-fcaa146e6b01"
    handle = f"_INBOX.{uuid}.000000000000000a".encode()
    s = InterestSet()
    s.apply(b"\x01")  # a catch-all never routes replies
    assert not s.routable(handle)
    s.apply(b"\x01_INBOX." + uuid.encode())
    assert s.routable(handle)
    s2 = InterestSet()
    s2.apply(b"\x01_INBOX.")  # an inbox-shaped broader filter (a broker, an OZ peer)
    assert s2.routable(handle)


def test_inbox_table_serials_deadlines_and_drain() -> None:
    uuid = "3669840e-d043-11ea-adc2-fcaa146e6b01"
    t: InboxTable[str] = InboxTable(uuid)
    s1, h1 = t.open("one", deadline=1.0)
    s2, h2 = t.open("two", deadline=5.0)
    assert (s1, s2) == (1, 2)
    assert h1 == f"_INBOX.{uuid}.0000000000000001".encode()
    assert t.lookup(t.serial_of(h2)) == "two"
    assert t.expire(2.0) == ["one"] and len(t) == 1
    assert t.close(s2) == "two" and t.close(s2) is None
    t.open("three", deadline=9.0)
    assert t.drain() == ["three"] and len(t) == 0
