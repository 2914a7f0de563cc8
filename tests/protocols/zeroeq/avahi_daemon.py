"""A private avahi-daemon for tests: Debian's mDNS responder, the one the shipped C++ ZeroEQ
library announces and browses through (via Servus). An independent implementation of DNS-SD:
what it resolves, a C++ peer resolves.

It runs inside the test's network namespace with a D-Bus system bus of its own (so
``avahi-browse`` and ``avahi-publish-service`` talk to it, not to a host's daemon) and, since
avahi keeps its pid file in ``/run/avahi-daemon``, a tmpfs mounted there in the test's private
mount namespace (``scripts/netns.sh`` makes one). ``scripts/setup.sh`` installs the packages
(``avahi-daemon``, ``avahi-utils``, ``dbus``).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

RUNTIME = Path("/run/avahi-daemon")
TOOLS = ("avahi-daemon", "avahi-browse", "avahi-publish-service", "dbus-daemon", "mount")

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/><allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/>
  </policy>
</busconfig>
"""

AVAHI_CONFIG = """[server]
use-ipv4=yes
use-ipv6=no
allow-interfaces={interfaces}
enable-dbus=yes
[publish]
publish-hinfo=no
publish-workstation=no
"""


@dataclass(frozen=True)
class Resolved:
    """One line of ``avahi-browse -rp``: a service instance as avahi resolved it."""

    interface: str
    name: str
    service: str
    host: str
    address: str
    port: int
    txt: dict[str, str]


def unescape(text: str) -> str:
    """avahi-browse's parsable escapes: ``\\.`` for a dot, ``\\058`` (decimal) for a byte."""
    return re.sub(
        r"\\(\d{3}|.)", lambda m: chr(int(m.group(1))) if m.group(1).isdigit() else m.group(1), text
    )


def parse_txt(field: str) -> dict[str, str]:
    pairs = re.findall(r'"((?:[^"\\]|\\.)*)"', field)
    return dict(pair.split("=", 1) if "=" in pair else (pair, "") for pair in pairs)


class Avahi:
    """avahi-daemon on ``interfaces`` with a private bus; ``stop()`` ends both. ``enter`` is a
    command prefix that runs the daemon and its tools in another network namespace
    (``OtherHost.command``; the bus is a Unix socket in ``folder``, reached from both), so that
    ``avahi-browse`` names the interfaces of that namespace."""

    def __init__(
        self, folder: Path, interfaces: tuple[str, ...] = ("lo",), enter: tuple[str, ...] = ()
    ) -> None:
        missing = [
            tool
            for tool in TOOLS
            if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()
        ]
        if missing:
            raise RuntimeError(
                f"avahi tests need {', '.join(missing)}: run scripts/setup.sh "
                f"(as root it installs avahi-daemon, avahi-utils and dbus)"
            )
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.enter = list(enter)
        #: the host name avahi announces as its own (``<hostname>.local``)
        self.hostname = socket.gethostname().split(".")[0]
        self.log_path = folder / "avahi.log"
        self.env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=f"unix:path={folder / 'bus'}")
        self._mount_runtime()
        (folder / "bus.conf").write_text(BUS_CONFIG.format(socket=folder / "bus"))
        (folder / "avahi.conf").write_text(AVAHI_CONFIG.format(interfaces=",".join(interfaces)))
        self._bus = subprocess.Popen(
            ["dbus-daemon", "--nofork", "--config-file", str(folder / "bus.conf")], env=self.env
        )
        self._wait_for((folder / "bus").exists, "the private D-Bus socket")
        self._log = open(self.log_path, "w")
        self._daemon = subprocess.Popen(
            [
                *enter,
                "avahi-daemon",
                "-f",
                str(folder / "avahi.conf"),
                "--no-drop-root",
                "--no-chroot",
                "--no-rlimits",
                "--debug",
            ],
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._publishers: list[subprocess.Popen] = []
        self._wait_for(lambda: "Server startup complete" in self.log(), "avahi-daemon to start")

    def _mount_runtime(self) -> None:
        """A tmpfs on avahi's runtime folder, seen only in this mount namespace, so the pid
        file neither clashes with a host's daemon nor outlives the test."""
        if os.environ.get("SPARK_ZMQ_NETNS") != "1":
            raise RuntimeError(
                "avahi tests must run in the private namespaces of "
                "scripts/netns.sh (scripts/test.sh does it)"
            )
        try:
            RUNTIME.mkdir(exist_ok=True)
        except PermissionError:  # not root outside: a private /run instead
            subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/run"], check=True)
            RUNTIME.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(RUNTIME)], check=True)

    def _wait_for(self, predicate, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; avahi log:\n{self.log()}")
            time.sleep(0.1)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def browse(self, service: str) -> list[Resolved]:
        """Every instance of ``service`` that avahi resolves now (``avahi-browse -rpt``)."""
        done = subprocess.run(
            [*self.enter, "avahi-browse", "-rpt", service],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        found = []
        for line in done.stdout.splitlines():
            fields = line.split(";")
            if fields[0] == "=" and len(fields) >= 10:
                found.append(
                    Resolved(
                        fields[1],
                        unescape(fields[3]),
                        fields[4],
                        fields[6],
                        fields[7],
                        int(fields[8]),
                        parse_txt(";".join(fields[9:])),
                    )
                )
        return found

    def wait_for_instance(self, service: str, name: str, timeout: float = 30.0) -> Resolved:
        """The resolved record of instance ``name`` once avahi resolves it."""
        deadline = time.monotonic() + timeout
        while True:
            found = [r for r in self.browse(service) if r.name == name]
            if found:
                return found[0]
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"avahi did not resolve {name!r} ({service}) within "
                    f"{timeout} s; avahi log:\n{self.log()[-3000:]}"
                )
            time.sleep(0.5)

    def publish(self, name: str, service: str, port: int, txt: dict[str, str]) -> subprocess.Popen:
        """Announce a service through avahi (``avahi-publish-service``) until ``withdraw`` or
        ``stop()``."""
        args = [
            *self.enter,
            "avahi-publish-service",
            "--",
            name,
            service,
            str(port),
        ]  # a name may start "-"
        args += [f"{key}={value}" for key, value in txt.items()]
        process = subprocess.Popen(
            args, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self._publishers.append(process)
        return process

    def withdraw(self, *published: subprocess.Popen) -> None:
        """End announcements that ``publish`` started (avahi sends their goodbyes)."""
        for process in published:
            process.terminate()
        for process in published:
            process.wait(10)

    def stop(self) -> None:
        for process in self._publishers + [self._daemon, self._bus]:
            process.terminate()
        for process in self._publishers + [self._daemon, self._bus]:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        self._log.close()
        subprocess.run(["umount", str(RUNTIME)], check=False)
