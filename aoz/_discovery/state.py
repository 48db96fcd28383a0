"""The naming protocol (SPEC §5) as a pure state machine: events and ``now`` in, actions out.

Theory of operation
-------------------
A node learns about its peers from ``_NAMING`` frames relayed by one or more naming
daemons (or, in UDP mode, broadcast datagrams). This module decides *what to do*;
a driver (:mod:`aoz._discovery.driver`, :mod:`aoz._discovery.udp`) owns the sockets and
the clock and carries the actions out. Nothing here does I/O or reads a clock; every
input that depends on time takes ``now`` (seconds, any monotonic clock).

Phases::

    IDLE --start--> ANNOUNCING --own C/c heard--> READY --stop--> STOPPED
                        |                            |
                        +--deadline passed--> FAILED  +--new welcome: re-announce

- ``start(now)``: starts the deadline of ``connect_retries x connect_interval``.
  Without an nsd (``require_welcome=False``, UDP mode) announcing starts at once.
- ``welcome(xsub, now)``: an nsd told us where its XSUB is. A new XSUB endpoint
  (first contact, a second nsd, or an nsd that restarted) -> ``ConnectNamingPub``
  and ``C`` every ``connect_interval`` until we hear our own ``C``/``c`` again.
- A ``W`` is believed only as the *first frame of a naming connection* (the driver
  says so with ``received(frame, now, first=True)``): an nsd writes its welcome
  into a new connection before anything else, and anything it relays comes after.
  Any other ``W`` is counted (``welcomes_refused``), ignored, and answered with
  ``DropNamingConnection``: the connection it came on is closed and opened afresh,
  so a real nsd that restarted (its new welcome arriving on an old connection)
  welcomes us again as the first frame of the new one. Anyone who can publish into
  an nsd can send a ``W``, and believing it would point our naming PUB at their
  endpoint; no window of time is trusted, so a flood of forged ``W`` cannot race an
  nsd's restart.
- ``received(frame, now)``: ``C``/``c`` from an unknown uuid (ours included) ->
  ``ConnectData`` + ``PeerJoined`` + one ``C`` of ours so late joiners learn about
  us; a known uuid only refreshes ``last_seen`` (several nsds deliver duplicates).
  ``D`` -> ``DisconnectData`` + ``PeerLeft`` (but see *goodbyes* below). ``W`` is
  handled as ``welcome`` when it is the first frame of its connection (above).
- ``tick(now)``: repeats ``C`` while announcing, fails at the deadline, sends
  beacons ``c`` every ``beacon_interval`` (0 = none) and expires dead peers.
- ``link_state(endpoint, up, now)``: what the node's data link says about a peer
  (both directions, :mod:`aoz._mesh.liveness`). The link is the evidence, beacons are not
  (anyone who can reach an nsd can replay a dead peer's beacons): a peer (never
  ourselves) whose link is down is expired (``DisconnectData`` + ``PeerExpired``)
  once ``expire_window`` seconds have passed since its link was last seen up -- or
  since it joined, if it never came up -- whatever ``C``/``c`` say. **Bound:** a
  dead peer is listed at most ``expire_window`` plus the driver's link-check period
  (<= 0.5 s) after its link went down: 3.5 s with the defaults.
  ``expire_window`` is ``expire_beacons x beacon_interval``, or ``expire_beacons x
  1 s`` with beacons off (then a peer whose link was never seen up is kept, as OZ
  keeps every peer: there is no evidence either way).
- A peer expired that way is not listed again by an announcement alone: its
  ``C``/``c`` starts a *probe* (``ConnectData``, no ``PeerJoined``), and it is
  listed again (``PeerJoined``) when its link comes up; a probe whose link stays down
  for ``expire_window`` is disconnected, and the next one waits twice as long
  (``expire_window``, x2, ... at most 60 s), so replayed beacons cost at most one
  short connection attempt a minute. At most 4,096 such peers are remembered
  (oldest forgotten first).
- *Behind a cut.* When the link is down because nobody answers at all (``silent``:
  the SUB's connection attempts time out, a cut network or a host that is down; a
  process that has gone leaves a port that refuses at once), the peer is expired
  the same way (``PeerExpired``) but its data connection is kept trying (no
  ``DisconnectData``; a SYN every ~0.6 s) for up to 60 s after the expiry: a healed
  cut brings its data back as soon as the network does, and its link coming up lists
  it again (``PeerJoined``) without waiting for an announcement. A refusal, or the
  60 s, ends it as a probe ends. Counted: ``rejoins`` (kept trying), ``rejoined``.
- ``stop()``: ``D`` once, then every input is ignored.

Hostile or malformed input (an endpoint that is not ``tcp://host:port``, a uuid that
is not a uuid, our own uuid with someone else's endpoint) is counted in
:attr:`NamingState.counters` and ignored; it never produces a ``ConnectData``.
With ``allow_ipc`` (the driver sets it where no OZ program reads the naming plane:
:func:`aoz._mesh.endpoints.ipc_mesh`) an ``ipc://`` endpoint is valid too, from a peer that
names our host (an ipc address means nothing on another host), and so is an ipc
XSUB endpoint in a welcome.

Goodbyes, impostors and the trade-off
-------------------------------------
The naming plane is unauthenticated in OZ's protocol, so a ``D`` or a ``C`` may be
forged by anyone who can reach an nsd. The data link (what the driver reports with
``link_state``) cannot be forged that way, so it is the arbiter:

- A ``D`` for a peer whose link is down (or was never reported up) is applied at once.
  A ``D`` for a peer whose link is *up* only marks it as leaving
  (``goodbyes_deferred``): its data connection is kept. The goodbye is confirmed
  (``DisconnectData`` + ``PeerLeft``) when its link goes down -- a peer that really
  leaves closes its data PUB right after its ``D`` -- or, with beacons on, when it has
  sent no ``C``/``c`` for ``expire_window`` seconds after the ``D``. A ``C``/``c`` from
  it cancels the goodbye (``goodbyes_refuted``). So a forged ``D`` drops no data;
  the price is that a real departure is reported when the link check notices the
  closed socket (the driver polls every <= 0.5 s) instead of at once, and that a peer
  which says ``D`` but keeps its data PUB open (neither aoz nor OZ does) stays
  connected until its link drops (beacons off) or one ``expire_window`` (beacons on).
- A new uuid announcing the endpoint of a known peer supersedes it only when the
  holder looks dead: its link is down, or it has been silent for ``expire_window``
  (the usual story: a process died without ``D`` and its port was reused). While the
  holder's link is up and it is not silent, the newcomer is a conflict
  (``naming_conflicts``) and is ignored. Our own endpoint is never given away.

>>> st = NamingState(uuid="3669840e-d043-11ea-adc2-fcaa146e6b01",
...                  endpoint="tcp://127.0.0.1:4000", program="p", host="h", pid=1)
>>> st.start(0.0)
[]
>>> st.welcome("tcp://127.0.0.1:5000", 0.0)
[ConnectNamingPub(endpoint='tcp://127.0.0.1:5000'), SendNaming(type=<NamingType.CONNECT: b'C'>)]
>>> [type(a).__name__ for a in st.received(st.frame(NamingType.CONNECT), 0.05)]
['ConnectData', 'PeerJoined', 'Ready']
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TypeAlias

import msgspec

from .._mesh.endpoints import is_ipc_endpoint, is_oz_endpoint
from .._protocol.naming import NamingFrame, NamingType, is_uuid
from .peers import Peer

__all__ = [
    "Action",
    "ConnectData",
    "ConnectNamingPub",
    "DisconnectData",
    "DropNamingConnection",
    "Failed",
    "NamingState",
    "PeerExpired",
    "PeerJoined",
    "PeerLeft",
    "Phase",
    "Ready",
    "SendNaming",
]


#: peers expired on link evidence that are remembered (their beacons then only probe)
_EXPIRED_MAX = 4096
#: longest wait between two probes of such a peer's link, seconds
_PROBE_MAX = 60.0
#: how long the link of a peer expired behind a silent network (a cut) is kept trying
_REJOIN_MAX = 60.0

# ---------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class ConnectNamingPub:
    """Connect the naming PUB to an nsd's XSUB endpoint."""

    endpoint: str


