"""A connection's health, as its zmq monitor reports it: handshakes, drops, reconnects.

- A peer that accepts the connection but never completes the ZMTP handshake (stalled, not a zmq
  peer, or refusing our CURVE keys) is retried by zmq every ``HANDSHAKE_SECONDS``; the failure
  is logged once until a handshake succeeds, and an attempt that never got through is not a gap
  (nothing could have been received on it).
- A connection that was up, dropped and re-established is a gap: its text goes into the
  partition as a fault row, with the time of the drop and its cause.
- zmq does not reconnect after a protocol error (a message over ``ZMQ_MAXMSGSIZE``): it reports
  DISCONNECTED and nothing more. A drop with no reconnect attempt within ``RECONNECT_CHECK`` is
  *abandoned*; the loop then opens a new socket.
"""

from __future__ import annotations

import time

import zmq

from spark_zmq.log import logger
from spark_zmq.units import utc_text

#: seconds a peer has to complete the ZMTP (and CURVE) handshake before zmq retries it
HANDSHAKE_SECONDS = 10
#: seconds after a drop by which zmq shows a reconnect attempt unless it gave the connection up
RECONNECT_CHECK = 0.5
#: the monitor events a connection's health follows
MONITORED = (
    zmq.EVENT_CONNECTED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_CONNECT_DELAYED
    | zmq.EVENT_CONNECT_RETRIED
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
HANDSHAKE_FAILURES: dict[int, str] = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: (
        f"did not complete the zmq handshake within {HANDSHAKE_SECONDS} s (a stalled peer, or "
        f"not a zmq peer)"
    ),
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: (
        "broke the zmq handshake protocol (not a zmq peer, or a socket type that does not fit)"
    ),
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: (
        "refused our CURVE handshake (check curveServerKey, and that the peer allows our key)"
    ),
}


class Health:
    """What one endpoint's monitor has said: the state of its connection."""

    def __init__(self, name: str, address: str, key: str) -> None:
        self.name, self.address, self.key = name, address, key
        self.disconnected_at: int | None = None  # when a connection that was up dropped (ns)
        self.drop_cause: str | None = None  # why, when capture knows better than "lost"
        self.recheck_at: float | None = None  # when to look for zmq's reconnect attempt
        self.connected_once = False  # the first connection was logged
        self.handshake_failures = 0  # failed attempts since the last success

    @property
    def up(self) -> bool:
        """Connected, its handshake not failing (what the metrics count as live)."""
        return self.connected_once and self.disconnected_at is None and not self.handshake_failures

    def on_event(self, event: int) -> str | None:
        """Follow one monitor event; the text of a gap row when a drop turned out to be one."""
        if event in HANDSHAKE_FAILURES:
            self.handshake_failures += 1
            if self.handshake_failures == 1:
                logger.warning(
                    "%s: %s (partition %s) %s; zmq keeps retrying, logged again only "
                    "once a handshake succeeds",
                    self.name,
                    self.address,
                    self.key,
                    HANDSHAKE_FAILURES[event],
                )
        elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            if self.handshake_failures:
                logger.info(
                    "%s: handshake with %s (partition %s) succeeded after %d failed attempts",
                    self.name,
                    self.address,
                    self.key,
                    self.handshake_failures,
                )
            self.handshake_failures = 0
        elif event == zmq.EVENT_DISCONNECTED and self.handshake_failures:
            # an attempt that never got through: nothing was received, so no gap; if zmq does
            # not retry by itself, the socket is reopened
            self.recheck_at = time.monotonic() + RECONNECT_CHECK
        elif event == zmq.EVENT_DISCONNECTED:
            self.disconnected_at = time.time_ns()
            self.recheck_at = time.monotonic() + RECONNECT_CHECK
            logger.info(
                "%s: lost connection to %s (partition %s)", self.name, self.address, self.key
            )
        elif event in (zmq.EVENT_CONNECT_DELAYED, zmq.EVENT_CONNECT_RETRIED):
            self.recheck_at = None  # zmq is reconnecting by itself
        elif event == zmq.EVENT_CONNECTED:
            return self._connected()
        return None

    def _connected(self) -> str | None:
        self.recheck_at = None
        if self.disconnected_at is None:
            if not self.connected_once:
                self.connected_once = True
                logger.info("%s: connected to %s (partition %s)", self.name, self.address, self.key)
            return None
        since, self.disconnected_at = self.disconnected_at, None
        cause = (
            self.drop_cause or "the connection was lost (a publisher restart or a network fault)"
        )
        self.drop_cause = None
        logger.warning(
            "%s: reconnected to %s (partition %s) after a drop; gap recorded",
            self.name,
            self.address,
            self.key,
        )
        return (
            f"gap: the connection to {self.address} was dropped at {utc_text(since)} "
            f"and re-established; what was published meanwhile is lost. Cause: {cause}"
        )

    def abandoned(self, now: float, max_message_bytes: int) -> bool:
        """True once zmq has shown no reconnect attempt in time: the socket must be reopened
        (a connection that was up is then a gap, with zmq's protocol error as its cause)."""
        if self.recheck_at is None or self.recheck_at > now:
            return False
        if self.disconnected_at is not None:
            self.drop_cause = (
                f"zmq closed the connection on a protocol error, such as a "
                f"message over maxMessageBytes ({max_message_bytes} "
                f"bytes)"
            )
            logger.warning(
                "%s: zmq gave up the connection to %s (partition %s) after a "
                "protocol error, such as a message over maxMessageBytes; "
                "reconnecting",
                self.name,
                self.address,
                self.key,
            )
        self.recheck_at = None
        return True
