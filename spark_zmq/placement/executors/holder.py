"""A capture process (``capture=executors``): one per executor and spool, holding many
partitions, each under an epoch of its own.

A claim task starts one on its executor where none runs (``claim``), and the driver one on its
own host for the endpoints that only that host reaches (``reach``), both with ``launch``:
``python -m spark_zmq.placement.executors.holder ROLE``. It runs one ``Capture`` for every
partition it holds and, once per ``TICK``, by itself (never waiting for Spark):

- reads the others' records (``watch``) and claims its part of the partitions that are free
  to claim (``spread``): new endpoints, and those of a process whose record stopped beating for
  ``leaseTimeout`` (its host lost power, its executor froze), which it takes over at once,
  without Spark. A claim takes the partition's next epoch, which exactly one claimant wins and
  which fences the holder before it. The time since that holder's last complete flush is owed
  as a gap row, written before the first rows;
- lets go of a partition that a newer holder took over (it was paused): nothing more of it is
  written, and it learns so from the records or its sealed epoch folder, or from a write that
  fails;
- follows the driver's assignment: metadata changes, an endpoint leaving (read until its peer
  disconnects, then retired, and let go once the query committed all it captured, so that no
  row of it is read twice);
- records what the query committed in the indexes of its partitions, and deletes what
  retention lets go (``spoolRetention``);
- writes its record (``spool.processes``): its heartbeat, and what it holds. One small file per
  process and tick, however many partitions it holds.

It ends, writing what it received and sealing its epochs so that its partitions are free at
once, when its executor's JVM is gone, when the query has not renewed the assignment for
``captureIdleTimeout``, or when a newer capture process serves its executor (this one was
paused and replaced). A failure of capture goes into its record, and the driver fails the query
with it. No capture process outlives those on any host.

The files it shares with the driver are ``spool.contract``'s and ``spool.processes``'; it
imports no pyspark.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import sys
import time

from spark_zmq.capture.loop import Capture
from spark_zmq.errors import CaptureError, SparkZmqError
from spark_zmq.log import logger
from spark_zmq.monitoring.health import Health, ready
from spark_zmq.monitoring.metrics import CaptureView, view_of
from spark_zmq.monitoring.server import MonitoringServer, capture_server
from spark_zmq.placement.executors.reach import may_capture
from spark_zmq.placement.executors.spread import spread
from spark_zmq.placement.executors.watch import ProcessWatch
from spark_zmq.protocols.addresses import bracketed
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.spool.contract import assignment_state, commits_state, register_executor
from spark_zmq.spool.downtime import Alive, Downtime, down_since
from spark_zmq.spool.layout import LeaseLost, epoch_name, partition_dir
from spark_zmq.spool.leases import Lease, process_id
from spark_zmq.spool.processes import EXECUTOR, ProcessRecord, host_identity, save_record, serving
from spark_zmq.spool.remote import default_host
from spark_zmq.spool.writer import Spool
from spark_zmq.stream_settings import CaptureSettings

#: seconds between a capture process's heartbeats and checks
TICK = 0.5
#: seconds a new capture process beats before it claims, so that the processes a round of claim
#: tasks started at once see each other before they share the partitions out
SETTLE = 1.5
#: seconds a partition free to claim waits for the process its share gives it to (``spread``)
#: before any process that may capture it claims it
CLAIM_PATIENCE = 3.0
#: seconds new partitions are left to the capture process of an executor that a claim task
#: noted and that has not written its record yet (it is starting), before others claim them
START_WAIT = 10.0
#: seconds (by wall clock) an executor's note counts for that
NOTED_WINDOW = 30.0
#: epoch folders of held partitions checked per tick (in turn) for a seal by a newer holder
FENCE_CHECKS_PER_TICK = 8
#: partitions named in the log line of a tick's claims (the others are counted)
NAMED_IN_CLAIM_LINE = 5


@functools.lru_cache(maxsize=1)
def executor_id() -> str:
    """host/pid of the JVM this process serves (the executor, or the driver in local mode):
    the nearest ``java`` among this process's ancestors."""
    pid = jvm_pid()
    return f"{socket.gethostname()}/{pid if pid else os.getpid()}"


