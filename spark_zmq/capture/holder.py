"""Capture on an executor: the process that holds one partition's lease (``capture=executors``).

A claim task (``take_partition``, run by the stream reader's ``read`` on an executor) starts
``python -m spark_zmq.capture.holder`` on its host, detached from the Python worker, and waits
until it has claimed the partition's next epoch in the spool. The holder then runs the same
``Capture`` as the driver would, on one endpoint, and once per ``TICK``:

- renews its lease (and stops at once if a newer holder has taken the partition over),
- follows the driver's assignment: metadata changes, the endpoint leaving (read until its peer
  disconnects, then the partition is retired),
- records what the query committed in the partition's index, and deletes what retention lets
  go (``spoolRetention``).

It ends, flushing what it received and sealing its epoch so the partition is free again, when
its executor's JVM is gone, when the query has not renewed the assignment for
``captureIdleTimeout``, or when its endpoint left. No orphan outlives those on any host.
"""

from __future__ import annotations

import functools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict

from spark_zmq.capture.assignment import ASSIGNMENT, COMMITS, CaptureSettings, Claim
from spark_zmq.capture.loop import Capture
from spark_zmq.errors import CaptureError
from spark_zmq.log import logger
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.spool.downtime import Downtime
from spark_zmq.spool.layout import JsonState, LeaseLost, SpoolError, folder_name, partition_keys
from spark_zmq.spool.leases import load_lease
from spark_zmq.spool.writer import Spool

#: seconds between a holder's heartbeats and checks
TICK = 0.5
#: folder of the spool where tasks note which executors are alive
EXECUTORS = "@executors"  # "@" is quoted in partition folder names: no clash
#: folder of the spool where holders log
HOLDER_LOGS = "@holders"
#: seconds a claim task waits for the holder it started to claim the partition
START_TIMEOUT = 60.0


class SpoolNotShared(SpoolError):
    """An executor does not see the driver's spool folder."""


# -- the claim task (runs in a Python worker on an executor) ---------------------------------


def take_partition(claim: Claim) -> None:
    """Make sure ``claim.key`` has a live holder; start one on this executor if needed."""
    assignment = JsonState(os.path.join(claim.spool_path, f"{ASSIGNMENT}.json")).load()
    if not assignment or assignment.get("spool_id") != claim.spool_id:
        raise SpoolNotShared(
            f"{claim.settings.format_name}: with capture=executors, option spoolPath must name "
            f"storage that every node reaches; the executor on host {socket.gethostname()} "
            f"does not see the driver's spool {claim.spool_path!r} (its assignment.json is "
            f"{'missing' if not assignment else 'another spool'}). Use a shared filesystem "
            f"path (NFS, a cluster filesystem mount) for spoolPath"
        )
    executor = executor_id()
    register_executor(claim.spool_path, executor)
    lease = load_lease(claim.spool_path, claim.key)
    if (lease.epoch if lease else 0) != claim.expect_epoch:
        return  # somebody claimed it since the driver planned this task
    if claim.declines_left and _more_loaded(
        claim.spool_path, executor, claim.settings.lease_timeout
    ):
        logger.info(
            "%s: executor %s leaves partition %s to a less loaded executor",
            claim.settings.format_name,
            executor,
            claim.key,
        )
        return
    _start_holder(claim)


def register_executor(root: str, executor: str, gone: bool = False) -> None:
    """Note in the spool that an executor is alive (every task does, at most once a second
    per process), or that it is gone (its holders see its JVM end): claim tasks spread
    partitions over the executors seen alive."""
    now = time.time()
    if not gone and now - _registered.get((root, executor), 0.0) < 1.0:
        return
    _registered[(root, executor)] = now
    folder = os.path.join(root, EXECUTORS)
    os.makedirs(folder, exist_ok=True)
    JsonState(os.path.join(folder, folder_name(executor) + ".json")).save(
        {"executor": executor, "at": now, "gone": gone}
    )


_registered: dict[tuple[str, str], float] = {}


