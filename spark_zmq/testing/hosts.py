"""Several hosts on one machine, for tests that need a cluster whose nodes, and the peers, are
different hosts: separate addresses and names, no shared ``/tmp``, one shared folder (NFS).

Each ``Host`` is a network, mount and UTS namespace held by a long-lived process (``sleep``
under ``unshare``); ``Host.popen`` runs a command "on the host" with ``nsenter``. A host has:

- ``lo`` and ``eth0``, a veth whose other end is a port of one Linux bridge, which lives in a
  network namespace of its own and is linked to nothing else: packets go from host to host and
  nowhere further. ``eth0`` has ``<subnet>.<10 + n>/24`` and the multicast route
  ``224.0.0.0/4``, so mDNS (ZeroConf) and Zyre beacons reach the other hosts;
- its own host name (``socket.gethostname()``), and an ``/etc/hosts`` (bind-mounted, the same
  file on every host) that names every host of the network;
- a private ``/tmp`` and ``/dev/shm`` (empty tmpfs): ``tempfile.gettempdir()`` paths are not
  shared between hosts, nor with the process that made the network;
- the network's folder at its own path, so that ``Network.shared`` (the stand-in for NFS) and
  each host's ``logs`` folder are seen by every host and by the test at the same path; and the
  code the hosts run (this Python's environment, the package's checkout, the working
  directory: ``code_folders``), where it is under ``/tmp`` (a test's ``tmp_path``, a checkout
  cloned there). The holder makes the host's tmpfs, binds those folders at their places in it,
  and moves it over ``/tmp``.

The process that makes a ``Network`` keeps its own namespace (only ``lo`` under the tests'
``scripts/netns.sh``): it reaches the hosts through the file system and through ``Host.run``,
never over the bridge. Needs root, or a user namespace that maps root (scripts/netns.sh).

``HostCluster`` starts a Spark standalone cluster on such hosts.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from spark_zmq.testing.processes import network_namespace, processes_in_network_namespace
from spark_zmq.testing.standalone import (
    EXECUTOR_CLASS,
    application_settings,
    environment,
    executor_pids_of,
    kill_group,
    master_command,
    submit_command,
    wait_for_workers,
    worker_command,
)

NSENTER = shutil.which("nsenter") or "nsenter"
#: the hosts' subnet, a /24 that no real interface of the machine sees (the hosts' namespaces
#: and the bridge's are the only ones that have it)
DEFAULT_SUBNET = "10.57.0"
MULTICAST = "224.0.0.0/4"
BRIDGE = "br0"
#: the first host's last address byte
FIRST_HOST = 10
#: a host name: one DNS label (so that it can be an ``/etc/hosts`` entry and a file name)
HOST_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}")
#: how long a holder may take to make its namespaces
HOLDER_TIMEOUT = 30.0

#: run by a host's holder inside its new namespaces: $0 host name, $1 the network's folder,
#: then the other folders under /tmp that every host must still see (the code it runs). A
#: tmpfs is made on /mnt, each of those folders bound at its place inside it, and the tmpfs
#: with them moved onto /tmp: the rest of /tmp is private to the host
HOST_HOLDER = r"""
set -e
hostname "$0"
folder=$1
mount -t tmpfs -o mode=1777,size=2g tmpfs /mnt
for path in "$@"; do
  case "$path" in
    /tmp/?*) inside="/mnt/${path#/tmp/}"; mkdir -p "$inside"; mount --bind "$path" "$inside" ;;
  esac
