"""A connection of capture: one endpoint's socket and monitor, its buffer, and the episodes
(health, push-back, drops, receive failures) it can be in. ``sockets`` opens and closes them;
the receive core (``receiving``) polls them."""

from __future__ import annotations

from dataclasses import dataclass

import zmq

from spark_zmq.capture.buffer import MessageBuffer
from spark_zmq.capture.drops import DropEpisode
from spark_zmq.capture.health import Health
from spark_zmq.capture.pushback import PushBack
from spark_zmq.capture.refusals import ReceiveFailures
from spark_zmq.protocols.contract import Endpoint


@dataclass
class Connection:
    """One endpoint: its socket and monitor, what it sent since the last flush, and the state
    of each kind of episode it can be in."""

    endpoint: Endpoint
    socket: zmq.Socket
    monitor: zmq.Socket
    health: Health
    load: PushBack
    drops: DropEpisode
    failures: ReceiveFailures
    buffer: MessageBuffer
    leave_by: float | None = None  # set when discovery reported it gone
    reopen_failing: bool = False  # zmq refused to reopen it (retried; logged once)
    #: capture was not running for this partition since then (s since the epoch): a gap row
    #: is owed before its first row (``spool.downtime``)
    down_since: float | None = None
    #: bytes of the frames of the messages written to the spool since it joined
    written_bytes: int = 0
    #: when the newest message written to the spool was received (ns since the epoch; 0: none)
    last_message_at: int = 0

    @property
    def received(self) -> int:
        """Messages received since capture started (its buffer counts them)."""
        return self.buffer.received
