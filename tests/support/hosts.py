"""Another host for multi-host tests: a network namespace of its own, held by a process that
sleeps (``spark_zmq.testing.hosts.Holder``), joined to the test's namespace by a veth pair, as
two hosts on one link (where ``spark_zmq.testing.hosts.Network`` keeps the test's namespace
off its hosts' bridge). Programs run in it through ``nsenter`` (the test is root in its
namespaces: ``scripts/netns.sh``). The veth end in the test's namespace is named
``szmq...``, which tests/conftest.py allows.

Packets never leave: both ends of the pair are in namespaces that the test made."""

from __future__ import annotations

import os
import subprocess
import sys

from spark_zmq.testing.hosts import Holder, ip_batch
from spark_zmq.testing.processes import network_namespace
from support.common import ROOT, wait_until

#: run by the other host's holder inside its new network namespace (``join_by_veth`` does
#: the rest)
OTHER_HOST_HOLDER = "echo ready\nexec sleep infinity\n"


def join_by_veth(pid: int, local: tuple[str, str], remote: tuple[str, str]) -> None:
    """A veth pair between this namespace and that of process ``pid`` (which ``unshare --net``
    started): ``local`` and ``remote`` are (name, address) of each end, on one /24; the other
    side's ``lo`` is brought up, with multicast."""
    wait_until(
        lambda: network_namespace(pid) not in (None, network_namespace(os.getpid())),
        timeout=30,
        what="the other host's namespace",
    )
    ip_batch(
        [
            f"link add {local[0]} type veth peer name {remote[0]} netns {pid}",
            f"addr add {local[1]}/24 brd + dev {local[0]}",
            f"link set {local[0]} up",
        ]
    )
    ip_batch(
        [
            "link set lo up",
            "link set lo multicast on",
            f"addr add {remote[1]}/24 brd + dev {remote[0]}",
            f"link set {remote[0]} up",
        ],
        pid,
    )


class OtherHost:
    """A namespace with ``lo`` and one end of a veth pair (``REMOTE``), joined to the test's
    namespace (``LOCAL``). ``run``/``popen`` start programs in it; ``python`` runs a script of
    the checkout's tests with the venv's interpreter there."""

    def __init__(self, local: tuple[str, str], remote: tuple[str, str]) -> None:
        self.local, self.remote = local, remote
        self._holder = Holder(["--net"], OTHER_HOST_HOLDER)
        try:
            self._holder.wait_ready()
            join_by_veth(self._holder.pid, local, remote)
        except BaseException:
            self.close()
            raise

    @property
    def address(self) -> str:
        return self.remote[1]

    def command(self, *args: str) -> list[str]:
        return ["nsenter", "-t", str(self._holder.pid), "-n", *args]

    def python(self, script: str, *args: str, timeout: float = 120) -> str:
        """Run ``tests/<script>`` with ``args`` there; its stdout (AssertionError with its
        stderr when it fails)."""
        done = subprocess.run(
            self._python(script, *args), capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"{script} {' '.join(args)} failed:\n{done.stderr}"
        return done.stdout

    def start_python(self, script: str, *args: str) -> subprocess.Popen:
        """Start ``tests/<script>`` with ``args`` there, its output piped (text)."""
        return subprocess.Popen(
            self._python(script, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def _python(self, script: str, *args: str) -> list[str]:
        return self.command(sys.executable, str(ROOT / "tests" / script), *args)

    def close(self) -> None:
        self._holder.kill()
        subprocess.run(["ip", "link", "del", self.local[0]], capture_output=True)
