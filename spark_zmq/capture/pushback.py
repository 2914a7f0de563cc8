"""Push-back episodes: a peer that sends faster than capture takes.

zmq queues at most ``receive_hwm`` messages of an endpoint, then stops reading its connection:
TCP pushes back and the peer's own send queue fills (a PUB then drops, an XPUB with NODROP
waits). Capture sees it when it reads ``receive_hwm`` messages of an endpoint without once
finding its queue empty (the receive core counts that run against ``full_run``). One line when
an episode starts, one when the queue has not been full for ``PUSH_BACK_SECONDS``; never one
per message.
"""

from __future__ import annotations

import time

from spark_zmq.log import logger

#: seconds without a full receive queue that end an endpoint's push-back episode
PUSH_BACK_SECONDS = 2.0
#: with no receive bound, a backlog this long (messages) is reported as growing
UNBOUNDED_BACKLOG = 100_000


class PushBack:
    """One endpoint's push-back state: the open episode."""

    def __init__(self, name: str, address: str, key: str, receive_hwm: int) -> None:
        self.name, self.address, self.key = name, address, key
        self.receive_hwm = receive_hwm
        #: a receive run this long (no empty queue meanwhile) filled zmq's queue
        self.full_run = receive_hwm or UNBOUNDED_BACKLOG
        self.full_at = 0.0  # when the queue was last seen full
        self.episode: tuple[float, int] | None = None  # (since, messages received then)

    def queue_full(self, received: int) -> None:
        """The receive queue was found full (``received`` messages so far)."""
        self.full_at = time.monotonic()
        if self.episode is not None:
            return
        self.episode = (self.full_at, received)
        bound = (
            f"zmq queues at most receiveHighWaterMark={self.receive_hwm} messages, then "
            f"pushes back on the peer, which drops what its own send queue cannot hold (a "
            f"PUB) or waits (an XPUB with NODROP): messages may be lost at the peer, where "
            f"capture cannot count them"
            if self.receive_hwm
            else f"receiveHighWaterMark=0 (no bound): over {UNBOUNDED_BACKLOG} messages wait in "
            f"memory"
        )
        logger.warning(
            "%s: %s (partition %s) sends faster than capture takes: its receive queue is full; %s",
            self.name,
            self.address,
            self.key,
            bound,
        )

    def check(self, now: float, received: int) -> None:
        """End the episode once the queue has not been full for PUSH_BACK_SECONDS."""
        if self.episode is None or now - self.full_at < PUSH_BACK_SECONDS:
            return
        since, received_then = self.episode
        self.episode = None
        logger.info(
            "%s: capture keeps up with %s (partition %s) again, after %.1f s of "
            "a full receive queue (%d messages received meanwhile)",
            self.name,
            self.address,
            self.key,
            self.full_at - since,
            received - received_then,
        )
