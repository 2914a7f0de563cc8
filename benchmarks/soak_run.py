"""The processes of one soak run (``soak.py``): the broker, the publishers, the query, the
capture service, the faults injected into them, and the waits and samples on the way."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from soak_accounting import PEER_SETTLE, PeerWindow, committed_offsets

from spark_zmq.testing.processes import rss_bytes, running_holders

#: the soak's script: each part runs as ``soak.py <part> ...`` in a process of its own
HERE = Path(__file__).resolve().parent / "soak.py"
CHANNEL = "soak/"
#: every fault, in the order a run injects them, with the placements it applies to
#: (``Run.inject`` does it). ``capture-service`` comes second so that a short run (7 faults)
#: stops the service both ways.
FAULTS: dict[str, tuple[str, ...]] = {
    "publisher": ("executors", "driver", "service"),
    "capture-service": ("service",),
    "broker": ("executors", "driver", "service"),
    "driver-kill": ("executors", "driver", "service"),
    "query": ("executors", "driver", "service"),
    "capture": ("executors",),
}
#: how many times a run injects a fault at least (it goes on past its end until then): the
#: service's restart alternates SIGTERM and SIGKILL, and each must come
FAULTS_AT_LEAST = {"capture-service": 2}
PLACEMENTS = ("executors", "driver", "service")


def capture_options(sub_port: int) -> dict[str, str]:
    """The reader options of the soak's capture, whoever captures: the query or the service."""
    return {
        "subPort": str(sub_port),
        "channels": CHANNEL,
        "leaseTimeout": "3",
        "captureIdleTimeout": "30",
    }


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Run:
    """The processes of one soak run and what was measured on the way."""

    folder: Path
    publishers: int
    rate: float
    capture: str
    pub_port: int = 0
    sub_port: int = 0
    frontend_port: int = 0
    backend_port: int = 0
    broker: subprocess.Popen | None = None
    query: subprocess.Popen | None = None
    #: the capture service (``capture=service`` only)
    service: subprocess.Popen | None = None
    senders: dict[int, subprocess.Popen] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    #: restarts of peers, in epoch seconds
    peer_windows: list[PeerWindow] = field(default_factory=list)
    peak_capture_rss: int = 0
    peak_query_rss: int = 0
    peak_spool: int = 0

    def part(self, *args: str) -> subprocess.Popen:
        log = open(self.folder / "parts.log", "ab")
        return subprocess.Popen(
            [sys.executable, str(HERE), *args], stdout=log, stderr=log, start_new_session=True
        )

    def start_broker(self) -> None:
        self.broker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "spark_zmq",
                "ebus",
                "broker",
                "--frontend-port",
                str(self.frontend_port),
                "--backend-port",
                str(self.backend_port),
                "--pub-port",
                str(self.pub_port),
                "--sub-port",
                str(self.sub_port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / "broker.log", "ab"),
            start_new_session=True,
        )

    def start_publisher(self, index: int) -> None:
        self.senders[index] = self.part(
            "publisher",
            "--index",
            str(index),
            "--pub-port",
            str(self.pub_port),
            "--rate",
            str(self.rate),
            "--state",
            str(self.folder / f"publisher-{index}.json"),
        )

    def start_service(self) -> None:
        """``spark-zmq capture`` on the soak's spool, with the query's capture options; it leads
        a process group of its own."""
        given = capture_options(self.sub_port)
        options = [f"--option={name}={value}" for name, value in given.items()]
        self.service = subprocess.Popen(
            [sys.executable, "-m", "spark_zmq", "capture", "--format", "ebus", *options]
            + ["--spool", str(self.spool), "--progress-every", "10"],
            stdout=open(self.folder / "service.log", "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_query(self) -> None:
        self.query = self.part(
            "query",
            "--sub-port",
            str(self.sub_port),
            "--spool",
            str(self.spool),
            "--checkpoint",
            str(self.folder / "checkpoint"),
            "--sink",
            str(self.sink),
            "--capture",
            self.capture,
        )

    @property
    def spool(self) -> Path:
        return self.folder / "spool"

    @property
    def sink(self) -> Path:
        return self.folder / "table"

    def kinds(self) -> list[str]:
        """The faults that apply to this run's placement, in the order they are injected."""
        return [kind for kind, placements in FAULTS.items() if self.capture in placements]

    def faults_to_come(self) -> bool:
        """True while a fault of this placement has come fewer times than it must."""
        return any(self.faults.get(k, 0) < FAULTS_AT_LEAST.get(k, 1) for k in self.kinds())

    def inject(self, fault: str, rng: random.Random) -> str:
        """Inject one fault of ``FAULTS``; what was done."""
        self.faults[fault] = self.faults.get(fault, 0) + 1
        began = time.time()
        if fault == "publisher":
            index = rng.randrange(self.publishers)
            stop(self.senders[index])
            self.start_publisher(index)
            self.peer_windows.append((index, began, time.time() + PEER_SETTLE))
            return f"publisher {index} restarted"
        if fault == "broker":
            stop(self.broker)
            self.start_broker()
            self.peer_windows.append((None, began, time.time() + PEER_SETTLE))
            return "broker restarted"
        if fault == "query":
            stop(self.query, timeout=60)
            self.start_query()
            return "query restarted from its checkpoint"
        if fault == "driver-kill":
            return self.kill_driver()
        if fault == "capture-service":
            return self.restart_service()
        wait_for_capture(self, timeout=60)
        holders = sorted(running_holders())
        victim = rng.choice(holders)
        os.kill(victim, signal.SIGKILL)
        return f"capture process {victim} killed"

    def kill_driver(self) -> str:
        """SIGKILL the query's process group (it runs in a session of its own: the driver's
        Python, its JVM and the JVM's Python workers), then restart it on the same checkpoint
        and spool."""
        assert self.query is not None
        group = os.getpgid(self.query.pid)
        assert group == self.query.pid, "the query must lead a process group of its own"
        os.killpg(group, signal.SIGKILL)
        self.query.wait()
        wait_for_group_gone(group, timeout=30)
        self.start_query()
        return f"query's process group {group} killed (SIGKILL); restarted on its checkpoint"

    def restart_service(self) -> str:
        """Stop the capture service's process group, by SIGTERM (a clean stop) and by SIGKILL
        in turn, then start it again on the same spool."""
        assert self.service is not None
        group = os.getpgid(self.service.pid)
        assert group == self.service.pid, "the service must lead a process group of its own"
        how = signal.SIGKILL if self.faults["capture-service"] % 2 == 0 else signal.SIGTERM
        os.killpg(group, how)
        try:
            self.service.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(group, signal.SIGKILL)
            self.service.wait()
        wait_for_group_gone(group, timeout=30)
        self.start_service()
        return f"capture service's process group {group} stopped ({how.name}); restarted"

    def sample(self) -> None:
        holders = list(running_holders()) + ([self.service.pid] if self.service else [])
        self.peak_capture_rss = max([self.peak_capture_rss] + [rss_bytes(p) for p in holders])
        if self.query is not None:
            self.peak_query_rss = max(self.peak_query_rss, tree_rss_bytes(self.query.pid))
        self.peak_spool = max(self.peak_spool, folder_bytes(self.spool))

    def stop_all(self) -> None:
        for process in [*self.senders.values(), self.query, self.service, self.broker]:
            stop(process, timeout=60)


def wait_for_capture(run: Run, timeout: float) -> float:
    """The time at which capture runs: the spool holds a row, and with ``capture=executors``
    a capture process runs (after a query restart: the new one's)."""
    deadline = time.monotonic() + timeout
    while not capturing(run):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no capture within {timeout:.0f} s; see {run.folder}")
        run.sample()
        time.sleep(0.5)
    return time.monotonic()


def wait_for_spool_growth(run: Run, timeout: float) -> float:
    """The time at which the spool holds more rows than at the call: capture runs (after a
    restart, it wrote its downtime's gap row before that first message)."""
    from spark_zmq.spool.reader import read_snapshot

    def rows() -> int:
        return sum(state.end for state in read_snapshot(str(run.spool)).values())

    before, deadline = rows(), time.monotonic() + timeout
    while rows() <= before:
        if time.monotonic() > deadline:
            raise RuntimeError(f"capture did not resume within {timeout:.0f} s; see {run.folder}")
        run.sample()
        time.sleep(0.5)
    return time.monotonic()


def capturing(run: Run) -> bool:
    from spark_zmq.spool.reader import read_snapshot

    if run.capture == "executors" and not running_holders():
        return False
    return any(state.end > 0 for state in read_snapshot(str(run.spool)).values())


def wait_for_group_gone(group: int, timeout: float) -> None:
    """Until no process of ``group`` is left (the JVM's children die a moment after it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise RuntimeError(f"process group {group} still has processes {timeout:.0f} s after SIGKILL")


def stop(process: subprocess.Popen | None, timeout: float = 20) -> None:
    """Terminate ``process`` (None: none started), SIGKILL its group after ``timeout``."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def tree_rss_bytes(root: int) -> int:
    """RSS of a process and its descendants (the query: its JVM and Python workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2 :].split()[1]), []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss_bytes(pid)
        todo += children.get(pid, [])
    return total


def folder_bytes(folder: Path) -> int:
    total = 0
    for base, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(base, name))
            except OSError:
                pass
    return total


def drain(run: Run, timeout: float) -> bool:
    """Until Spark has committed a batch that ends at or after every offset the spool holds, and
    the spool held the same offsets at the check before: a holder that is still starting (after
    a kill, say) writes its gap row later, and a check between two writes would miss it.
    False if that did not happen within ``timeout`` (a query that stopped committing)."""
    from spark_zmq.spool.reader import read_snapshot

    deadline = time.monotonic() + timeout
    before: dict[str, int] = {}
    while time.monotonic() < deadline:
        run.sample()
        time.sleep(2)
        ends = {k: s.end for k, s in read_snapshot(str(run.spool)).items()}
        done = committed_offsets(run.folder / "checkpoint")
        if ends and ends == before and all(done.get(k, 0) >= end for k, end in ends.items()):
            return True
        before = ends
    print(f"  the spool did not drain within {timeout:.0f} s", flush=True)
    return False