done
mount --move /mnt /tmp
mount -t tmpfs -o mode=1777,size=512m tmpfs /dev/shm
mount --bind "$folder/etc-hosts" /etc/hosts
echo ready
exec sleep infinity
"""
#: run on a host that lost power, its link cut, its processes dead: destroys the TCP sockets
#: its kernel still holds (their FIN or RST would go out once the link is back), then the
#: neighbour entries, and with them the packets queued while an address was being resolved
FORGET_NETWORK = "ss -K -tan && ip neigh flush all"
#: run by the bridge's holder inside its new network namespace
BRIDGE_HOLDER = f"""
set -e
ip link set lo up
ip link add {BRIDGE} type bridge mcast_snooping 0
ip link set {BRIDGE} up
echo ready
exec sleep infinity
"""


class Holder:
    """A ``sleep`` that holds namespaces made by ``unshare`` after running a set-up script;
    its pid names them for ``nsenter``. Invariant once made: the set-up script succeeded."""

    def __init__(self, unshare: Sequence[str], script: str, *args: str) -> None:
        self.process = subprocess.Popen(
            ["unshare", *unshare, "sh", "-c", script, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.pid = self.process.pid
        #: its network namespace (``net:[inode]``), known once it is ready
        self.namespace = ""

    def wait_ready(self, timeout: float = HOLDER_TIMEOUT) -> None:
        """Returns once the set-up script printed ``ready``; kills the holder and raises with
        the script's errors if it did not within ``timeout`` seconds."""
        assert self.process.stdout is not None and self.process.stderr is not None
        answered, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not answered or self.process.stdout.readline().strip() != "ready":
            self._end()
            errors = self.process.stderr.read().strip() or f"nothing within {timeout} s"
            self.kill()
            raise RuntimeError(f"namespace set-up failed: {errors}")
        self.namespace = network_namespace(self.pid) or ""

    def _end(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def kill(self) -> None:
        """Ends the holder (and so its namespaces, once nothing else runs in them)."""
        self._end()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def ip_batch(commands: Sequence[str], in_network_of: int | None = None) -> None:
    """``ip -batch`` of ``commands``, in the network namespace of the process ``in_network_of``
    (None: this process's)."""
    enter = [NSENTER, f"--target={in_network_of}", "--net", "--"] if in_network_of else []
    subprocess.run(
        [*enter, "ip", "-batch", "-"],
        input="\n".join(commands) + "\n",
        text=True,
        check=True,
        capture_output=True,
    )


class Host:
    """One emulated host of a ``Network`` (see the module's docstring for what it has).

    ``popen``/``run`` run commands on it; ``cut_link``/``restore_link`` unplug and plug its
    cable (the bridge's port goes down: nothing reaches it or leaves it, and its own processes
    see no error); ``power_off`` unplugs it and kills every process on it, as when it loses
    power. Its holder (the namespaces themselves, the "hardware") survives ``power_off``, so its
    ``/tmp`` stays and ``restore_link`` brings it back as an empty host."""

    def __init__(self, network: Network, name: str, index: int, holder: Holder) -> None:
        self.network = network
        self.name = name
        self.address = f"{network.subnet}.{FIRST_HOST + index}"
        #: its veth's end on the bridge
        self.port = f"port{index}"
        #: a folder for this host's logs, seen by every host and by the test (not private)
        self.logs = network.folder / "logs" / name
        self.logs.mkdir(parents=True, exist_ok=True)
        self._holder = holder
        self._started: list[subprocess.Popen] = []

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.address})"

    @property
    def holder_pid(self) -> int:
        """The pid that names the host's namespaces (``nsenter --target``)."""
        return self._holder.pid

    def command(self, args: Sequence[str], cwd: str | os.PathLike | None = None) -> list[str]:
        """``args`` as a command that runs on this host, in ``cwd`` (default: this process's
        working directory, which every host sees: ``code_folders``)."""
        where = os.fspath(cwd) if cwd is not None else os.getcwd()
        return [
            NSENTER,
            f"--target={self.holder_pid}",
            "--net",
            "--mount",
            "--uts",
            f"--wdns={where}",
            "--",
            *map(os.fspath, args),
        ]

    def popen(
        self,
        args: Sequence[str],
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        **popen_kwargs: Any,
    ) -> subprocess.Popen:
        """``subprocess.Popen`` of ``args`` on this host, with ``env`` (default: this process's
        environment). nsenter execs the command, so the Popen's pid is the command's."""
        process = subprocess.Popen(self.command(args, cwd), env=env, **popen_kwargs)
        self._started.append(process)
        return process

    def run(
        self,
        args: Sequence[str],
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        **run_kwargs: Any,
    ) -> subprocess.CompletedProcess:
        """``subprocess.run`` of ``args`` on this host."""
        return subprocess.run(self.command(args, cwd), env=env, **run_kwargs)

    def processes(self) -> list[int]:
        """Pids of every process running on this host (in its network namespace), its holder
        left out."""
        pids = processes_in_network_namespace(self._holder.namespace)
        return [pid for pid in pids if pid != self.holder_pid]

    def cut_link(self) -> None:
        """Unplug the host's cable: its port on the bridge goes down."""
        ip_batch([f"link set {self.port} down"], self.network.bridge_pid)

    def restore_link(self) -> None:
        """Plug the cable back in."""
        ip_batch([f"link set {self.port} up"], self.network.bridge_pid)

    def power_off(self, timeout: float = 10.0) -> None:
        """The host loses power: the link goes first, so that no FIN or RST of its dying
        sockets reaches a peer, then every process on it is SIGKILLed, then the sockets its
        kernel still holds (a closed connection's FIN waits for an answer, and would be sent
        again once the link is back) are destroyed: ``restore_link`` then brings back a host
        that has just started, with nothing running and no connection."""
        self.cut_link()
        self.kill_processes(timeout)
        subprocess.run(
            [NSENTER, f"--target={self.holder_pid}", "--net", "--", "sh", "-c", FORGET_NETWORK],
            check=True,
            capture_output=True,
        )

    def kill_processes(self, timeout: float = 10.0) -> None:
        """SIGKILL every process on the host (again and again, until none is left: a process
        may start another meanwhile) and reap those this object started."""
        deadline = time.monotonic() + timeout
        while pids := self.processes():
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {pids} of host {self.name} outlived SIGKILL")
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self._reap()
            time.sleep(0.05)
        self._reap()

    def _reap(self) -> None:
        """Collect the exit status of the processes this object started that ended."""
        self._started = [process for process in self._started if process.poll() is None]

    def close(self) -> None:
        """Kill everything on the host, then the host itself (its namespaces and veth go)."""
        try:
            self.kill_processes()
        finally:
            self._holder.kill()


