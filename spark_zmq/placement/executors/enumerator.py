"""``ExecutorCapture`` (``capture=executors``), after Flink's split enumerator: the driver only
discovers, assigns and plans. It publishes the live endpoints in ``assignment.json`` in the
spool and renews that document every second. Capture processes, one per executor
(``holder``), claim the partitions among themselves and take over those of a process that
stopped beating, without Spark (``watch``, ``spread``). The driver watches their records: it
logs who holds what and when a partition moved, fails the query when a capture process fails,
and starts capture processes (``starts``): through rounds of claim tasks in micro-batches (the
reader forces one) where none runs, and on its own host for endpoints only that host reaches
(``reach``). Commits go to ``commits.json``; each capture process records them in the indexes of
its partitions and applies the retention to them.

A restarted query starts from the previous run's assignment, not from an empty one: right after
a start, an endpoint discovery has not found yet is *unknown*, not gone. Its holder (which
outlives a query stopped within its application, for ``captureIdleTimeout``) keeps capturing and
is adopted; if it has ended, a capture process claims it at once at the address last known.
Discovery confirms such an endpoint (joined) or ends it (left); one it has not found within
``RECONFIRM_SECONDS`` leaves then, as any endpoint that left.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any

from spark_zmq.log import logger
from spark_zmq.placement.base import DISCOVERY, Placement
from spark_zmq.placement.executors.claim import Claim
from spark_zmq.placement.executors.holder import executor_id
from spark_zmq.placement.executors.starts import CaptureStarts
from spark_zmq.placement.executors.watch import HolderChanges, Holding, ProcessWatch
from spark_zmq.placement.guard import guarded
from spark_zmq.protocols.contract import Discovery, Endpoint, StreamProtocol
from spark_zmq.spool.contract import assignment_state, commits_state
from spark_zmq.spool.index import Listing, PartitionState
from spark_zmq.spool.layout import JsonState
from spark_zmq.spool.processes import ProcessRecord, host_identity, remove_old_records
from spark_zmq.spool.reader import SnapshotReader
from spark_zmq.stream_settings import ReaderSettings

#: seconds between renewals of the assignment (the query's heartbeat to its capture processes),
#: and between two readings of their records by the driver
RENEW_SECONDS = 1.0
#: seconds between two removals of old records of capture processes (``spool.processes``)
PRUNE_SECONDS = 300.0
#: seconds a restarted query keeps the previous run's endpoints that discovery has not found again
RECONFIRM_SECONDS = 30.0


class ExecutorCapture(Placement):
    """Discovery on the driver; capture in holder processes on executors (see module doc)."""

    def __init__(
        self, protocol: StreamProtocol[Any], query: ReaderSettings[Any], spool_path: str
    ) -> None:
        super().__init__(protocol, query, spool_path)
        self.settings = query.capture
        self._assignment = assignment_state(spool_path)
        self._commits = commits_state(spool_path)
        self._endpoints: dict[str, Endpoint] = {}
        #: the spool's indexes, read again at each snapshot only where they changed
        self._snapshots = SnapshotReader(spool_path)
        #: endpoints carried over from the previous run, until discovery finds them: key -> the
        #: time.monotonic() at which they leave if it has not
        self._unconfirmed: dict[str, float] = {}
        self._lock = threading.Lock()
        self._spool_id = ""
        self._beat = 0
        #: the driver's host and JVM, which the capture process it starts serves
        self._host, self._executor = host_identity(), executor_id()
        self._watch = ProcessWatch(spool_path, self.settings.lease_timeout, report_failures=True)
        self._changes = HolderChanges(protocol.name, spool_path)
        self._starts = CaptureStarts(
            protocol.name, spool_path, self.settings, self._host, self._executor
        )
        self._watch_lock = threading.Lock()  # the renewer and Spark's calls both read records
        self._planned: tuple[int, list[Claim]] = (0, [])  # the last claims round opened
        self._stopping = threading.Event()
        self._renewer: threading.Thread | None = None
        self._discovery: Discovery | None = None
        #: what the query committed (commits.json), per partition: holders record it in the
        #: indexes on their next tick
        self._committed: dict[str, int] = {}

    def start(self) -> None:
        try:
            os.makedirs(self.spool_path, exist_ok=True)
        except OSError as exc:
            raise OSError(
                f"cannot use {self.spool_path!r} as a spool folder (option "
                f"spoolPath): {exc.strerror or exc}"
            ) from None
        self.ends_at_start = {k: s.end for k, s in self._snapshots.snapshot().items()}
        self._committed = dict(self._commits.load() or {})
        previous = self._assignment.load() or {}
        self._spool_id = previous.get("spool_id") or uuid.uuid4().hex
        self._carry_over(previous)
        remove_old_records(self.spool_path)
        self._watched()  # the records of earlier runs: their failures are not this query's
        self._renew()
        self._renewer = threading.Thread(
            target=self._renew_forever,
            daemon=True,
            name=f"spark_zmq {self.protocol.name} assignment",
        )
        self._renewer.start()
        logger.info(
            "%s: capturing on executors, spooling to %s (must be shared by every node)",
            self.protocol.name,
            self.spool_path,
        )
        self._discovery = discovery = self.protocol.discovery(
            self.query.decoding, JsonState(os.path.join(self.spool_path, f"{DISCOVERY}.json"))
        )
        discovery.start(guarded(self, self.protocol.name, self.query.source.max_endpoints))

    def _carry_over(self, previous: dict) -> None:
        """Start from the endpoints the previous run assigned, as unconfirmed (module doc)."""
        if previous.get("format") != self.protocol.name:
            return
        carried = {k: Endpoint.from_json(v) for k, v in previous.get("endpoints", {}).items()}
        if not carried:
            return
        deadline = time.monotonic() + RECONFIRM_SECONDS
        with self._lock:
            self._endpoints.update(carried)
            self._unconfirmed.update(dict.fromkeys(carried, deadline))
        logger.info(
            "%s: %d endpoints of the previous run stay assigned until discovery finds "
            "them again (at most %g s): %s",
            self.protocol.name,
            len(carried),
            RECONFIRM_SECONDS,
            ", ".join(sorted(carried)),
        )

    # -- discovery's listener ------------------------------------------------------------------

    def endpoint_joined(self, endpoint: Endpoint) -> None:
        with self._lock:
            self._endpoints[endpoint.key] = endpoint
            self._unconfirmed.pop(endpoint.key, None)
        self._renew()

    def endpoint_left(self, key: str) -> None:
        with self._lock:
            self._endpoints.pop(key, None)
            self._unconfirmed.pop(key, None)
        self._renew()

    def _expire_unconfirmed(self) -> None:
        """Carried-over endpoints that discovery has not found in time leave (lock held)."""
        now = time.monotonic()
        expired = sorted(k for k, deadline in self._unconfirmed.items() if now >= deadline)
        for key in expired:
            del self._unconfirmed[key]
            self._endpoints.pop(key, None)
            logger.info(
                "%s: endpoint %s of the previous run was not found again within %g s: it left",
                self.protocol.name,
                key,
                RECONFIRM_SECONDS,
            )

    # -- the query's heartbeat -----------------------------------------------------------------

    def _renew(self) -> None:
        """Write the assignment with a new beat: holders that see it move know the query lives."""
        with self._lock:
            self._expire_unconfirmed()
            self._beat += 1
            self._assignment.save(
                {
                    "spool_id": self._spool_id,
                    "beat": self._beat,
                    "format": self.protocol.name,
                    "driver_host": self._host,
                    "driver_executor": self._executor,
                    "endpoints": {k: e.to_json() for k, e in sorted(self._endpoints.items())},
                }
            )

    def _renew_forever(self) -> None:
        """Renew the assignment, read the records and start the driver's own capture process
        where one is needed, every RENEW_SECONDS, whatever the micro-batches wait on; remove
        old records every PRUNE_SECONDS."""
        pruned_at = time.monotonic()
        while not self._stopping.wait(RENEW_SECONDS):
            if time.monotonic() - pruned_at > PRUNE_SECONDS:
                pruned_at = time.monotonic()
                remove_old_records(self.spool_path)
            try:
                self._renew()
            except OSError as exc:
                logger.warning(
                    "%s: cannot renew %s: %s", self.protocol.name, self._assignment.path, exc
                )
            try:
                live, holders = self._watched()
                self._starts.keep_own(self._assigned(), live, holders)
            except Exception:  # the next round tries again; Spark's calls read records too
                logger.exception("%s: cannot watch the capture processes", self.protocol.name)

    def _assigned(self) -> dict[str, Endpoint]:
        with self._lock:
            return dict(self._endpoints)

    def _watched(self) -> tuple[list[ProcessRecord], dict[str, Holding]]:
        """The records read again: the live capture processes and who holds what (with one
        log line per change of holder)."""
        with self._watch_lock:
            self._watch.refresh()
            self._changes.update(self._watch)
            return self._watch.live(), self._watch.holders()

    # -- planning ------------------------------------------------------------------------------

    def listing(self, key: str, start: int, end: int) -> Listing | None:
        return self._snapshots.listing(key, start, end)

    def snapshot(self) -> dict[str, PartitionState]:
        if self._discovery is not None:
            self._discovery.check()
        _, holders = self._watched()
        for failure in (self._watch.failure, self._starts.failure):
            if failure is not None:
                raise failure
        assigned = set(self._assigned())
        state = self._snapshots.snapshot()
        # a partition whose endpoint left while nobody held it will not be retired by a holder;
        # what the query committed counts at once, before its holder records it in the index
        return {
            k: s._replace(
                retired=s.retired or (k not in assigned and k not in holders),
                committed=min(s.end, max(s.committed, self._committed.get(k, 0))),
            )
            for k, s in state.items()
        }

    def next_claims_round(self, last_round: int | None) -> int | None:
        count = self._claims_wanted()
        if not count:
            return last_round
        new_round = (last_round or 0) + 1
        self._planned = (new_round, self._claims(count))
        return new_round

    def claims_of_round(self, claims_round: int) -> list[Claim]:
        """The claims planned for this round; claims worked out anew when the round was planned
        by an earlier run (a restart replays its last micro-batch)."""
        planned_round, claims = self._planned
        if planned_round == claims_round:
            return claims
        return self._claims(self._claims_wanted(retry_now=True))

    def _claims_wanted(self, retry_now: bool = False) -> int:
        live, holders = self._watched()
        return self._starts.claims_wanted(self._assigned(), live, holders, retry_now)

    def _claims(self, count: int) -> list[Claim]:
        return [Claim(self.spool_path, self._spool_id, self.settings, n) for n in range(count)]

    def commit(self, end: dict[str, int]) -> None:
        committed = self._commits.load() or {}
        committed.update(end)
        self._commits.save(committed)
        self._committed.update(end)

    def close(self) -> None:
        self._stopping.set()
        if self._discovery is not None:
            self._discovery.close()
            self._discovery = None
