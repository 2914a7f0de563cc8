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
