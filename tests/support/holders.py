"""Capture processes of this test run's network namespace: under scripts/test.sh each pytest-xdist
worker has a namespace of its own, so a test that waits for "no capture process left" or bounds
their memory sees its own, never those of a test running beside it in another worker."""

from __future__ import annotations

import os
from pathlib import Path

from spark_zmq.spool.leases import load_lease
from spark_zmq.testing.processes import HOLDER_MARKER, network_namespace, running_processes


def holders_here() -> dict[int, str]:
    """pid -> command line of every holder process in this process's network namespace."""
    return processes_here(HOLDER_MARKER)


def processes_here(marker: str) -> dict[int, str]:
    """pid -> command line of every process in this process's network namespace whose command
    line holds ``marker``."""
    here = network_namespace("self")
    found = running_processes(marker).items()
    return {pid: cmd for pid, cmd in found if network_namespace(pid) == here}


def threads_here(marker: str) -> list[str]:
    """One line per thread of every process in this network namespace whose command line holds
    ``marker``: pid, thread id, its name (capture's zmq context names its I/O threads
    ``<prefix>/ZMQbg/IO/<n>``), its state and the kernel function it waits in, for a
    failure's message (a thread that does not move shows where it waits)."""
    lines = []
    for pid in processes_here(marker):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        lines += [f"{pid}/{tid} {_thread_state(pid, tid)}" for tid in tids]
    return lines


def _thread_state(pid: int, tid: str) -> str:
    task = f"/proc/{pid}/task/{tid}"
    try:
        with open(f"{task}/comm") as f:
            name = f.read().strip()
        with open(f"{task}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"{task}/wchan") as f:
            wchan = f.read().strip() or "-"
    except OSError:
        return "gone"
    return f"{name} {state} {wchan}"


def held_partitions(spool: Path, keys) -> dict[str, tuple[int, str, int]]:
    """key -> (epoch, executor, holder pid) of partitions with a live, unsealed holder."""
    found = {}
    for key in keys:
        lease = load_lease(str(spool), key)
        if lease is not None and lease.holder and not lease.sealed:
            found[key] = (lease.epoch, lease.executor, int(lease.holder.rsplit("/", 1)[1]))
    return found


def pid_of(name: str) -> int:
    """The pid in a ``host/pid`` name (of an executor, or a capture process: leases, records)."""
    return int(name.rsplit("/", 1)[1])