def code_folders() -> list[Path]:
    """The folders of the code that runs on the hosts, where they are under /tmp (whose other
    contents each host has its own of): this Python's environment, the checkout or
    site-packages that ``spark_zmq`` is imported from, and this process's working directory;
    none inside another."""
    import spark_zmq

    tmp = Path("/tmp")
    candidates = {
        Path(sys.prefix).resolve(),
        Path(spark_zmq.__file__).resolve().parents[1],
        Path.cwd().resolve(),
    }
    under = sorted(path for path in candidates if tmp in path.parents)
    return [path for path in under if not any(other in path.parents for other in under)]


class Network:
    """Hosts joined by one bridge; ``folder`` (absolute) holds ``shared/`` (seen by every host
    at the same path), ``logs/<host>/`` and the hosts file. ``close`` kills everything it
    started; it is idempotent."""

    def __init__(self, folder: Path, subnet: str = DEFAULT_SUBNET) -> None:
        self.folder = Path(folder).resolve()
        #: folders under /tmp that hosts see as this process does besides the network's: the
        #: code they run (a checkout and its venv cloned under /tmp, as CI may do)
        self.code = code_folders()
        self.subnet = subnet
        #: the stand-in for NFS: the same folder, at the same path, on every host
        self.shared = self.folder / "shared"
        self.shared.mkdir(parents=True, exist_ok=True)
        self.hosts_file = self.folder / "etc-hosts"
        self.hosts_file.write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n")
        self.hosts: dict[str, Host] = {}
        self._bridge = Holder(["--net"], BRIDGE_HOLDER)
        self._closed = False
        try:
            self._bridge.wait_ready()
        except BaseException:
            self.close()
            raise

    @property
    def bridge_pid(self) -> int:
        return self._bridge.pid

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def add_host(self, name: str) -> Host:
        """A new host named ``name``, up and reachable by name from every host."""
        return self.add_hosts(name)[0]

    def add_hosts(self, *names: str) -> list[Host]:
        """New hosts, their namespaces made side by side."""
        self._check_names(names)
        first = len(self.hosts)
        with open(self.hosts_file, "a") as hosts_file:  # appended: hosts already up read it
            hosts_file.write(
                "".join(
                    f"{self.subnet}.{FIRST_HOST + first + n}\t{name}\n"
                    for n, name in enumerate(names)
                )
            )
        holders = [self._holder(name) for name in names]
        added = []
        try:
            for n, (name, holder) in enumerate(zip(names, holders, strict=True)):
                holder.wait_ready()
                added.append(Host(self, name, first + n, holder))
                self.hosts[name] = added[-1]
            self._link(added)
        except BaseException:
            for holder in holders[len(added) :]:
                holder.kill()
            raise
        return added

    def _check_names(self, names: Sequence[str]) -> None:
        for name in names:
            if not HOST_NAME.fullmatch(name):
                raise ValueError(f"host name {name!r}: use lower-case letters, digits and '-'")
        taken = set(self.hosts).intersection(names)
        if taken or len(set(names)) != len(names):
            raise ValueError(f"host names {sorted(names)}: each may be used once")
        if len(self.hosts) + len(names) > 255 - FIRST_HOST:
            raise ValueError("no addresses left in the subnet")

    def _holder(self, name: str) -> Holder:
        return Holder(
            ["--net", "--mount", "--uts", "--propagation", "private"],
            HOST_HOLDER,
            name,
            str(self.folder),
            *map(str, self.code),
        )

    def _link(self, hosts: Sequence[Host]) -> None:
        """A veth per host, made directly in the host's and the bridge's namespaces (never in
        this one), its bridge end a port of the bridge, its host end ``eth0`` with the host's
        address and the multicast route."""
        ip_batch(
            [
                f"link add eth0 netns {host.holder_pid} type veth "
                f"peer name {host.port} netns {self.bridge_pid}"
                for host in hosts
            ]
        )
        ip_batch([f"link set {host.port} master {BRIDGE} up" for host in hosts], self.bridge_pid)
        for host in hosts:
            ip_batch(
                [
                    "link set lo up",
                    f"addr add {host.address}/24 brd + dev eth0",
                    "link set eth0 multicast on up",
                    f"route add {MULTICAST} dev eth0",
                ],
                host.holder_pid,
            )

    def close(self) -> None:
        """Kill every process on every host, then the hosts and the bridge: their namespaces,
        veths and mounts go with their last process. Safe to call twice, and after a failed
        start."""
        if self._closed:
            return
        self._closed = True
        with ThreadPoolExecutor(max(1, len(self.hosts))) as pool:
            list(pool.map(_close_quietly, self.hosts.values()))
        self._bridge.kill()


