"""Capture processes seen from outside: for tests, benchmarks and an operator looking for them."""

from __future__ import annotations

import os

#: what a holder process's command line holds
HOLDER_MARKER = "-m spark_zmq.placement.executors.holder "


def running_holders() -> dict[int, str]:
    """pid -> command line of every holder process this host runs (for tests and for an
    operator looking for capture processes)."""
    return running_processes(HOLDER_MARKER)


def running_processes(marker: str) -> dict[int, str]:
    """pid -> command line of every process this host runs whose command line (its arguments
    joined by spaces) holds ``marker``."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found[int(entry)] = cmdline
    return found


def rss_bytes(pid: int) -> int:
    """Resident memory of a process, 0 once it is gone (for watching capture processes)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def network_namespace(pid: int | str) -> str | None:
    """The network namespace a process runs in (``net:[inode]``), None once it is gone (a
    zombie has none either): "self" for this process."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def processes_in_network_namespace(namespace: str) -> list[int]:
    """Every process that runs in ``namespace`` (as ``network_namespace`` names it): on an
    emulated host (``spark_zmq.testing.hosts``), the processes of that host."""
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit() and network_namespace(entry) == namespace
    ]