def jvm_pid(pid: int | None = None) -> int | None:
    pid = os.getppid() if pid is None else pid
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            return None
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name == "java":
            return pid
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return None


def _is_java(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
            return f.read().strip() == "java"
    except OSError:
        return False


class Holder:
    """A capture process's partitions, capture and heartbeat (see the module doc).

    Invariants: ``_endpoints`` holds the endpoint capture was told of for each partition this
    process claimed and has not let go of; the spool holds (``Spool.held``) a subset of them,
    the others were taken over and are let go of at the next tick."""

    def __init__(self, spool_path: str, settings: CaptureSettings, role: str = EXECUTOR) -> None:
        self.root = spool_path
        self.settings = settings
        self.role = role
        self.name = settings.format_name
        self.jvm = jvm_pid()
        self.executor = executor_id()
        self.host = host_identity()
        self.process = process_id()
        self.started = time.time()
        self.spool = Spool(
            spool_path,
            settings.max_spool_bytes,
            exclusive=False,
            executor=self.executor,
            retention=settings.retention,
        )
        self.assignment = assignment_state(spool_path)
        self.commits = commits_state(spool_path)
        self.watch = ProcessWatch(spool_path, settings.lease_timeout)
        self.downtime = Downtime({}, describe=self._gap_text)
        self.capture: Capture | None = None
        self._monitoring: MonitoringServer | None = None
        self._endpoints: dict[str, Endpoint] = {}
        self._leaving: set[str] = set()  # partitions whose endpoint left the assignment
        self._previous: dict[str, Lease] = {}  # the previous holder of each one claimed
        self._committed: dict[str, int] = {}  # what was recorded of commits.json
        self._free_since: dict[str, float] = {}  # (monotonic) when each was first seen free
        self._beat = 0
        self._began = time.monotonic()
        self._query_beat: object = None
        self._renewed_at = time.monotonic()
        self._fence_turn = 0
        self._written_at = float("-inf")  # (monotonic) when the record was last written
        self._record_failing = False

    # -- life -----------------------------------------------------------------------------------

    def busy(self) -> ProcessRecord | None:
        """Another capture process that serves this executor in this role, if one runs."""
        return serving(self.root, self.executor, self.role, self.settings.lease_timeout)

    def start(self) -> None:
        """Say that this process lives (its first record), then start capture (of nothing
        yet: partitions join as it claims them) and, with option ``metrics``, serve its
        metrics and probes on a free port, which its record names."""
        self._write_record()
        self.capture = Capture.of(self.spool, self.settings, self.name, self.downtime)
        self.capture.start()
        self._monitor()
        self._write_record()

    def _monitor(self) -> None:
        """Serve the metrics on option ``metrics``'s address (its port is the driver's: every
        capture process takes a free one, named in its record, so that several on one host do
        not collide); where this host has no such address, on loopback (logged)."""
        if self.settings.metrics is None:
            return
        address, _ = self.settings.metrics
        try:
            self._monitoring = self._metrics_server(address)
        except OSError as exc:
            logger.warning(
                "%s: cannot serve metrics on %s on this host (%s): serving them on loopback",
                self.name,
                address,
                exc,
            )
            self._monitoring = self._metrics_server("127.0.0.1")
        self._monitoring.start()

    def _metrics_server(self, address: str) -> MonitoringServer:
        return capture_server(self.name, (address, 0), self.view, self.liveness, self.readiness)

    def view(self) -> CaptureView:
        """What a scrape of this process's metrics reads (``monitoring.metrics``)."""
        return view_of(self._capture(), self.spool)

    def liveness(self) -> Health:
        """Whether capture runs (the liveness probe)."""
        try:
            self._capture().check()
        except SparkZmqError as exc:
            return Health(False, str(exc))
        return Health(True, f"{self.name}: capture runs")

    def readiness(self) -> Health:
        """Liveness, and the spool takes a write (the readiness probe)."""
        return ready(self.liveness(), self.root)

    def run(self) -> str:
        """Tick until a reason to stop; returns the reason."""
        while True:
            time.sleep(TICK)
            reason = self.tick()
            if reason is not None:
                return reason

    def tick(self) -> str | None:
        """One round of the loop (module doc); a reason to stop, or None."""
        capture = self._capture()
        if self.jvm and not _is_java(self.jvm):
            register_executor(self.root, self.executor, gone=True)
            return "its executor ended"
        doc = self.assignment.load() or {}
        if self._idle(doc.get("beat")):
            return f"the query has not renewed its assignment for {self.settings.idle_timeout:g} s"
        self.watch.refresh()
        rival = self._rival()
        if rival is not None:
            return f"capture process {rival.process} serves executor {self.executor} now"
        endpoints = {k: Endpoint.from_json(v) for k, v in doc.get("endpoints", {}).items()}
        self._let_go_of_lost()
        self._record_commits()
        self._follow(endpoints)
        if time.monotonic() - self._began >= SETTLE:
            self._claim_share(endpoints, doc.get("driver_host"))
        capture.check()
        self._write_record()
        return None

    def close(self, reason: str, failure: str = "") -> None:
        """Write what was received, say so (and any ``failure``, which the driver fails the
        query with) in the record, then let every partition go: sealed, free at once."""
        if self._monitoring is not None:
            self._monitoring.close()
        if self.capture is not None:
            self.capture.close()
        self._write_record(failure=failure)  # the last flush, before anyone may claim
        for key in self.spool.held():
            self.spool.release(key, failure)
        self.spool.close()
        self._write_record(gone=True, failure=failure)
        logger.info(
            "%s: capture process for executor %s stopped: %s", self.name, self.executor, reason
        )

    def _capture(self) -> Capture:
        if self.capture is None:
            raise CaptureError(f"{self.name}: the capture process has not started")
        return self.capture

    def _idle(self, beat: object) -> bool:
        """Whether the query's beat in the assignment has not moved for captureIdleTimeout."""
        now = time.monotonic()
        if beat != self._query_beat:
            self._query_beat, self._renewed_at = beat, now
            return False
        return now - self._renewed_at > self.settings.idle_timeout

    def _rival(self) -> ProcessRecord | None:
        """A live process that serves this executor in this role and started after this one
        (its starter found this one silent: it was paused): the older one gives way."""
        mine = (self.started, self.process)
        for record in self.watch.live():
            newer = (record.started, record.process) > mine
            if newer and record.serves(self.executor, self.role):
                return record
        return None

    # -- what it holds --------------------------------------------------------------------------

    def _let_go_of_lost(self) -> None:
        """Let go of the partitions a newer holder took over: listed by a live record at a
        higher epoch, or sealed under this one (a few checked per tick), or found out by the
        capture thread (a write into its sealed folder failed)."""
        held = self.spool.held()
        lost = {key: "a newer holder took it over" for key in set(self._endpoints) - set(held)}
        for key, (record, epoch) in self.watch.holders().items():
            if key in held and record.process != self.process and epoch > held[key]:
                lost[key] = f"capture process {record.process} holds it now (epoch {epoch})"
        for key in self._sealed_under_me(held):
            lost.setdefault(key, "its epoch folder was sealed by a newer holder")
        for key, why in sorted(lost.items()):
            self._let_go(key, why)

    def _sealed_under_me(self, held: dict[str, int]) -> list[str]:
        """Of the next FENCE_CHECKS_PER_TICK held partitions in turn, those whose epoch folder
        is gone (sealed: this process seals its own only once it no longer holds them)."""
        keys = sorted(held)
        if not keys:
            return []
        first = self._fence_turn % len(keys)
        checked = (keys[first:] + keys[:first])[:FENCE_CHECKS_PER_TICK]
        self._fence_turn = first + len(checked)
        return [
            key
            for key in checked
            if not os.path.isdir(os.path.join(partition_dir(self.root, key), epoch_name(held[key])))
        ]

    def _let_go(self, key: str, why: str) -> None:
        """Stop capturing ``key`` and write nothing more of it (capture logs it, with ``why``)."""
        self.spool.let_go(key)
        self._capture().endpoint_dropped(key, why)
        self._forget(key)

    def _forget(self, key: str) -> None:
        for known in (self._endpoints, self._previous, self._committed):
            known.pop(key, None)
        self._leaving.discard(key)

    def _record_commits(self) -> None:
        """Record in the index of each partition held what the query committed of it."""
        committed = self.commits.load() or {}
        for key in self.spool.held():
            end = committed.get(key)
            if end is None or end == self._committed.get(key):
                continue
            try:
                self.spool.truncate(key, end)
            except LeaseLost as exc:
                self._let_go(key, str(exc))
                continue
            self._committed[key] = end

    def _follow(self, endpoints: dict[str, Endpoint]) -> None:
        """Follow the assignment: an endpoint of a partition held that changed is joined again
        (capture keeps its socket where it can), one that left is read until its peer
        disconnects, and its partition let go once the query committed all it captured."""
        capture = self._capture()
        for key, current in list(self._endpoints.items()):
            found = endpoints.get(key)
            if found is None:
                self._leave(key)
            elif key in self._leaving or found != current:
                self._leaving.discard(key)
                self._endpoints[key] = found
                capture.endpoint_joined(found)

    def _leave(self, key: str) -> None:
        if key not in self._leaving:
            self._capture().endpoint_left(key)
            self._leaving.add(key)
            return
        partition = self.spool.partitions.get(key)
        if partition is None or not partition.retired:
            return
        if self._committed.get(key, 0) >= partition.end:
            # only now: a partition let go earlier would leave its data behind, to be read again
            self.spool.release(key)
            self._forget(key)
            logger.info(
                "%s: partition %s let go: its endpoint left, and the query committed all it "
                "captured",
                self.name,
                key,
            )

    # -- claims ---------------------------------------------------------------------------------

    def _claim_share(self, endpoints: dict[str, Endpoint], driver_host: str | None) -> None:
        """Claim this process's part of the partitions free to claim that it may capture
        (``spread``): of those a holder had before, among the live processes; of new ones, with
        the processes about to start counted in (``ProcessWatch.expected``), whose part waits
        for them up to START_WAIT. A partition that waited CLAIM_PATIENCE for a live process
        in vain is claimed by any process that may."""
        me = self._record()
        holders = self.watch.holders()

        def able(record: ProcessRecord, key: str) -> bool:
            return may_capture(record, endpoints[key].address, driver_host)

        free = {}
        for key in sorted(endpoints):
            if key in me.partitions or key in holders or not able(me, key):
                continue
            epoch = self.watch.free_epoch(key)
            if epoch is not None:
                free[key] = epoch
        now = time.monotonic()
        self._free_since = {key: self._free_since.get(key, now) for key in free}
        live = [r for r in self.watch.live() if r.process != self.process] + [me]
        loads = {r.process: len(r.partitions) for r in live}
        chosen = spread([k for k, epoch in free.items() if epoch], live, loads, able)
        for process in chosen.values():
            loads[process] += 1
        expected = self.watch.expected(START_WAIT, NOTED_WINDOW)
        chosen.update(spread([k for k, e in free.items() if not e], live + expected, loads, able))
        waited_for = {record.process for record in expected}
        mine = {key for key, process in chosen.items() if process == self.process}
        mine |= {
            key
            for key in free
            if now - self._free_since[key] >= CLAIM_PATIENCE and chosen.get(key) not in waited_for
        }
        claimed = {}
        for key in sorted(mine):
            epoch = self._claim(endpoints[key], free[key])
            if epoch is not None:
                claimed[key] = epoch
            self._beat_if_due()  # many claims on a slow storage: the others see it alive
        if claimed:
            logger.info("%s: claimed %s", self.name, _claimed_text(claimed))

    def _claim(self, endpoint: Endpoint, expect_epoch: int) -> int | None:
        """Claim ``endpoint``'s partition (its epoch after ``expect_epoch``) and capture it;
        the epoch, or None if another claimant was first. The time since its previous holder's
        last complete flush is owed as a gap row."""
        key = endpoint.key
        try:
            self.spool.open_partition(key, expect_epoch=expect_epoch)
        except LeaseLost:
            return None
        self._free_since.pop(key, None)
        previous = self.spool.inherited.get(key)
        if previous is not None:
            self._previous[key] = previous
            self.downtime.owe(key, self._last_flush_of(previous))
        self._endpoints[key] = endpoint
        self._capture().endpoint_joined(endpoint)
        return self.spool.epochs[key]

    def _last_flush_of(self, previous: Lease) -> float:
        """Since when a partition taken over from ``previous`` was not captured: its holder's
        last complete flush, from its record (or its lease alone: a holder of release 0.2)."""
        record = self.watch.records.get(previous.holder)
        alive = Alive(record.process, record.flushed_at) if record is not None else None
        since = down_since(previous, alive)
        return previous.at if since is None else since

    def _gap_text(self, key: str, since: str, until: str) -> str:
        previous = self._previous.get(key)
        who = f"{previous.holder} on executor {previous.executor}" if previous else "(unknown)"
        return (
            f"gap: partition {key} had no holder between {since} and {until} (its holder "
            f"{who} stopped; {until}: the first message received again); what was "
            f"published meanwhile is lost"
        )

    # -- the record -----------------------------------------------------------------------------

    def _record(self, gone: bool = False, failure: str = "") -> ProcessRecord:
        return ProcessRecord(
            process=self.process,
            executor=self.executor,
            host=self.host,
            role=self.role,
            started=self.started,
            beat=self._beat,
            at=time.time(),
            flushed_at=self.downtime.alive_at,
            partitions=self.spool.held(),
            gone=gone,
            failure=failure,
            metrics=self._metrics_url(),
        )

    def _metrics_url(self) -> str:
        """Where its metrics are, as a scraper on another host reaches them."""
        if self._monitoring is None:
            return ""
        host, port = self._monitoring.address
        if host in ("0.0.0.0", "::", ""):
            host = default_host()
        return f"http://{bracketed(host)}:{port}"

    def _beat_if_due(self) -> None:
        """Write the record if a tick has passed since it was last written."""
        if time.monotonic() - self._written_at >= TICK:
            self._write_record()

    def _write_record(self, gone: bool = False, failure: str = "") -> None:
        """The heartbeat: write this process's record with a new beat. A spool that cannot
        take it is logged once per episode: the others take the partitions over, and fence
        this process, after leaseTimeout."""
        self._beat += 1
        self._written_at = time.monotonic()
        try:
            save_record(self.root, self._record(gone, failure))
        except OSError as exc:
            if not self._record_failing:
                logger.warning("%s: cannot write this process's record: %s", self.name, exc)
            self._record_failing = True
            return
        self._record_failing = False


def _claimed_text(claimed: dict[str, int]) -> str:
    """The partitions a tick claimed, in one line: the count, and the first few with epochs."""
    named = ", ".join(f"{k} (epoch {e})" for k, e in sorted(claimed.items())[:NAMED_IN_CLAIM_LINE])
    more = len(claimed) - NAMED_IN_CLAIM_LINE
    count = "1 partition" if len(claimed) == 1 else f"{len(claimed)} partitions"
    return f"{count}: {named}" + (f" and {more} more" if more > 0 else "")


def main() -> int:
    args = json.loads(sys.stdin.read())
    try:
        settings = CaptureSettings.from_json(args["settings"])
        holder = Holder(args["spool_path"], settings, args.get("role", EXECUTOR))
        other = holder.busy()
        if other is not None:
            print(f"busy: capture process {other.process} serves executor", flush=True)
            return 0
        holder.start()
    except Exception as exc:  # told to whoever started it, which fails the query with it
        print(f"error: {type(exc).__name__}: {exc}", flush=True)
        return 1
    print("ready", flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    logger.info(
        "%s: capture process %s started for executor %s (%s) on host %s",
        holder.name,
        holder.process,
        holder.executor,
        holder.role,
        holder.host,
    )
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    reason, failure = "an error", ""
    try:
        reason = holder.run()
    except SystemExit:
        reason = "terminated (SIGTERM)"
    except Exception as exc:
        logger.exception("%s: capture process for executor %s failed", holder.name, holder.executor)
        failure = str(exc)
    finally:
        holder.close(reason, failure)
    return 0


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
