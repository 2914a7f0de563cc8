"""What the driver hands to capture on executors (``capture=executors``): the claim tasks that
start holders, each with the holder's settings (``stream_settings.CaptureSettings``), and what
such a task does on its executor (``take_partition``, run by the stream reader's ``read`` in a
Python worker). ``Claim`` is a Spark ``InputPartition``, so this module imports pyspark (and
``enumerator``, which makes claims, with it); the holder process and a capture service import
neither.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

from pyspark.sql.datasource import InputPartition

from spark_zmq.errors import CaptureError
from spark_zmq.log import logger
from spark_zmq.placement.executors.holder import executor_id
from spark_zmq.spool.contract import (
    assignment_state,
    holder_log,
    live_executors,
    register_executor,
)
from spark_zmq.spool.layout import SpoolError, partition_keys
from spark_zmq.spool.leases import load_lease
from spark_zmq.stream_settings import CaptureSettings

#: what a claim task runs to start a holder (``python -m``)
HOLDER_MODULE = "spark_zmq.placement.executors.holder"
#: seconds a claim task waits for the holder it started to claim the partition
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class Claim(InputPartition):
    """A task's instruction: make sure ``key`` has a live holder, starting one here if its
    highest epoch is still ``expect_epoch`` (0: never claimed)."""

    spool_path: str
    spool_id: str  # the driver's assignment names it: proves the executor sees the spool
    key: str
    expect_epoch: int
    declines_left: int  # how many times the task may leave it to a less loaded executor
    settings: CaptureSettings


class SpoolNotShared(SpoolError):
    """An executor does not see the driver's spool folder."""


def take_partition(claim: Claim) -> None:
    """Make sure ``claim.key`` has a live holder; start one on this executor if needed."""
    assignment = assignment_state(claim.spool_path).load()
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


def _more_loaded(root: str, executor: str, lease_timeout: float) -> bool:
    """True if another live executor holds fewer partitions than this one."""
    held: dict[str, int] = dict.fromkeys(live_executors(root, lease_timeout), 0)
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
            [sys.executable, "-m", HOLDER_MODULE],
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


def _tail(path: str, size: int = 3000) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, os.path.getsize(path) - size))
        return f.read().decode(errors="replace")
