"""Capture on an executor: the process that holds one partition's lease (``capture=executors``).

A claim task (``claim.take_partition``, run by the stream reader's ``read`` on an executor)
starts ``python -m spark_zmq.placement.executors.holder`` on its host, detached from the Python
worker, and waits until it has claimed the partition's next epoch in the spool. The holder then
runs the same ``Capture`` as the driver would, on one endpoint, and once per ``TICK``:

- renews its lease (and stops at once if a newer holder has taken the partition over),
- follows the driver's assignment: metadata changes, the endpoint leaving (read until its peer
  disconnects, then the partition is retired),
- records what the query committed in the partition's index, and deletes what retention lets
  go (``spoolRetention``).

It ends, flushing what it received and sealing its epoch so the partition is free again, when
its executor's JVM is gone, when the query has not renewed the assignment for
``captureIdleTimeout``, or when its endpoint left. No orphan outlives those on any host.

The files it shares with the driver are ``spool.contract``'s; it imports no pyspark.
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
from spark_zmq.log import logger
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.spool.contract import assignment_state, commits_state, register_executor
from spark_zmq.spool.downtime import Downtime
from spark_zmq.spool.layout import LeaseLost
from spark_zmq.spool.writer import Spool
from spark_zmq.stream_settings import CaptureSettings

#: seconds between a holder's heartbeats and checks
TICK = 0.5


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
        self.assignment = assignment_state(spool_path)
        self.commits = commits_state(spool_path)
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
