"""Drop episodes: messages that could not be written (the spool at its bound, or its storage
refusing writes with ``onSpoolWriteError=drop``).

An episode starts with one log line and ends with one gap row that says how many messages were
dropped, between which times and why, written when the partition can be written again (or when
capture stops), or once it has lasted ``REPORT_SECONDS``, whatever the spool's state: Spark
commits a micro-batch's offsets only when it plans the next one, which takes a new offset, and
only committed segments can be deleted. An episode that waited for room would wait for good
when what fills the spool is what Spark has read and not yet committed; its gap row is that
new offset (written over ``maxSpoolBytes``, or into the spool's reserve on a full storage).
While drops go on, the next episode starts with the next drop and waits twice as long before
its row (up to ``MAX_REPORT_SECONDS``): the first row written after Spark planned the
micro-batch that holds what fills the spool unblocks it, and a spool that nobody reads (a
capture service with no query) grows past its bound by one small row a minute per partition,
not one a second. Capture's own fault rows dropped meanwhile are kept when possible.
"""

from __future__ import annotations

import time

from spark_zmq.log import logger
from spark_zmq.units import utc_text

#: how long a drop episode lasts at most before its gap row is written; each episode that
#: follows one ended so (drops going on) waits twice as long, up to MAX_REPORT_SECONDS
REPORT_SECONDS = 1.0
MAX_REPORT_SECONDS = 60.0


class DropEpisode:
    """One partition's messages dropped since it last could be written.

    Logged once when drops begin and once when the partition is written again: episodes
    ended because they were due (``due``) count into ``reported``, without a line each.
    """

    def __init__(self, name: str, key: str) -> None:
        self.name, self.key = name, key
        self.count = 0
        self.since: int | None = None  # receive time (ns) of the first message dropped
        self.began = 0.0  # when (monotonic) it began
        self.report_after = REPORT_SECONDS  # how long it may last before its gap row
        self.because: str | None = None
        #: messages and gap rows of the episodes ended when due since drops began, and when
        #: (UTC text) the first of them began; not logged yet
        self.reported, self.reported_rows, self.reported_since = 0, 0, ""

    def __bool__(self) -> bool:
        return self.count > 0

    def drop(self, count: int, first_time: int, cause: str) -> None:
        if self.since is None:
            self.since, self.because, self.began = first_time, cause, time.monotonic()
            if not self.reported_rows:
                logger.warning(
                    "%s: dropping new messages of partition %s until they can be written: %s",
                    self.name,
                    self.key,
                    cause,
                )
        self.count += count

    @property
    def due(self) -> bool:
        """Whether it has lasted ``report_after``: its gap row is written now, room or not."""
        return bool(self) and time.monotonic() - self.began >= self.report_after

    def gap_text(self, until: int) -> str:
        """The gap row's text for the episode, ended at ``until`` (ns)."""
        since = self.since if self.since is not None else until
        return (
            f"gap: {self.count} messages dropped between {utc_text(since)} "
            f"and {utc_text(until)} because {self.because}"
        )

    def ended(self, text: str, due: bool = False) -> None:
        """Its gap row is written: count it (``due``: drops go on) or log it, start afresh."""
        if due:
            if not self.reported_rows:
                self.reported_since = utc_text(self.since or 0)
            self.reported += self.count
            self.reported_rows += 1
            self.report_after = min(2 * self.report_after, MAX_REPORT_SECONDS)
        else:
            logger.warning("%s: partition %s: %s%s", self.name, self.key, text, self._earlier())
            self._reported_logged()
        self.count, self.since, self.because = 0, None, None

    def written(self) -> None:
        """The partition was written again with no episode open: log what the due gap rows
        reported, if any."""
        if self.reported_rows and not self:
            logger.warning(
                "%s: partition %s is written again; %d messages dropped since %s, reported by "
                "%d gap rows",
                self.name,
                self.key,
                self.reported,
                self.reported_since,
                self.reported_rows,
            )
            self._reported_logged()

    def _earlier(self) -> str:
        """What the due gap rows before this episode's reported, for its log line."""
        if not self.reported_rows:
            return ""
        return (
            f" (with the {self.reported_rows} gap rows before it, {self.reported + self.count} "
            f"messages dropped since {self.reported_since})"
        )

    def _reported_logged(self) -> None:
        """Drops ended and were logged: the next episode starts a new count, reported soon."""
        self.reported, self.reported_rows = 0, 0
        self.report_after = REPORT_SECONDS
