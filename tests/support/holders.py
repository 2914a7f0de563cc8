"""Capture processes of this test run's network namespace: under scripts/test.sh each pytest-xdist
worker has a namespace of its own, so a test that waits for "no capture process left" or bounds
their memory sees its own, never those of a test running beside it in another worker."""

from __future__ import annotations

import os

from spark_zmq.testing.processes import running_holders


def _network_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def holders_here() -> dict[int, str]:
    """pid -> command line of every holder process in this process's network namespace."""
    here = _network_namespace("self")
    return {pid: cmd for pid, cmd in running_holders().items() if _network_namespace(pid) == here}


def threads_here(marker: str) -> list[str]:
    """One line per thread of every process in this network namespace whose command line holds
    ``marker``: pid, thread id, its name (zmq names its I/O threads ``ZMQbg/IO/<n>``), its
    state and the kernel function it waits in, for a failure's message (a thread that does
    not move shows where it waits)."""
    here = _network_namespace("self")
    lines = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or _network_namespace(entry) != here:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker not in f.read().replace(b"\0", b" ").decode(errors="replace"):
                    continue
            tids = os.listdir(f"/proc/{entry}/task")
        except OSError:
            continue
        for tid in tids:
            lines.append(f"{entry}/{tid} {_thread_state(entry, tid)}")
    return lines


def _thread_state(pid: str, tid: str) -> str:
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
