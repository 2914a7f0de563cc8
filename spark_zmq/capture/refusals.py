"""What a peer's messages can cost capture, bounded per connection: messages over the bounds of
one message (refused whole), and receives that fail.

- A message over ``maxMessageBytes`` (the sum of its frames) or ``maxMessageParts`` (its frame
  count) is refused by the receive core (``buffer``, ``native``): taken from the socket to its
  last frame, so that the next message starts at a message boundary, and stored as nothing but
  its place in the partition. Consecutive refused messages share one gap row with their count
  (``Refusals.gap_texts``), so a peer that sends nothing else costs one row per flush.
  zmq's own ``ZMQ_MAXMSGSIZE`` is set to ``maxMessageBytes`` too: it catches a single frame
  over the bound before it is queued, by dropping the connection (``health``).
- A receive that fails on one socket (an errno other than EAGAIN and EINTR, or a buffer that
  cannot grow) costs that connection only: a gap row, and a new socket (``ReceiveFailures``).

Either is logged once when it starts, then at most once a minute with counts while it goes on
(``LogPace``): never once per message.
"""

from __future__ import annotations

import time

import zmq

from spark_zmq.log import logger
from spark_zmq.stream_options import MAX_MESSAGE_PARTS
from spark_zmq.units import utc_text

#: seconds between two log lines of one episode of one connection
LOG_INTERVAL = 60.0
#: the option's default, for captures made without the query's options (tests, benchmarks)
DEFAULT_MAX_MESSAGE_PARTS: int = MAX_MESSAGE_PARTS.parsed_default()

#: a run of consecutive refused messages: (count, largest's bytes, largest's parts, receive times
#: of the first and the last in ns); the largest by bytes, then parts
Run = tuple[int, int, int, int, int]


class LogPace:
    """Paces one connection's log lines of one kind: the first at once, then at most one per
    LOG_INTERVAL, which counts what happened since the line before."""

    def __init__(self) -> None:
        self.logged_at: float | None = None  # monotonic time of the last line
        self.since_logged = 0  # events since then, not yet in a line

    def note(self, count: int) -> int | None:
        """``count`` more events: how many a line logged now must report (None: not now)."""
        now = time.monotonic()
        self.since_logged += count
        if self.logged_at is not None and now - self.logged_at < LOG_INTERVAL:
            return None
        reported, self.since_logged, self.logged_at = self.since_logged, 0, now
        return reported


class Refusals:
    """One connection's bounds of a message, and the gap texts and log lines of the messages
    refused for them."""

    def __init__(
        self, name: str, address: str, key: str, max_message_bytes: int, max_message_parts: int
    ) -> None:
        self.name, self.address, self.key = name, address, key
        self.max_message_bytes = max_message_bytes
        self.max_message_parts = max_message_parts
        self.refused = 0  # messages refused since capture started (a statistic)
        self._pace = LogPace()

    @property
    def bounds_text(self) -> str:
        return (
            f"maxMessageBytes ({self.max_message_bytes} bytes) / "
            f"maxMessageParts ({self.max_message_parts})"
        )

    def over(self, nbytes: int, parts: int) -> bool:
        """Whether a message of ``nbytes`` bytes so far in ``parts`` frames is refused."""
        return nbytes > self.max_message_bytes or parts > self.max_message_parts

    def gap_texts(self, runs: dict[int, Run]) -> dict[int, str]:
        """The gap row text of each run of refused messages, by row; logs as paced."""
        if runs:
            self._log(list(runs.values()))
        return {row: self.gap_text(run) for row, run in runs.items()}

    def gap_text(self, run: Run) -> str:
        count, largest_bytes, largest_parts, first_ns, last_ns = run
        messages = "1 message" if count == 1 else f"{count} messages"
        return (
            f"gap: {messages} of {self.address} over {self.bounds_text} "
            f"{'was' if count == 1 else 'were'} dropped by capture between {utc_text(first_ns)} "
            f"and {utc_text(last_ns)} (largest: {largest_bytes} bytes in {largest_parts} parts)"
        )

    def _log(self, runs: list[Run]) -> None:
        count = sum(run[0] for run in runs)
        self.refused += count
        first_in_line = self._pace.logged_at is None or self._pace.since_logged == 0
        reported = self._pace.note(count)
        if reported is None:
            return
        largest = max(runs, key=lambda run: (run[1], run[2]))
        if first_in_line:
            logger.warning(
                "%s: %s (partition %s) sent %s over %s (largest: %d bytes in %d parts); "
                "capture drops such messages whole and records them as gap rows; logged again "
                "at most once a minute while it goes on",
                self.name,
                self.address,
                self.key,
                "a message" if reported == 1 else f"{reported} messages",
                self.bounds_text,
                largest[1],
                largest[2],
            )
        else:
            logger.warning(
                "%s: %s (partition %s): %d more messages over %s dropped since the last line "
                "(%d in all)",
                self.name,
                self.address,
                self.key,
                reported,
                self.bounds_text,
                self.refused,
            )


class ReceiveFailures:
    """One connection's failed receives: each is a gap row (the message being received, and
    what the peer sends until the new socket is connected, are lost); logged as paced."""

    def __init__(self, name: str, address: str, key: str) -> None:
        self.name, self.address, self.key = name, address, key
        self.failures = 0  # since capture started (a statistic)
        self._pace = LogPace()

    def failed(self, error: int) -> str:
        """The gap row text of a receive that failed with ``error`` (an errno, -1: the buffer
        could not grow); logs as paced."""
        cause = describe_receive_error(error)
        self.failures += 1
        reported = self._pace.note(1)
        if reported is not None:
            logger.warning(
                "%s: receiving from %s (partition %s) failed: %s; capture records a gap and "
                "opens a new socket for it (%d such failures in all; logged at most once a "
                "minute)",
                self.name,
                self.address,
                self.key,
                cause,
                self.failures,
            )
        return (
            f"gap: receiving from {self.address} failed at {utc_text(time.time_ns())} "
            f"({cause}); capture opened a new socket, and what the peer sent until it was "
            f"connected is lost"
        )


def describe_receive_error(error: int) -> str:
    """An errno of a failed receive as text (-1: capture's buffer could not grow)."""
    if error == -1:
        return "capture's buffer could not grow (out of memory, or a message over 2 GiB)"
    return f"errno {error}, {zmq.strerror(error)}"
