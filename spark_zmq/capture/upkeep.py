"""Keeping each of capture's connections going, on the capture thread: a new socket for a
connection that zmq gave up or whose receive failed (this endpoint alone waits and retries when
zmq refuses), gap rows for what the socket monitor reports, and the end of push-back episodes.
One log line per episode (``health``, ``pushback``), never one per message or retry.
"""

from __future__ import annotations

import time

import zmq
from zmq.utils.monitor import recv_monitor_message

from spark_zmq.capture.connections import Connection
from spark_zmq.capture.membership import Membership
from spark_zmq.capture.pushback import PUSH_BACK_SECONDS
from spark_zmq.capture.sockets import Sockets
from spark_zmq.log import logger

#: seconds before capture tries again to reopen a connection that zmq refused to reopen
REOPEN_RETRY_SECONDS = 5.0


class ConnectionUpkeep:
    """The connections of capture ``name`` (``members``, whose sockets ``sockets`` opens)."""

    def __init__(
        self, name: str, sockets: Sockets, members: Membership, max_message_bytes: int
    ) -> None:
        self.name = name
        self._sockets = sockets
        self._members = members
        self.max_message_bytes = max_message_bytes
        self.next_load_check = 0.0

    def on_receive_failure(self, conn: Connection, stopping: bool) -> None:
        """If a receive from ``conn`` failed: a gap row and a log line (paced), and a new
        socket for it unless it is being closed (capture stops, or its endpoint is retired).
        Only this connection pays: the others are not touched."""
        error = conn.buffer.take_error()
        if not error:
            return
        conn.buffer.add_fault(conn.failures.failed(error))
        if not stopping and any(member is conn for member in self._members):
            self.reopen(conn, time.monotonic())

    def next_push_back_check(self) -> float:
        """When to look again at open push-back episodes (inf: none is open)."""
        if any(conn.load.episode is not None for conn in self._members):
            return self.next_load_check
        return float("inf")

    def end_push_backs(self) -> None:
        now = time.monotonic()
        self.next_load_check = now + PUSH_BACK_SECONDS / 4
        for conn in self._members:
            conn.load.check(now, conn.received)

    def on_monitor_event(self, conn: Connection) -> None:
        try:  # none if the socket was reopened since the event was reported
            event = recv_monitor_message(conn.monitor, zmq.NOBLOCK)["event"]
        except zmq.Again:
            return
        if event == zmq.EVENT_DISCONNECTED and self._members.peer_disconnected(conn):
            return
        gap = conn.health.on_event(event)
        if gap is not None:
            conn.buffer.add_fault(gap)

    def reopen_abandoned(self) -> None:
        """A connection zmq gave up (see ``health``) gets a new socket."""
        now = time.monotonic()
        for conn in self._members:
            if conn.health.abandoned(now, self.max_message_bytes):
                self.reopen(conn, now)

    def reopen(self, conn: Connection, now: float) -> None:
        """New sockets for ``conn``; if zmq refuses, this endpoint alone waits and tries
        again (one log line per episode), and the others keep flowing."""
        try:
            self._sockets.reopen(conn)
        except Exception as exc:
            conn.health.recheck_at = now + REOPEN_RETRY_SECONDS
            if not conn.reopen_failing:
                logger.warning(
                    "%s: cannot reconnect to %s (partition %s): %s; trying again every %g s",
                    self.name,
                    conn.endpoint.address,
                    conn.endpoint.key,
                    exc,
                    REOPEN_RETRY_SECONDS,
                )
            conn.reopen_failing = True
            return
        if conn.reopen_failing:
            logger.info("%s: reconnecting to %s again", self.name, conn.endpoint.address)
        conn.reopen_failing = False

    def next_recheck(self) -> float:
        times = [c.health.recheck_at for c in self._members if c.health.recheck_at is not None]
        return min(times, default=float("inf"))
