"""What a capture counts about itself for its metrics (``monitoring.metrics``), besides what
its connections and membership count: how long flushes take, and the CPU its threads use.
Nothing here is per message: the capture thread records a flush's time once a flush, and CPU
is read from the kernel when a scrape asks.
"""

from __future__ import annotations

import bisect
import itertools
import os
from typing import NamedTuple

#: upper bounds (seconds) of the flush-time histogram's buckets; the last one is +Inf
FLUSH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: what discovery reported that capture counts: an endpoint joined (or came back before it was
#: let go), changed its description (metadata, subscriptions), or left
DISCOVERY_EVENTS = ("joined", "changed", "left")
#: prefixes of capture contexts' thread names (zmq names its threads PREFIX/ZMQbg/...)
_PREFIXES = itertools.count(1)
#: clock ticks a second, the unit of /proc's CPU times
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Histogram(NamedTuple):
    """Observations by bucket (cumulative counts, ``FLUSH_BUCKETS`` then +Inf) and their sum."""

    buckets: tuple[int, ...]
    total: float


class CaptureCounts(NamedTuple):
    """What a capture counted, as one scrape reads it (``Capture.counts``)."""

    #: messages received per partition read now, since its endpoint joined (refused ones too)
    received: dict[str, int]
    #: bytes of the frames written to the spool, per partition read now, since it joined
    written_bytes: dict[str, int]
    #: when each partition read now last had a message written (ns since the epoch)
    last_message_at: dict[str, int]
    #: endpoints read and connected (their handshake done) ...
    live: int
    #: ... and read but not connected now (connecting, reconnecting, handshake failing)
    connecting: int
    #: endpoints capture refused (their sockets or partitions could not be opened)
    refused: int
    #: endpoints that joined, changed and left (``DISCOVERY_EVENTS``), since capture started
    discovery_events: dict[str, int]
    flushes: Histogram
    #: CPU seconds of capture's threads (None: not known here)
    cpu_seconds: float | None


class FlushTimes:
    """The times of a capture's flushes, in ``FLUSH_BUCKETS`` (written by the capture thread,
    read by a scrape: a scrape may see one flush counted in a bucket but not yet in the sum)."""

    def __init__(self) -> None:
        self._counts = [0] * (len(FLUSH_BUCKETS) + 1)
        self._total = 0.0

    def observe(self, seconds: float) -> None:
        self._counts[bisect.bisect_left(FLUSH_BUCKETS, seconds)] += 1
        self._total += seconds

    def histogram(self) -> Histogram:
        return Histogram(tuple(itertools.accumulate(self._counts)), self._total)


class CaptureStats:
    """A capture's own counts, besides its connections' (``Connection``)."""

    def __init__(self) -> None:
        self.flushes = FlushTimes()
        #: the name prefix of the threads of capture's zmq context (``thread_name_prefix``)
        self.thread_prefix = next(_PREFIXES)
        #: the kernel's id of the capture thread, once it runs
        self.thread_id: int | None = None

    def cpu_seconds(self) -> float | None:
        """CPU seconds the capture thread and the threads of its zmq context used (zmq's I/O
        threads receive for it); None where the kernel does not say (no /proc)."""
        try:
            tasks = os.listdir("/proc/self/task")
        except OSError:
            return None
        prefix = f"{self.thread_prefix}/ZMQbg/"
        ticks = 0
        for task in tasks:
            try:
                if int(task) != self.thread_id:
                    with open(f"/proc/self/task/{task}/comm") as comm:
                        if not comm.read().startswith(prefix):
                            continue
                ticks += _task_ticks(task)
            except (OSError, ValueError):
                continue  # the thread ended meanwhile
        return ticks / _TICKS


def _task_ticks(task: str) -> int:
    """User and system CPU time of thread ``task`` of this process, in clock ticks."""
    with open(f"/proc/self/task/{task}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat(5)
