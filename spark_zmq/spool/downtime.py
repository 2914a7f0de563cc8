"""Downtime: the time a partition was not captured because capture itself was not running (the
query stopped or crashed), owed as one gap row when its endpoint is read again.

**The alive record.** Capture on the driver writes ``alive.json`` at the spool's root: its
process (``holder``, host/pid as in leases), a wall time ``at`` and the downtimes still owed
(``pending``: partition -> since). Invariant: everything that process's capture had taken from
its sockets before ``at`` is in the spool. So ``at`` is written only after a flush of every
partition, as the time that flush began, about once per ``ALIVE_SECONDS`` while capturing, and
once at a clean close after the last flush (a process killed meanwhile leaves the previous
record, earlier, so still true). One small file for the whole spool, whatever the number of
partitions: leases are written only at a claim, so a lease's ``at`` alone says when capture
began, not when it was last alive. What zmq still queued in its sockets at ``at`` (capture behind
its peers) is not covered after a crash; a clean stop takes it first (``capture.loop``'s
``STOP_QUIET_SECONDS``).

**Since.** A partition left open by the previous run (``placement.driver``) was being captured
when that run ended: its downtime starts at the later of its previous lease's ``at`` and the alive
record's ``at`` when both were written by the same process. One owed by the previous run that it
never wrote (its endpoint had not joined again) is owed still. The gap row ends at the first
row capture writes for the partition again (the first message received), not at the connection:
what a peer publishes before its subscription has arrived is lost too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from spark_zmq.log import logger
from spark_zmq.spool.layout import JsonState, SpoolError
from spark_zmq.spool.leases import Lease, process_id

#: the name of the alive record (``alive.json``) in a spool folder
ALIVE_NAME = "alive"
#: seconds between writes of the alive record while capture runs (one file write each)
ALIVE_SECONDS = 1.0

#: the text of a downtime's gap row, from (partition, since, until) as UTC texts
Describe = Callable[[str, str, str], str]


def restart_gap_text(key: str, since: str, until: str) -> str:
    """The gap row of a partition that was not captured while the query was not running."""
    return (
        f"gap: capture of partition {key} was not running between {since} and {until} (the "
        f"previous run stopped or crashed; {until}: the first message received again); what "
        f"was published meanwhile is lost"
    )


@dataclass(frozen=True)
class Alive:
    """What ``alive.json`` holds (see the module doc)."""

    holder: str
    at: float
    pending: dict[str, float] = field(default_factory=dict)


def alive_record(root: str) -> JsonState:
    return JsonState(os.path.join(root, f"{ALIVE_NAME}.json"))


def load_alive(root: str) -> Alive | None:
    """The alive record of the spool folder ``root``; None if there is none (or unreadable:
    then each partition's lease alone dates its downtime)."""
    try:
        doc = alive_record(root).load()
        if not doc:
            return None
        return Alive(str(doc["holder"]), float(doc["at"]), dict(doc.get("pending", {})))
    except (SpoolError, KeyError, TypeError, ValueError):
        return None


def down_since(lease: Lease | None, alive: Alive | None) -> float | None:
    """When the capture of a partition whose previous holder wrote ``lease`` was last known
    alive (None: nothing says when)."""
    if lease is not None and alive is not None and alive.holder == lease.holder:
        return max(lease.at, alive.at)
    if lease is not None:
        return lease.at
    return alive.at if alive is not None else None


class Downtime:
    """The downtimes a capture owes as gap rows (partition -> since, seconds since the epoch),
    and, where ``record`` is given (capture on the driver), the alive record it keeps.

    Only the capture thread calls it once capture runs, but for ``owe`` (a gap owed by a
    partition about to join) and reading ``alive_at``. ``alive_at``: everything the capture
    took from its sockets before it is in the spool (the start of its last complete flush of
    every partition); a capture process on an executor says it in its heartbeat, from which a
    new holder of one of its partitions dates its gap row."""

    def __init__(
        self,
        pending: dict[str, float],
        record: JsonState | None = None,
        describe: Describe = restart_gap_text,
    ) -> None:
        self.pending = dict(pending)
        #: the partitions whose owed gap row this capture wrote (with capture on the driver,
        #: which owes rows only from its start, each that partition's first row of the run)
        self.written: set[str] = set()
        self.describe = describe
        self._record = record
        self._written_at = float("-inf")
        self._failing = False  # the last write failed (logged once per episode)
        self.alive_at = time.time()  # nothing received yet: all of it is in the spool

    def since(self, key: str) -> float | None:
        return self.pending.get(key)

    def owe(self, key: str, since: float) -> None:
        """``key`` was not captured since ``since``: its gap row is owed. Called before the
        partition's endpoint joins capture (which reads it when it opens the connection), from
        any thread."""
        self.pending[key] = since

    def recorded(self, key: str) -> None:
        """The gap row of ``key`` is in the spool: it is owed no more."""
        self.pending.pop(key, None)
        self.written.add(key)

    def waive(self) -> set[str]:
        """Owe no more gap rows (a new query starts after them); the partitions whose row was
        written already. Called on the capture thread, between flushes."""
        self.pending.clear()
        return set(self.written)

    def alive(self, at: float, force: bool = False) -> None:
        """Everything captured before ``at`` is in the spool: say so in the alive record, if
        ``ALIVE_SECONDS`` went by since the last write (or ``force``)."""
        self.alive_at = max(self.alive_at, at)
        now = time.monotonic()
        if self._record is None or (not force and now - self._written_at < ALIVE_SECONDS):
            return
        self._written_at = now
        try:
            self._record.save({"holder": process_id(), "at": at, "pending": self.pending})
        except OSError as exc:  # the spool's own writes say what to do; this one is logged
            if not self._failing:
                logger.warning(
                    "cannot write %s: %s; a restart dates the gap of each partition from "
                    "an older record",
                    self._record.path,
                    exc,
                )
            self._failing = True
            return
        self._failing = False
