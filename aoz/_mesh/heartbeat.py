"""The publisher heartbeat task: a node's quiet subjects' last numbers, once an interval.

The node owns it (a task in its :class:`~aoz._mesh.tasks.TaskOwner`, started with the data
plane's readers when ``publisher_heartbeat > 0`` and the node numbers its
publications). Every interval it hands the frame builder's entries and the time to the
pure :class:`~aoz._protocol.heartbeat.HeartbeatSchedule`, encodes what is due into
frames of at most :data:`~aoz._protocol.heartbeat.MAX_FRAME` bytes
(:func:`~aoz._protocol.heartbeat.encode`) and sends them through the data plane's
``send_control`` (now or not at all: a frame a full queue refuses is counted, and the
next tick says the same again). It reads the builder's entries only: the publish hot
path does nothing for heartbeats. While a publish waits for room (``send_policy=
"block"``) its frame is numbered but not sent, so no tick runs: a heartbeat must never
announce a number ahead of the wire. What the receiving side does with them is
:meth:`aoz._mesh.receive.Receiver.heartbeat`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

from .._protocol.builder import FrameBuilder
from .._protocol.heartbeat import HeartbeatSchedule, encode

__all__ = ["Heartbeats"]


class Heartbeats:
    """One node's publisher heartbeats (see the module docstring)."""

    __slots__ = ("_builder", "_busy", "_send", "interval", "refused", "schedule", "sent")

    def __init__(self, builder: FrameBuilder, send: Callable[[bytes], bool], *,
                 interval: float, window: float,
                 busy: Callable[[], bool] = lambda: False) -> None:
        self._builder = builder
        self._send = send
        #: True while numbered frames wait to be sent (SendPath.waiters)
        self._busy = busy
        self.interval = interval
        self.schedule = HeartbeatSchedule(window)
        if interval > 0:  # entries the builder lets go between ticks
            builder.on_release = self.schedule.release
        self.sent = 0  #: heartbeat frames sent
        self.refused = 0  #: heartbeat frames a full queue refused (send_policy="block")

    async def run(self) -> None:
        """Tick every ``interval`` seconds until cancelled (the node's task)."""
        while True:
            await anyio.sleep(self.interval)
            self.tick(time.monotonic())

    def tick(self, now: float) -> int:
        """Send what is due at ``now``; returns how many frames were sent."""
        publisher = self._builder.publisher
        if publisher is None or self._busy():
            return 0  # busy: the schedule is not advanced, the next tick judges
        due = self.schedule.tick(self._builder.entries, now)
        if not due:
            return 0
        sent = 0
        for frame in encode(publisher, [(name.encode(), seq) for name, seq in due]):
            if self._send(frame):
                sent += 1
            else:
                self.refused += 1
        self.sent += sent
        return sent
