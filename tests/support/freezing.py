"""A worker of a standalone cluster frozen whole (SIGSTOP), as a host that lost power looks to
the others: its processes answer nothing and close nothing (no RST, no FIN), and its memory and
sockets stay as they were until it is thawed (SIGCONT)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil

from spark_zmq.spool.processes import load_records
from spark_zmq.testing.standalone import StandaloneCluster
from support.holders import pid_of


def children(pid: int) -> set[int]:
    """Every descendant of ``pid`` (as it is now)."""
    try:
        return {child.pid for child in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def freeze_worker(cluster: StandaloneCluster, worker: int, spool: Path) -> list[int]:
    """SIGSTOP every process of ``worker``: its JVM, its executors' JVMs, their Python workers,
    and the capture processes serving its executors (these run in sessions of their own and
    outlive the Python worker that started them, so their records name them). Looked for again
    until nothing new turns up (a process forked meanwhile). The pids stopped."""
    root = cluster.workers[worker].pid
    stopped: set[int] = set()
    while True:
        executors = set(cluster.executor_pids(worker))
        capture = {
            pid_of(record.process)
            for record in load_records(str(spool)).values()
            if pid_of(record.executor) in executors and not record.gone
        }
        new = ({root} | children(root) | capture) - stopped
        if not new:
            return sorted(stopped)
        for pid in sorted(new):
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            stopped.add(pid)


def thaw(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