@dataclass(frozen=True, slots=True)
class SendNaming:
    """Send our own naming frame of this type (see :meth:`NamingState.frame`)."""

    type: NamingType


@dataclass(frozen=True, slots=True)
class DropNamingConnection:
    """Close the naming connection that delivered this frame and open it afresh (it
    delivered a ``W`` that was not its first frame)."""


@dataclass(frozen=True, slots=True)
class ConnectData:
    """Connect the data SUB to a peer's PUB endpoint."""

    endpoint: str


@dataclass(frozen=True, slots=True)
class DisconnectData:
    """Disconnect the data SUB from a peer's PUB endpoint."""

    endpoint: str


@dataclass(frozen=True, slots=True)
class PeerJoined:
    peer: Peer


@dataclass(frozen=True, slots=True)
class PeerLeft:
    peer: Peer


@dataclass(frozen=True, slots=True)
class PeerExpired:
    peer: Peer


@dataclass(frozen=True, slots=True)
class Ready:
    """Our own announcement came back: the node may be used."""


@dataclass(frozen=True, slots=True)
class Failed:
    """Announcing never succeeded before the deadline."""

    reason: str
    welcomed: bool


Action: TypeAlias = (
    ConnectNamingPub
    | DropNamingConnection
    | SendNaming
    | ConnectData
    | DisconnectData
    | PeerJoined
    | PeerLeft
    | PeerExpired
    | Ready
    | Failed
)


