"""Claim tasks (``capture=executors``): Spark partitions that make sure a capture process runs
on the executor they run on (``start_capture_here``, run by the stream reader's ``read`` in a
Python worker), so that the capture processes, not the tasks, claim the partitions.

The driver plans a round of them in a micro-batch only to start capture processes: when no
capture process runs that could capture an endpoint, or when an executor that ran a task has
none (``enumerator``). A takeover never waits for one: the capture processes alive take the
partitions of one that stopped beating over by themselves, whatever the micro-batch waits on.

``Claim`` is a Spark ``InputPartition``, so this module imports pyspark (and ``enumerator``,
which makes claims, with it); the capture process and a capture service import neither.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from spark_zmq.placement.executors.holder import executor_id
from spark_zmq.placement.executors.launch import launch
from spark_zmq.spool.contract import assignment_state, register_executor
from spark_zmq.spool.layout import SpoolError
from spark_zmq.spool.processes import EXECUTOR, serving
from spark_zmq.stream_settings import CaptureSettings


@dataclass(frozen=True)
class Claim(InputPartition):
    """A task's instruction: make sure a capture process runs on this executor for the spool,
    starting one if none does."""

    spool_path: str
    spool_id: str  # the driver's assignment names it: proves the executor sees the spool
    settings: CaptureSettings
    number: int  # its place in the round (tasks of a round differ only by it)


class SpoolNotShared(SpoolError):
    """An executor does not see the driver's spool folder."""


def start_capture_here(claim: Claim) -> None:
    """Start a capture process on this executor unless one runs (CaptureError if it fails to
    start; SpoolNotShared if this executor does not see the driver's spool)."""
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
    if serving(claim.spool_path, executor, EXECUTOR, claim.settings.lease_timeout):
        return
    launch(claim.spool_path, claim.settings, EXECUTOR, executor)