def _close_quietly(host: Host) -> None:
    """Close a host; a failure is reported but does not keep the other hosts alive."""
    try:
        host.close()
    except Exception as exc:
        print(f"closing host {host.name}: {exc}", file=sys.stderr)


#: prints the master's JSON (run on a host, where its web UI is reachable)
FETCH_JSON = (
    "import sys, urllib.request\n"
    "with urllib.request.urlopen(sys.argv[1], timeout=2) as answer:\n"
    "    sys.stdout.write(answer.read().decode())\n"
)


class HostCluster:
    """A Spark standalone cluster across hosts: the master on ``master`` (port 7077, web UI
    8080, bound to its host name as ``start-master.sh`` does), a worker of 1 core and 2 GB on
    each of ``workers``, and applications submitted in client mode from ``driver``. Nothing
    pins an address: each JVM takes its host's from the host's name. Spark's network timeouts
    are its defaults. ``stop`` kills what it started.

    The daemons start side by side (a worker retries until the master is up); the cluster is
    up once the master lists every worker as alive."""

    MASTER_PORT = 7077
    MASTER_UI_PORT = 8080
    WORKER_UI_PORT = 8081

    def __init__(
        self,
        master: Host,
        workers: Sequence[Host],
        driver: Host,
        python: str = sys.executable,
        timeout: float = 180.0,
    ) -> None:
        """``python``: PYSPARK_PYTHON, the same path on every host (a venv outside /tmp)."""
        self.master, self.workers, self.driver = master, list(workers), driver
        self.python = python
        self.master_url = f"spark://{master.name}:{self.MASTER_PORT}"
        self.env = environment(python, local_ip=None)
        self.daemons: dict[str, subprocess.Popen] = {}
        started = time.monotonic()
        try:
            self._start_daemons()
            wait_for_workers(self.master_state, len(self.workers), timeout, master.network.folder)
        except BaseException:
            self.stop()
            raise
        #: seconds from the first daemon's start to every worker alive
        self.start_seconds = time.monotonic() - started

    def _start_daemons(self) -> None:
        ui = self.MASTER_UI_PORT
        self._spawn(self.master, "master", master_command(self.MASTER_PORT, ui, self.master.name))
        for worker in self.workers:
            work_dir = worker.logs / "work"
            command = worker_command(self.master_url, work_dir, self.WORKER_UI_PORT)
            self._spawn(worker, "worker", command)

    def _spawn(self, host: Host, role: str, command: list[str]) -> None:
        with open(host.logs / f"{role}.log", "wb") as log:
            self.daemons[host.name] = host.popen(
                command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def master_state(self) -> dict:
        """The master's JSON (its web UI's ``/json/``), fetched on the master's host; OSError
        while it does not answer."""
        url = f"http://{self.master.name}:{self.MASTER_UI_PORT}/json/"
        fetched = self.master.run(
            [self.python, "-c", FETCH_JSON, url], capture_output=True, text=True, timeout=30
        )
        if fetched.returncode != 0:
            raise OSError(fetched.stderr.strip().splitlines()[-1:])
        return json.loads(fetched.stdout)

    def settings(self) -> dict[str, str]:
        """Spark settings of an application of this cluster (its driver on ``driver``)."""
        return application_settings(self.master_url, len(self.workers), self.python)

    def submit(
        self,
        script: str,
        *args: str,
        conf: dict[str, str] | None = None,
        log_level: str = "INFO",
    ) -> subprocess.Popen:
        """spark-submit ``script`` from the driver's host (client mode), its own process group,
        stdout and stderr piped as text."""
        command = submit_command({**self.settings(), **(conf or {})}, script, *args)
        return self.driver.popen(
            command,
            env=dict(self.env, SPARK_ZMQ_LOG_LEVEL=log_level),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def executor_pids(self, worker: Host) -> list[int]:
        """JVMs of the executors that ``worker``'s worker launched."""
        return executor_pids_of(self.daemons[worker.name].pid)

    def kill_executors(self, worker: Host) -> list[int]:
        """SIGKILL the executors of ``worker`` (their worker lives on and reports them lost);
        returns their pids."""
        pids = self.executor_pids(worker)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def stop(self) -> None:
        """Kill the daemons and everything they started (their process groups)."""
        for process in reversed(self.daemons.values()):
            kill_group(process)


__all__ = ["EXECUTOR_CLASS", "Host", "HostCluster", "Network"]