class Phase(enum.Enum):
    IDLE = "idle"
    ANNOUNCING = "announcing"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass(slots=True)
class _Entry:
    peer: Peer
    seen: float  # last C/c, in the state machine's clock
    link_seen: float | None = None  # last time the data link was reported up
    link_up: bool = False
    silent: bool = False  # connection attempts get no answer (a cut, not a dead process)
    leaving: float | None = None  # when a D arrived while the link was up
    joined: float = 0.0  # when it was listed


@dataclass(slots=True)
class _Expired:
    """A peer expired on its link's evidence: only its link coming up lists it again."""

    endpoint: str
    next_probe: float  # no probe before this
    delay: float  # wait after the next failed probe
    probe_since: float | None = None  # a probe (a data connection attempt) is running
    frame: NamingFrame | None = None  # its announcement, to list it when its link is up
    rejoin_until: float | None = None  # the probe that follows an expiry behind a cut


@dataclass(slots=True)
class _Counters:
    values: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            (
                "naming_in",
                "naming_malformed",
                "naming_conflicts",
                "welcomes",
                "welcomes_refused",
                "goodbyes_deferred",
                "goodbyes_refuted",
                "peers_joined",
                "peers_left",
                "peers_expired",
                "probes",
                "rejoins",
                "rejoined",
            ),
            0,
        )
    )

    def add(self, name: str, n: int = 1) -> None:
        self.values[name] = self.values.get(name, 0) + n


