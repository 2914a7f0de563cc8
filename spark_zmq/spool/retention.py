"""What retention may delete in the partitions a ``Spool`` holds, and which of it goes.

Only committed segments are ever deleted, oldest first across the partitions: when they are
older than ``Retention.seconds``, when more of them than ``Retention.nbytes`` are kept, and
whenever a write needs room at the spool's bound. This module keeps the account (the bytes of
the committed segments, when the oldest passes its age) and chooses; the Spool deletes the files
and calls it under its mutex.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterator, Mapping

from spark_zmq.log import logger
from spark_zmq.spool.index import PartitionIndex, Retention, Segment, Segments

#: at the bound, committed segments are deleted until the spool is this fraction of the bound
#: below it, so that appends at the bound do not each look for something to delete
ROOM_MADE_AT_ONCE = 1 / 16


class RetentionLedger:
    """The committed segments of a Spool's partitions as retention sees them.

    Invariant: ``nbytes`` is the sum of the sizes of the committed segments in the partitions
    counted in (``count``), less those deleted (``freed``); ``expires_at`` is no later than when
    the oldest of them passes ``Retention.seconds`` (``inf`` when none will).
    """

    def __init__(self, retention: Retention, root: str) -> None:
        self.retention = retention
        self.root = root
        #: bytes of the committed segments (what room can be made of)
        self.nbytes = 0
        #: when (wall clock) the oldest committed segment passes the retention by age
        self.expires_at = math.inf
        self._made_room_before = False  # the first time room is made at the bound is logged
        self._read_ahead_deleted_before = False  # and the first time read-ahead data goes

    def count(self, index: PartitionIndex | None, sign: int) -> None:
        """Add (``sign`` +1: loaded or claimed) or take away (-1: let go) what ``index``'s
        committed segments count; a new index also moves the next expiry earlier if its oldest
        committed segment is due sooner. Segments an earlier release wrote (age not known)
        count from now."""
        if index is None:
            return
        committed = index.committed_count()
        index.segments.set_unknown_ages(time.time())
        self.nbytes += sign * index.segments.nbytes_of(0, committed)
        seconds = self.retention.seconds
        if sign > 0 and committed and seconds is not None:
            self.expires_at = min(self.expires_at, index.segments[0].at + seconds)

    def committed(self, segments: Segments, begin: int, stop: int) -> None:
        """Segments ``begin`` to ``stop`` of ``segments`` were committed."""
        self.nbytes += segments.nbytes_of(begin, stop)
        if stop > begin and self.retention.seconds is not None:
            oldest = segments.oldest_at(begin, stop)
            self.expires_at = min(self.expires_at, oldest + self.retention.seconds)

    def freed(self, nbytes: int) -> None:
        """Committed segments of ``nbytes`` were deleted."""
        self.nbytes -= nbytes

    def due(self) -> bool:
        """Whether retention would delete something: committed bytes over ``Retention.nbytes``,
        or the oldest committed segment past its age (checked without walking the partitions)."""
        max_kept = self.retention.nbytes
        over = max_kept is not None and self.nbytes > max_kept
        return over or time.time() >= self.expires_at

    def expired(self, partitions: Mapping[str, PartitionIndex], now: float) -> dict[str, int]:
        """How many segments, from the first, go per partition: those older than
        ``Retention.seconds`` and the oldest beyond ``Retention.nbytes``."""
        seconds, max_kept = self.retention.seconds, self.retention.nbytes
        cutoff = now - seconds if seconds is not None else -math.inf
        over = self.nbytes - max_kept if max_kept is not None else 0
        return self._oldest(partitions, lambda segment, freed: segment.at <= cutoff or freed < over)

    def room(
        self, partitions: Mapping[str, PartitionIndex], nbytes: int, max_bytes: int
    ) -> dict[str, int]:
        """At the bound (the spool holds ``nbytes`` of ``max_bytes``): how many segments go per
        partition, oldest first, until the spool is ``ROOM_MADE_AT_ONCE`` of the bound below it
        or nothing committed is left."""
        over = nbytes - (max_bytes - int(max_bytes * ROOM_MADE_AT_ONCE))
        if over <= 0 or not self.nbytes:
            return {}
        if not self._made_room_before:
            logger.info(
                "spool %s reached maxSpoolBytes (%d bytes): committed segments are deleted, "
                "oldest first, to make room for new messages (logged once)",
                self.root,
                max_bytes,
            )
            self._made_room_before = True
        return self._oldest(partitions, lambda segment, freed: freed < over)

    def room_read_ahead(
        self,
        partitions: Mapping[str, PartitionIndex],
        read_ahead: Mapping[str, int],
        nbytes: int,
        max_bytes: int,
    ) -> dict[str, int]:
        """At the bound, with nothing committed left (``room`` deleted it): how many segments
        go per partition, oldest first, of those that some reader committed (below
        ``read_ahead``, a capture service's spool: not every reader committed them), until the
        spool is ``ROOM_MADE_AT_ONCE`` of the bound below it. The readers behind get a gap row
        for them; a message no reader committed is never deleted."""
        over = nbytes - (max_bytes - int(max_bytes * ROOM_MADE_AT_ONCE))
        if over <= 0:
            return {}
        doomed: dict[str, int] = {}
        freed = 0
        for key, segment in _oldest_first(partitions, read_ahead):
            if freed >= over:
                break
            doomed[key] = doomed.get(key, 0) + 1
            freed += segment.nbytes
        if doomed and not self._read_ahead_deleted_before:
            logger.warning(
                "spool %s reached maxSpoolBytes (%d bytes) with nothing left that every reader "
                "name committed: messages that only some names committed are deleted, oldest "
                "first, and the names behind get gap rows for them (logged once)",
                self.root,
                max_bytes,
            )
            self._read_ahead_deleted_before = True
        return doomed

    def _oldest(
        self, partitions: Mapping[str, PartitionIndex], goes: Callable[[Segment, int], bool]
    ) -> dict[str, int]:
        """Committed segments, oldest first across partitions, while ``goes(segment, bytes
        freed so far)``; how many per partition. ``goes`` must stay false once it is (the
        segments come oldest first), so the walk stops at the first one kept."""
        doomed: dict[str, int] = {}
        freed = 0
        self.expires_at = math.inf
        committed = {key: index.committed for key, index in partitions.items()}
        for key, segment in _oldest_first(partitions, committed):
            if not goes(segment, freed):
                if self.retention.seconds is not None:
                    self.expires_at = segment.at + self.retention.seconds
                break
            doomed[key] = doomed.get(key, 0) + 1
            freed += segment.nbytes
        return doomed


def _oldest_first(
    partitions: Mapping[str, PartitionIndex], ends: Mapping[str, int]
) -> Iterator[tuple[str, Segment]]:
    """(key, segment) of every segment that ends at or before its partition's end in ``ends``,
    oldest first (each partition's are in offset order, which is the order they were
    written)."""

    def below(key: str, index: PartitionIndex, end: int) -> Iterator[tuple[str, Segment]]:
        for segment in index.segments:
            if segment.end > end:
                return
            yield key, segment

    held = [below(k, i, ends[k]) for k, i in partitions.items() if ends.get(k, 0) > i.start]
    return heapq.merge(*held, key=lambda item: item[1].at)