def _live_executors(root: str, window: float) -> set[str]:
    """Executors that ran a task within ``window`` seconds and are not known to be gone."""
    folder = os.path.join(root, EXECUTORS)
    found = set()
    now = time.time()
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        try:
            doc = JsonState(os.path.join(folder, name)).load()
        except SpoolError:
            continue
        if doc and not doc["gone"] and now - doc["at"] < window:
            found.add(doc["executor"])
    return found


def _more_loaded(root: str, executor: str, lease_timeout: float) -> bool:
    """True if another live executor holds fewer partitions than this one."""
    held: dict[str, int] = dict.fromkeys(_live_executors(root, lease_timeout), 0)
    now = time.time()
    for key in partition_keys(root):
        lease = load_lease(root, key)
        if lease and lease.holder and not lease.sealed and now - lease.at < lease_timeout:
            held[lease.executor] = held.get(lease.executor, 0) + 1
    mine = held.pop(executor, 0)
    return bool(held) and mine > min(held.values())


def _start_holder(claim: Claim) -> None:
    args = json.dumps(
        {
            "spool_path": claim.spool_path,
            "key": claim.key,
            "expect_epoch": claim.expect_epoch,
            "settings": asdict(claim.settings),
        }
    )
    log_path = holder_log(claim.spool_path, claim.key)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "spark_zmq.capture.holder"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
    stdin, stdout = process.stdin, process.stdout  # both pipes, as asked for above
    assert stdin is not None and stdout is not None
    try:
        stdin.write(args.encode())  # keys stay off the command line
        stdin.close()
    except BrokenPipeError:  # it ended at once: its exit status says why
        pass
    ready, _, _ = select.select([stdout], [], [], START_TIMEOUT)
    line = stdout.readline().decode(errors="replace").strip() if ready else ""
    stdout.close()
    if line.startswith(("ready", "busy")):
        return
    if not ready:
        process.kill()
    try:
        code = process.wait(5)
    except subprocess.TimeoutExpired:
        code = None
    if ready and code is not None and code < 0:
        # killed while starting (OOM killer, an operator): not a fault of the query; the
        # partition is claimed again in a later micro-batch
        logger.warning(
            "%s: the capture process for partition %s was killed by signal %d "
            "while starting; it will be started again",
            claim.settings.format_name,
            claim.key,
            -code,
        )
        return
    status = "still running" if code is None else f"exit status {code}"
    raise CaptureError(
        f"{claim.settings.format_name}: the capture process for partition "
        f"{claim.key!r} did not start: {line or 'no answer'} ({status}); the end "
        f"of its log {log_path}:\n{_tail(log_path)}"
    )


def holder_log(spool_path: str, key: str) -> str:
    """Where a partition's holders write their log (stderr): ``@holders/<partition>.log`` in
    the spool. An executor's own log goes away with the executor; the spool stays."""
    folder = os.path.join(spool_path, HOLDER_LOGS)
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, folder_name(key) + ".log")


def _tail(path: str, size: int = 3000) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, os.path.getsize(path) - size))
        return f.read().decode(errors="replace")


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


# -- the holder process ----------------------------------------------------------------------


