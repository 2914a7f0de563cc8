"""Drop episodes: messages that could not be written (the spool at its bound, or its storage
refusing writes with ``onSpoolWriteError=drop``).

An episode starts with one log line and ends with one gap row that says how many messages were
dropped, between which times and why, written when the partition can be written again (or when
capture stops). Capture's own fault rows dropped meanwhile are kept when possible.
"""

from __future__ import annotations

from spark_zmq.log import logger
from spark_zmq.units import utc_text


class DropEpisode:
    """One partition's messages dropped since it last could be written."""

    def __init__(self, name: str, key: str) -> None:
        self.name, self.key = name, key
        self.count = 0
        self.since: int | None = None  # receive time (ns) of the first message dropped
        self.because: str | None = None

    def __bool__(self) -> bool:
        return self.count > 0

    def drop(self, count: int, first_time: int, cause: str) -> None:
        if self.since is None:
            self.since, self.because = first_time, cause
            logger.warning(
                "%s: dropping new messages of partition %s until they can be written: %s",
                self.name,
                self.key,
                cause,
            )
        self.count += count

    def gap_text(self, until: int) -> str:
        """The gap row's text for the episode, ended at ``until`` (ns)."""
        since = self.since if self.since is not None else until
        return (
            f"gap: {self.count} messages dropped between {utc_text(since)} "
            f"and {utc_text(until)} because {self.because}"
        )

    def ended(self, text: str) -> None:
        """Its gap row is written: log it, and start afresh."""
        logger.warning("%s: partition %s: %s", self.name, self.key, text)
        self.count, self.since, self.because = 0, None, None
