"""The capture processes of a spool as one watcher sees them, the driver or a capture process
(``capture=executors``): who is alive, who holds which partition, which partitions are free to
claim, and what failed.

A process is *live* while the beat of its record (``spool.processes``) has moved within
``leaseTimeout`` by this watcher's own monotonic clock; one seen for the first time counts from
then. No clock of another host is trusted. Who holds a partition comes from the live records
only: the partitions of a process that stopped beating (its host lost power, its executor
froze, it was killed) are free once ``leaseTimeout`` has passed, whatever Spark does meanwhile.

A partition that no live record lists is *free to claim* (``free_epoch``) when its lease says
nobody can be writing it: never claimed, sealed (its holder let it go), or claimed by a process
whose record is not live. A lease whose holder writes no record (a holder of release 0.2, or
one that has not listed the partition yet) is free once it has not changed for
``leaseTimeout``. Whoever claims a free partition claims its next epoch, which exactly one
claimant wins, and which fences the one before (``spool.epochs``).

An executor that a claim task noted in ``@executors/`` and that has no record yet is about to
start its capture process (``expected``): new partitions are shared out with it counted in, so
that the processes a round starts a few seconds apart all get their share.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from spark_zmq.errors import CaptureError
from spark_zmq.log import logger
from spark_zmq.spool.contract import Registration, registrations
from spark_zmq.spool.leases import load_lease
from spark_zmq.spool.processes import EXECUTOR, ProcessRecord, load_records

#: a partition's holder: its record and the epoch it holds the partition under
Holding = tuple[ProcessRecord, int]


@dataclass
class Seen:
    """Something a watcher times: what it last read, and when (monotonic) that changed."""

    signal: tuple
    changed_at: float


class ProcessWatch:
    """Reads the records of a spool's capture processes (``refresh``) and says who is live,
    who holds what, and what is free to claim.

    With ``report_failures`` (the driver), ``failure`` holds the first failure of a process
    seen failing during this watch: one that failed after the first ``refresh``, or that first
    appeared after it (a failure left by an earlier run is not the query's)."""

    def __init__(self, root: str, lease_timeout: float, report_failures: bool = False) -> None:
        self.root = root
        self.lease_timeout = lease_timeout
        self.records: dict[str, ProcessRecord] = {}
        self.failure: CaptureError | None = None
        self._report_failures = report_failures
        self._refreshed = False
        self._seen: dict[str, Seen] = {}  # by process: its record's signal
        self._leases: dict[str, Seen] = {}  # by partition: the lease of one free_epoch read
        self._registered: dict[str, tuple[Registration, float]] = {}  # first seen (monotonic)

    def refresh(self) -> None:
        """Read every record again."""
        now = time.monotonic()
        records = load_records(self.root)
        for process, record in records.items():
            seen = self._seen.get(process)
            if seen is None or seen.signal != record.signal:
                if self._refreshed or seen is not None:
                    self._note_failure(record)
                self._seen[process] = Seen(record.signal, now)
        for process in set(self._seen) - set(records):
            del self._seen[process]
        self.records = records
        self._refreshed = True
        for key in self.holders():
            self._leases.pop(key, None)
        self._refresh_registrations(now)

    def _refresh_registrations(self, now: float) -> None:
        """The executors noted in the spool (``spool.contract.registrations``), each with
        when this watcher first saw it."""
        found = {r.executor: r for r in registrations(self.root)}
        self._registered = {
            executor: (registration, self._registered.get(executor, (registration, now))[1])
            for executor, registration in found.items()
        }

    def expected(self, wait: float, window: float) -> list[ProcessRecord]:
        """The capture processes about to start: of executors noted alive (within ``window``
        seconds, by wall clock: a rough bound, only spreading depends on it) that have no
        record at all, first seen less than ``wait`` seconds ago. As records without a beat,
        named ``expected:<executor>``."""
        served = {record.executor for record in self.records.values()}
        now, wall = time.monotonic(), time.time()
        return [
            ProcessRecord(f"expected:{r.executor}", r.executor, r.host, EXECUTOR, 0.0, 0, 0.0, 0.0)
            for r, first_seen in self._registered.values()
            if not r.gone
            and r.executor not in served
            and now - first_seen < wait
            and wall - r.at < window
        ]

    def _note_failure(self, record: ProcessRecord) -> None:
        if self._report_failures and record.failure and self.failure is None:
            self.failure = CaptureError(
                f"the capture process {record.process} on executor {record.executor} "
                f"failed: {record.failure}"
            )

    def is_live(self, process: str) -> bool:
        record = self.records.get(process)
        if record is None or record.gone:
            return False
        return time.monotonic() - self._seen[process].changed_at < self.lease_timeout

    def live(self) -> list[ProcessRecord]:
        """The live processes, by process id."""
        return [r for p, r in sorted(self.records.items()) if self.is_live(p)]

    def holders(self) -> dict[str, Holding]:
        """Partition -> its holder, from the live records; where two list a partition (one
        was taken over and has not noticed yet), the one with the higher epoch."""
        found: dict[str, Holding] = {}
        for record in self.live():
            for key, epoch in record.partitions.items():
                if key not in found or epoch > found[key][1]:
                    found[key] = (record, epoch)
        return found

    def free_epoch(self, key: str) -> int | None:
        """The epoch a claim of ``key`` follows (0: never claimed) if nobody can be writing it
        now, else None. Reads the partition's lease: for partitions no live record lists."""
        lease = load_lease(self.root, key)
        if lease is None:
            return 0
        if lease.sealed:
            return lease.epoch
        if lease.holder in self.records and not self.is_live(lease.holder):
            return lease.epoch
        now = time.monotonic()
        signal = (lease.epoch, lease.beat, lease.holder)
        seen = self._leases.get(key)
        if seen is None or seen.signal != signal:
            seen = self._leases[key] = Seen(signal, now)
        return lease.epoch if now - seen.changed_at >= self.lease_timeout else None


class HolderChanges:
    """The driver's log of who holds each partition: one line when a partition gets its first
    holder, a warning naming the time without capture when it moved to another executor, and
    one line per capture process that stopped beating."""

    def __init__(self, name: str, root: str) -> None:
        self.name = name
        self.root = root
        self._last: dict[str, Holding] = {}  # the last holder seen of each partition
        self._silent: set[str] = set()  # processes reported as no longer beating

    def update(self, watch: ProcessWatch) -> None:
        for key, (record, epoch) in sorted(watch.holders().items()):
            last = self._last.get(key)
            self._last[key] = (record, epoch)
            if last is None:
                logger.info(
                    "%s: partition %s held by capture process %s on executor %s (epoch %d)",
                    self.name,
                    key,
                    record.process,
                    record.executor,
                    epoch,
                )
            elif epoch > last[1] and record.executor != last[0].executor:
                self._moved(key, last[0], record, epoch)
        self._report_silent(watch)

    def _moved(self, key: str, last: ProcessRecord, record: ProcessRecord, epoch: int) -> None:
        lease = load_lease(self.root, key)
        logger.warning(
            "%s: partition %s moved from executor %s to executor %s (epoch %d); nothing was "
            "captured between %s and %s",
            self.name,
            key,
            last.executor,
            record.executor,
            epoch,
            wall_text(last.flushed_at),
            wall_text(lease.at if lease is not None else 0.0),
        )

    def _report_silent(self, watch: ProcessWatch) -> None:
        """One line per process whose record stopped moving while it held partitions."""
        for process, record in watch.records.items():
            silent = not record.gone and bool(record.partitions) and not watch.is_live(process)
            if silent and process not in self._silent:
                logger.warning(
                    "%s: capture process %s on executor %s has not beaten for %g s: its %d "
                    "partitions go to the capture processes alive",
                    self.name,
                    process,
                    record.executor,
                    watch.lease_timeout,
                    len(record.partitions),
                )
                self._silent.add(process)
            elif not silent:
                self._silent.discard(process)


def wall_text(at: float) -> str:
    """A wall-clock time for a log line (UTC, to the second)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)) if at else "(never)"