class Holder:
    """Captures one partition for as long as it holds the partition's lease."""

    def __init__(self, spool_path: str, key: str, settings: CaptureSettings) -> None:
        self.key = key
        self.settings = settings
        self.name = settings.format_name
        self.jvm = jvm_pid()
        self.spool = Spool(
            spool_path,
            settings.max_spool_bytes,
            exclusive=False,
            executor=executor_id(),
            retention=settings.retention,
        )
        self.assignment = JsonState(os.path.join(spool_path, f"{ASSIGNMENT}.json"))
        self.commits = JsonState(os.path.join(spool_path, f"{COMMITS}.json"))
        self.capture: Capture | None = None
        self.downtime: Downtime | None = None  # the gap since the previous holder, owed

    def claim(self, expect_epoch: int) -> int:
        """Take the partition's next epoch (LeaseLost if someone else did). The time since the
        previous holder's last heartbeat is owed as a gap row, written just before the first
        rows this holder captures (what the peer published before this holder's subscription
        reached it is lost too)."""
        self.spool.open_partition(self.key, expect_epoch=expect_epoch)
        previous = self.spool.inherited.get(self.key)
        if previous is not None:

            def describe(key: str, since: str, until: str) -> str:
                return (
                    f"gap: partition {key} had no holder between {since} and {until} (its "
                    f"holder {previous.holder} on executor {previous.executor} stopped; "
                    f"{until}: the first message received again); what was published "
                    f"meanwhile is lost"
                )

            self.downtime = Downtime({self.key: previous.at}, describe=describe)
        return self.spool.epochs[self.key]

    def _assigned(self) -> Endpoint | None:
        doc = self.assignment.load() or {}
        found = doc.get("endpoints", {}).get(self.key)
        return Endpoint.from_json(found) if found else None

    def run(self) -> str:
        """Capture until a reason to stop; returns the reason."""
        endpoint = self._assigned()
        if endpoint is None:
            return "its endpoint is no longer assigned"
        settings = self.settings
        self.capture = Capture.of(self.spool, settings, self.name, self.downtime)
        self.capture.start()
        self.capture.endpoint_joined(endpoint)
        renewed_at, beat, leaving = time.monotonic(), None, False
        current = endpoint
        while True:
            time.sleep(TICK)
            try:
                self.spool.heartbeat(self.key)
            except LeaseLost:
                return "a newer holder took the partition over"
            if self.jvm and not _is_java(self.jvm):
                register_executor(self.spool.root, self.spool.executor, gone=True)
                return "its executor ended"
            doc = self.assignment.load() or {}
            if doc.get("beat") != beat:
                beat, renewed_at = doc.get("beat"), time.monotonic()
            elif time.monotonic() - renewed_at > settings.idle_timeout:
                return f"the query has not renewed it for {settings.idle_timeout:g} s"
            committed = (self.commits.load() or {}).get(self.key)
            if committed is not None:
                self.spool.truncate(self.key, committed)
            found = doc.get("endpoints", {}).get(self.key)
            partition = self.spool.partitions[self.key]
            if found is None and not leaving:
                self.capture.endpoint_left(self.key)
                leaving = True
            elif found is None and partition.retired and (committed or 0) >= partition.end:
                # only now: what it captured is let go once Spark committed it, by its holder
                # (a holder that left earlier left its data behind, to be read again)
                return "its endpoint left, and the query committed all it captured"
            elif found is not None and (leaving or Endpoint.from_json(found) != current):
                leaving, current = False, Endpoint.from_json(found)
                self.capture.endpoint_joined(current)
            self.capture.check()

    def close(self, reason: str, failure: str = "") -> None:
        """Write what was received, then let the partition go; a ``failure`` stays in the
        lease, where the driver finds it and fails the query with it."""
        if self.capture is not None:
            self.capture.close()
        self.spool.release(self.key, failure)
        self.spool.close()
        logger.info("%s: holder of partition %s stopped: %s", self.name, self.key, reason)


def main() -> int:
    args = json.loads(sys.stdin.read())
    try:
        given = args["settings"]
        settings = CaptureSettings.from_json(given)
        holder = Holder(args["spool_path"], args["key"], settings)
        epoch = holder.claim(args["expect_epoch"])
    except LeaseLost as exc:
        print(f"busy: {exc}", flush=True)
        return 0
    except Exception as exc:  # told to the claim task, which fails with it
        print(f"error: {type(exc).__name__}: {exc}", flush=True)
        return 1
    print(f"ready {epoch}", flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    logger.info(
        "%s: holding partition %s (epoch %d) for executor %s",
        holder.name,
        holder.key,
        epoch,
        holder.spool.executor,
    )
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    reason, failure = "an error", ""
    try:
        reason = holder.run()
    except SystemExit:
        reason = "terminated (SIGTERM)"
    except Exception as exc:
        logger.exception("%s: holder of partition %s failed", holder.name, holder.key)
        failure = str(exc)
    finally:
        holder.close(reason, failure)
    return 0


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
