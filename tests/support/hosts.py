"""Another host for multi-host tests: a network namespace of its own, held by a process that
sleeps, joined to the test's namespace by a veth pair, as two hosts on one link. Programs run in
it through ``nsenter`` (the test is root in its namespaces: ``scripts/netns.sh``). The veth end
in the test's namespace is named ``szmq...``, which tests/conftest.py allows.

Packets never leave: both ends of the pair are in namespaces that the test made."""

from __future__ import annotations

import os
import subprocess
import sys

from support.common import ROOT, wait_until


def ip(*args: str, netns_of: int | None = None) -> None:
    """``ip ARGS`` here, or in the network namespace of process ``netns_of``."""
    prefix = ["nsenter", "-t", str(netns_of), "-n"] if netns_of else []
    subprocess.run(prefix + ["ip", *args], check=True, capture_output=True)


def join_by_veth(pid: int, local: tuple[str, str], remote: tuple[str, str]) -> None:
    """A veth pair between this namespace and that of process ``pid`` (which ``unshare --net``
    started): ``local`` and ``remote`` are (name, address) of each end, on one /24."""
    wait_until(
        lambda: os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net"),
        timeout=30,
        what="the other host's namespace",
    )
    ip("link", "add", local[0], "type", "veth", "peer", "name", remote[0], "netns", str(pid))
    ip("addr", "add", f"{local[1]}/24", "brd", "+", "dev", local[0])
    ip("link", "set", local[0], "up")
    for command in (
        ("link", "set", "lo", "up"),
        ("link", "set", "lo", "multicast", "on"),
        ("addr", "add", f"{remote[1]}/24", "brd", "+", "dev", remote[0]),
        ("link", "set", remote[0], "up"),
    ):
        ip(*command, netns_of=pid)


class OtherHost:
    """A namespace with ``lo`` and one end of a veth pair (``REMOTE``), joined to the test's
    namespace (``LOCAL``). ``run``/``popen`` start programs in it; ``python`` runs a script of
    the checkout's tests with the venv's interpreter there."""

    def __init__(self, local: tuple[str, str], remote: tuple[str, str]) -> None:
        self.local, self.remote = local, remote
        self._holder = subprocess.Popen(["unshare", "--net", "sleep", "infinity"])
        try:
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
        self._holder.wait(10)
        subprocess.run(["ip", "link", "del", self.local[0]], capture_output=True)
