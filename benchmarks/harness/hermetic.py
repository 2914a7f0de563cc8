"""Benchmarks open sockets and run discovery: they run in a private network namespace only."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from pathlib import Path

NETNS_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "netns.sh"


def ensure_private_network(script: str) -> None:
    """Re-execute ``script`` inside ``scripts/netns.sh`` unless already there, then refuse to go
    on if any interface but ``lo`` is visible: nothing a benchmark opens may reach a network."""
    if os.environ.get("SPARK_ZMQ_NETNS") != "1":
        bash = shutil.which("bash") or "/bin/bash"
        sys.stdout.flush()
        os.execv(
            bash,
            [bash, str(NETNS_SCRIPT), sys.executable, str(Path(script).resolve()), *sys.argv[1:]],
        )
    interfaces = sorted(name for _, name in socket.if_nameindex())
    if interfaces != ["lo"]:
        sys.exit(
            f"refusing to run: interfaces {interfaces} are visible; expected only lo "
            f"(run through {NETNS_SCRIPT})"
        )
