"""The spec's heartbeat rules for one peer connection, as time arithmetic (no sockets).

Any message from the peer counts as a heartbeat. After ``heartbeat`` seconds of silence we
PING; after ``liveness`` heartbeats of silence the connection is given up (the owner reconnects).
An *outage* runs from the first time it is given up until the peer is heard again, so that a
peer that stays away costs one warning, not one per reconnect.
"""

from __future__ import annotations

import time


class Liveness:
    def __init__(self, heartbeat: float, liveness: int) -> None:
        self.heartbeat = heartbeat
        self.liveness = liveness
        self.outage = False
        self._last_heard = self._next_ping = 0.0

    def connected(self) -> None:
        """A new connection: silence is counted from now."""
        self._last_heard = time.monotonic()
        self._next_ping = self._last_heard + self.heartbeat

    def heard(self) -> bool:
        """The peer sent something; True if that ends an outage."""
        self.connected()
        ended, self.outage = self.outage, False
        return ended

    def next_due(self) -> float:
        """When ``lost`` or ``ping_due`` next has something to say."""
        return min(self._next_ping, self._last_heard + self.heartbeat * self.liveness)

    def lost(self, now: float) -> float | None:
        """The seconds of silence, once they reach ``liveness`` heartbeats; else None."""
        silent = now - self._last_heard
        return silent if silent >= self.heartbeat * self.liveness else None

    def ping_due(self, now: float) -> bool:
        """Whether to PING now (and if so, the next PING is a heartbeat later)."""
        if now < self._next_ping:
            return False
        self._next_ping = now + self.heartbeat
        return True
