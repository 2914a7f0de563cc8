"""Flush files that an exclusive writer keeps by number (``Segment.flush``) instead of linking
each into the epoch folder of every partition it holds rows of: a flush of N endpoints costs
one file and N index lines, not also N links (on the test machine a link cost about 13 µs of
CPU, a third of what an endpoint added to a flush).

The exclusive writer (``SpoolPartitions`` with ``exclusive``: capture on the driver, a
capture service) writes every partition of its folder, so it knows every segment that names a
flush file: it counts them (``NumberedFlushes``) and deletes a file with the last segment
that names it. At its start, once it has counted what every index names, it deletes the
numbered files that none names: a flush none of whose segments was published (a crash
between the file and its lines).

Holders (``capture=executors``) share a folder among processes and keep linking: a file
shared by the partitions of several writers would need them all to agree on when it goes. A
holder that deletes a segment naming a numbered file (one left by an exclusive writer of the
same folder, say a query that ran with ``capture=driver`` before) deletes the segment only;
the next exclusive writer's start deletes the file.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable

from spark_zmq.log import logger
from spark_zmq.spool.index import PartitionIndex, Segment
from spark_zmq.spool.layout import FLUSHES, flush_number, flush_path, remove_quietly


class NumberedFlushes:
    """The numbered flush files of an exclusive writer's folder, and how many segments of its
    indexes name each.

    Invariant: a file that a segment of a counted index names is never deleted; ``references``
    holds a positive count for each file named, and no entry for others. Numbers grow: a
    number is the time in microseconds or one more than the last given, whichever is larger,
    so a writer that starts after another never gives a number the other gave (a read task
    that planned a deleted file's segment finds the file gone, not another file).
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self.references: Counter[int] = Counter()
        self._last = 0

    def next(self) -> tuple[int, str]:
        """A number for a new flush file, and its path."""
        self._last = max(self._last + 1, time.time_ns() // 1000)
        return self._last, flush_path(self.root, self._last)

    def count(self, index: PartitionIndex | None, sign: int) -> None:
        """Add (``sign`` +1: loaded, claimed) or take away (-1: replaced by a newer load) what
        ``index``'s segments name; nothing is deleted here."""
        if index is None:
            return
        for number in index.segments.flush_numbers():
            if number:
                self._add(number, sign)

    def named(self, number: int) -> None:
        """A segment that names the flush file ``number`` was published."""
        self._add(number, 1)

    def written(self, number: int) -> None:
        """The flush file ``number`` was written and its segments published (``named``): if
        none was, it goes at once."""
        if number not in self.references:
            remove_quietly(flush_path(self.root, number))

    def release(self, gone: Iterable[Segment]) -> None:
        """Segments ``gone`` were deleted from their index (published already): the flush
        files that no segment names any more are deleted."""
        for segment in gone:
            if segment.flush:
                self._add(segment.flush, -1)
                if segment.flush not in self.references:
                    remove_quietly(flush_path(self.root, segment.flush))

    def sweep(self) -> None:
        """Delete the numbered flush files that no counted segment names (the writer's start,
        once every index of the folder is counted): flushes whose segments were never
        published."""
        folder = os.path.join(self.root, FLUSHES)
        swept = 0
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            number = flush_number(entry.name)
            if number is None:
                continue
            self._last = max(self._last, number)
            if number not in self.references:
                remove_quietly(entry.path)
                swept += 1
        if swept:
            logger.info(
                "spool %s: %d flush files that no segment names deleted (flushes not "
                "published before a crash or a refused write)",
                self.root,
                swept,
            )

    def _add(self, number: int, count: int) -> None:
        left = self.references[number] + count
        if left > 0:
            self.references[number] = left
        else:
            self.references.pop(number, None)