class NamingState:
    """The naming protocol of one node. See the module docstring.

    ``wall_offset`` is added to ``now`` for the :attr:`Peer.last_seen` values handed
    out, so a driver can run the machine on a monotonic clock and still report
    ``time.time()`` values to users.
    """

    def __init__(
        self,
        *,
        uuid: str,
        endpoint: str,
        program: str,
        host: str,
        pid: int,
        connect_interval: float = 0.1,
        connect_retries: int = 100,
        beacon_interval: float = 1.0,
        expire_beacons: int = 3,
        require_welcome: bool = True,
        wall_offset: float = 0.0,
        allow_ipc: bool = False,
    ) -> None:
        self.uuid = uuid
        self.allow_ipc = allow_ipc
        self.endpoint = endpoint
        self.program = program
        self.host = host
        self.pid = pid
        self.connect_interval = connect_interval
        self.connect_retries = connect_retries
        self.beacon_interval = beacon_interval
        self.expire_beacons = expire_beacons
        self.require_welcome = require_welcome
        self.wall_offset = wall_offset
        self.phase = Phase.IDLE
        self._counters = _Counters()
        self._peers: dict[str, _Entry] = {}
        self._by_endpoint: dict[str, str] = {}  # data endpoint -> uuid holding it
        self._expired: dict[str, _Expired] = {}  # uuid -> peers expired on link evidence
        self._probing: dict[str, str] = {}  # endpoint -> uuid of the expired peer probed
        self._xsubs: list[str] = []
        self._deadline = 0.0
        # re-announce C until our own C/c comes back (after start and each new welcome)
        self._announce = False
        self._announce_sent = 0
        self._next_announce = 0.0
        self._next_beacon = 0.0

    # ---------------------------------------------------------------- views

    @property
    def counters(self) -> dict[str, int]:
        """A copy of the counters (``naming_in``, ``naming_malformed``, ``peers_expired``...)."""
        return dict(self._counters.values)

    @property
    def peers(self) -> list[Peer]:
        """Every known node, this one included once its own announcement came back."""
        offset = self.wall_offset
        return [
            msgspec.structs.replace(e.peer, last_seen=e.seen + offset) for e in self._peers.values()
        ]

    @property
    def xsub_endpoints(self) -> list[str]:
        """The nsd XSUB endpoints the naming PUB was told to connect to."""
        return list(self._xsubs)

    @property
    def expire_window(self) -> float:
        """Seconds of silence (and a down link) after which a peer is expired."""
        interval = self.beacon_interval if self.beacon_interval > 0 else 1.0
        return self.expire_beacons * interval

    def peer_endpoints(self) -> list[str]:
        """Data endpoints of the peers (and probes) whose link state the driver should
        report."""
        out = [e.peer.endpoint for u, e in self._peers.items() if u != self.uuid]
        out.extend(x.endpoint for x in self._expired.values() if x.probe_since is not None)
        return out

    def knows_endpoint(self, endpoint: str) -> bool:
        """Whether a known peer (or this node) holds ``endpoint``."""
        return endpoint in self._by_endpoint or endpoint == self.endpoint

    def uuid_at(self, endpoint: str) -> str | None:
        """The uuid announced at ``endpoint``: ours, a listed peer's, or a probed one's
        (what the data SUB is about to connect to)."""
        if endpoint == self.endpoint:
            return self.uuid
        uuid = self._by_endpoint.get(endpoint)
        if uuid is not None:
            return uuid
        return next((u for u, x in self._expired.items() if x.endpoint == endpoint), None)

    def frame(self, ftype: NamingType) -> NamingFrame:
        """Our own naming frame of the given type."""
        return NamingFrame(ftype, self.program, self.host, self.pid, self.uuid, self.endpoint)

    # ---------------------------------------------------------------- inputs

    def start(self, now: float) -> list[Action]:
        """Begin announcing; the deadline is ``connect_retries x connect_interval`` away."""
        if self.phase is not Phase.IDLE:
            return []
        self.phase = Phase.ANNOUNCING
        self._deadline = now + self.connect_retries * self.connect_interval
        if self.require_welcome:
            return []
        return self._begin_announcing(now)

    def welcome(self, xsub_endpoint: str, now: float) -> list[Action]:
        """An nsd's welcome named its XSUB endpoint."""
        if self.phase in (Phase.IDLE, Phase.FAILED, Phase.STOPPED):
            return []
        ok = is_oz_endpoint(xsub_endpoint) or (self.allow_ipc and is_ipc_endpoint(xsub_endpoint))
        if not ok or not self.require_welcome:
            # without an nsd (UDP mode) a welcome can only be noise or mischief
            self._counters.add("naming_malformed")
            return []
        if xsub_endpoint in self._xsubs:
            return []
        self._counters.add("welcomes")
        self._xsubs.append(xsub_endpoint)
        out: list[Action] = [ConnectNamingPub(xsub_endpoint)]
        out.extend(self._begin_announcing(now))
        return out

    def forget_xsub(self, xsub_endpoint: str) -> None:
        """The driver dropped a dead nsd's XSUB (a restarted nsd welcomed us on a new
        one): a later welcome naming it again is new again."""
        if xsub_endpoint in self._xsubs:
            self._xsubs.remove(xsub_endpoint)

    def received(self, frame: NamingFrame, now: float, *, first: bool = False) -> list[Action]:
        """A naming frame arrived (already decoded); ``first``: it is the first frame of
        the naming connection it came on (only such a ``W`` is believed)."""
        if self.phase in (Phase.IDLE, Phase.FAILED, Phase.STOPPED):
            return []
        self._counters.add("naming_in")
        if frame.type is NamingType.WELCOME:
            return self._received_welcome(frame, now, first)
        if not is_uuid(frame.uuid) or not self._reachable(frame):
            self._counters.add("naming_malformed")
            return []
        if frame.type is NamingType.DISCONNECT:
            return self._disconnect(frame, now)
        return self._announced(frame, now)

    def _reachable(self, frame: NamingFrame) -> bool:
        """Whether the frame's endpoint is one this node may connect to (module docstring)."""
        if is_oz_endpoint(frame.endpoint):
            return True
        return self.allow_ipc and frame.host == self.host and is_ipc_endpoint(frame.endpoint)

    def tick(self, now: float) -> list[Action]:
        """Time passed: repeat announcements, check the deadline, beacon, expire peers."""
        out: list[Action] = []
        if self.phase is Phase.ANNOUNCING and now >= self._deadline:
            self.phase = Phase.FAILED
            welcomed = bool(self._xsubs) or not self.require_welcome
            if welcomed:
                reason = "no naming daemon forwarded this node's announcement"
            else:
                reason = "no naming daemon answered (no welcome received)"
            return [Failed(reason, welcomed)]
        if self.phase not in (Phase.ANNOUNCING, Phase.READY):
            return out
        if self._announce and now >= self._next_announce:
            if self.phase is Phase.READY and self._announce_sent >= self.connect_retries:
                self._announce = False  # nobody forwards our C; beacons keep trying
            else:
                out.append(SendNaming(NamingType.CONNECT))
                self._announce_sent += 1
                self._next_announce = max(self._next_announce + self.connect_interval, now)
        if self.phase is Phase.READY:
            if self.beacon_interval > 0 and now >= self._next_beacon:
                out.append(SendNaming(NamingType.BEACON))
                self._next_beacon = max(self._next_beacon + self.beacon_interval, now)
            out.extend(self._expire(now))
        return out

    def link_state(
        self, endpoint: str, up: bool, now: float, *, silent: bool = False
    ) -> list[Action]:
        """The data SUB's link to ``endpoint`` is (``up``) or is not connected;
        ``silent``: its connection attempts get no answer at all (a cut network or a
        host that is down, not a process that has gone: a closed port refuses)."""
        uuid = self._by_endpoint.get(endpoint)
        if self.phase is not Phase.READY:
            return []
        if uuid is None:
            return self._probed(endpoint, up, now, silent)
        if uuid == self.uuid:
            return []
        entry = self._peers[uuid]
        entry.link_up = up
        entry.silent = silent and not up
        if up:
            entry.link_seen = now
            return []
        if entry.leaving is not None:  # the goodbye it sent is confirmed
            return self._forget(uuid, PeerLeft(entry.peer), "peers_left")
        return self._expire(now, only=uuid)

    def stop(self) -> list[Action]:
        """Leave: one ``D`` if we ever announced, then ignore every input."""
        announced = self.phase in (Phase.ANNOUNCING, Phase.READY) and (
            bool(self._xsubs) or not self.require_welcome
        )
        self.phase = Phase.STOPPED
        self._announce = False
        return [SendNaming(NamingType.DISCONNECT)] if announced else []

    # ---------------------------------------------------------------- internals

    def _received_welcome(self, frame: NamingFrame, now: float, first: bool) -> list[Action]:
        if not self.require_welcome:
            return self.welcome(frame.endpoint, now)  # counted as malformed there
        if not first:
            self._counters.add("welcomes_refused")
            return [DropNamingConnection()]
        return self.welcome(frame.endpoint, now)

    def _begin_announcing(self, now: float) -> list[Action]:
        self._announce = True
        self._announce_sent = 1
        self._next_announce = now + self.connect_interval
        return [SendNaming(NamingType.CONNECT)]

    def _peer(self, frame: NamingFrame, now: float) -> Peer:
        return Peer(
            uuid=frame.uuid,
            program=frame.program,
            host=frame.host,
            pid=frame.pid,
            endpoint=frame.endpoint,
            last_seen=now + self.wall_offset,
        )

    def _announced(self, frame: NamingFrame, now: float) -> list[Action]:
        out: list[Action] = []
        own = frame.uuid == self.uuid
        if own and frame.endpoint != self.endpoint:
            # someone announces our uuid with another address: never connect to it
            self._counters.add("naming_conflicts")
            return out
        entry = self._peers.get(frame.uuid)
        if entry is not None:
            if entry.peer.endpoint != frame.endpoint:
                self._counters.add("naming_conflicts")
                return out
            entry.seen = now
            if entry.leaving is not None:  # alive after all: the D was forged or stale
                entry.leaving = None
                self._counters.add("goodbyes_refuted")
            if own:
                out.extend(self._heard_own(now))
            return out
        if not own and frame.endpoint == self.endpoint:
            self._counters.add("naming_conflicts")  # our endpoint is ours while we run
            return out
        expired = self._expired.get(frame.uuid)
        if expired is not None and expired.endpoint == frame.endpoint:
            return self._probe(expired, frame, now)
        # a new uuid; a previous holder of the same endpoint that looks dead (a
        # process that died without D, whose port was reused) is superseded
        previous = self._by_endpoint.get(frame.endpoint)
        if previous is not None:
            holder = self._peers[previous]
            if holder.link_up and now - holder.seen <= self.expire_window:
                self._counters.add("naming_conflicts")  # the holder is alive: an impostor
                return out
            old = self._peers.pop(previous)
            self._counters.add("peers_expired")
            out.append(PeerExpired(old.peer))
        gone = self._expired.pop(frame.uuid, None)
        if gone is not None and self._probing.get(gone.endpoint) == frame.uuid:
            del self._probing[gone.endpoint]  # it moved: let go of the old address
            out.append(DisconnectData(gone.endpoint))
        out.append(ConnectData(frame.endpoint))
        out.extend(self._list(frame, now))
        # tell the newcomer about us (OZ's late-joiner rule); our own first C
        # needs no echo
        if own:
            out.extend(self._heard_own(now))
        return out

    def _list(self, frame: NamingFrame, now: float) -> list[Action]:
        """Record a peer; tell it about us (OZ's late-joiner rule; our own first C
        needs no echo)."""
        peer = self._peer(frame, now)
        self._peers[frame.uuid] = _Entry(peer=peer, seen=now, joined=now)
        self._by_endpoint[frame.endpoint] = frame.uuid
        prober = self._probing.pop(frame.endpoint, None)
        if prober is not None and (x := self._expired.get(prober)) is not None:
            # a probe (or a rejoin behind a cut) had that endpoint's connection: it is
            # the listed peer's now, and ends with that peer
            x.probe_since = x.rejoin_until = None
        self._counters.add("peers_joined")
        out: list[Action] = [PeerJoined(peer)]
        if frame.uuid != self.uuid:
            out.append(SendNaming(NamingType.CONNECT))
        return out

    def _probe(self, x: _Expired, frame: NamingFrame, now: float) -> list[Action]:
        """An announcement from a peer expired on link evidence: try its link (at most
        one probe at a time, spaced by a doubling delay), list it only if it comes up."""
        x.frame = frame
        if x.probe_since is not None or now < x.next_probe:
            return []
        if frame.endpoint in self._by_endpoint or frame.endpoint in self._probing:
            return []  # someone else holds that endpoint now
        x.probe_since = now
        self._probing[frame.endpoint] = frame.uuid
        self._counters.add("probes")
        return [ConnectData(frame.endpoint)]

    def _probed(
        self, endpoint: str, up: bool, now: float, silent: bool = False
    ) -> list[Action]:
        """Link state of an endpoint that no listed peer holds: a probe's outcome."""
        uuid = self._probing.get(endpoint)
        x = None if uuid is None else self._expired.get(uuid)
        if uuid is None or x is None or x.probe_since is None:
            return []
        if up and x.frame is not None:  # it is alive after all: list it again
            if x.rejoin_until is not None:
                self._counters.add("rejoined")
            del self._expired[uuid]
            del self._probing[endpoint]
            out = self._list(x.frame, now)
            self._peers[uuid].link_up = True
            self._peers[uuid].link_seen = now
            return out
        if x.rejoin_until is not None:
            if silent and now < x.rejoin_until:
                return []  # still cut off: keep trying its link
            x.rejoin_until = None  # refused (gone after all), or tried long enough
            return self._end_probe(x, now)
        if now - x.probe_since > self.expire_window:
            return self._end_probe(x, now)
        return []

    def _end_probe(self, x: _Expired, now: float) -> list[Action]:
        """Let go of a probed link; the next probe waits twice as long."""
        x.probe_since = None
        self._probing.pop(x.endpoint, None)
        x.next_probe = now + x.delay
        x.delay = min(2 * x.delay, _PROBE_MAX)
        return [DisconnectData(x.endpoint)]

    def _heard_own(self, now: float) -> list[Action]:
        self._announce = False
        if self.phase is Phase.ANNOUNCING:
            self.phase = Phase.READY
            self._next_beacon = now + self.beacon_interval
            return [Ready()]
        return []

    def _disconnect(self, frame: NamingFrame, now: float) -> list[Action]:
        entry = self._peers.get(frame.uuid)
        if entry is None or frame.uuid == self.uuid:
            return []
        if entry.peer.endpoint != frame.endpoint:
            self._counters.add("naming_conflicts")
            return []
        if entry.link_up and self.phase is Phase.READY:
            # alive as far as the data plane can tell: keep its data until it confirms
            if entry.leaving is None:
                entry.leaving = now
                self._counters.add("goodbyes_deferred")
            return []
        return self._forget(frame.uuid, PeerLeft(entry.peer), "peers_left")

    def _forget(self, uuid: str, event: PeerLeft | PeerExpired, counter: str) -> list[Action]:
        entry = self._peers.pop(uuid)
        self._by_endpoint.pop(entry.peer.endpoint, None)
        self._counters.add(counter)
        return [DisconnectData(entry.peer.endpoint), event]

    def _expire(self, now: float, only: str | None = None) -> list[Action]:
        window = self.expire_window
        beacons = self.beacon_interval > 0
        out: list[Action] = []
        candidates = [only] if only is not None else list(self._peers)
        for uuid in candidates:
            entry = self._peers[uuid]
            if uuid == self.uuid:
                continue
            said_d = entry.leaving
            if said_d is not None and beacons and now - max(said_d, entry.seen) > window:
                # said D and has not beaconed since: believe it although its link is up
                out.extend(self._forget(uuid, PeerLeft(entry.peer), "peers_left"))
                continue
            if entry.link_up:
                continue
            if not beacons and entry.link_seen is None:
                continue  # beacons off and the link was never up: no evidence either way
            # the link's evidence, not the beacons' (which anyone can replay)
            last = entry.joined if entry.link_seen is None else entry.link_seen
            if now - last > window:
                out.extend(self._expire_on_link(uuid, entry, now))
        if only is None:
            for x in list(self._expired.values()):  # probes whose link never came up
                if x.probe_since is None:  # (a peer listed on its endpoint ended it)
                    continue
                if x.rejoin_until is not None:
                    if now >= x.rejoin_until:
                        out.extend(self._probed(x.endpoint, False, now))
                elif now - x.probe_since > window:
                    out.extend(self._probed(x.endpoint, False, now))
        return out

    def _expire_on_link(self, uuid: str, entry: _Entry, now: float) -> list[Action]:
        """Expire a peer on its link's evidence. Behind a silent network (a cut: its
        connection attempts get no answer, where a port nobody listens on would refuse)
        its data connection is kept trying for up to :data:`_REJOIN_MAX` seconds, so a
        healed cut brings its data back as soon as the network does, and its link
        coming up lists it again; otherwise its link is let go of at once."""
        peer = entry.peer
        out: list[Action]
        if not entry.silent:
            out = self._forget(uuid, PeerExpired(peer), "peers_expired")
            self._remember_expired(uuid, peer, now, out)
            return out
        del self._peers[uuid]
        self._by_endpoint.pop(peer.endpoint, None)
        self._counters.add("peers_expired")
        self._counters.add("rejoins")
        out = [PeerExpired(peer)]
        x = self._remember_expired(uuid, peer, now, out)
        if peer.endpoint in self._probing:  # another expired uuid's probe has that link
            return out
        x.probe_since = now
        self._probing[peer.endpoint] = uuid
        x.rejoin_until = now + _REJOIN_MAX
        return out

    def _remember_expired(
        self, uuid: str, peer: Peer, now: float, out: list[Action]
    ) -> _Expired:
        if len(self._expired) >= _EXPIRED_MAX:
            key = next(iter(self._expired))
            oldest = self._expired.pop(key)
            if self._probing.get(oldest.endpoint) == key:
                del self._probing[oldest.endpoint]
                if oldest.endpoint not in self._by_endpoint:
                    out.append(DisconnectData(oldest.endpoint))  # its probe ends with it
        window = self.expire_window
        # its last announcement as we knew it: the link's evidence alone may list it again
        frame = NamingFrame(NamingType.CONNECT, peer.program, peer.host, peer.pid, peer.uuid,
                            peer.endpoint)
        x = self._expired[uuid] = _Expired(peer.endpoint, next_probe=now, delay=window,
                                           frame=frame)
        return x
