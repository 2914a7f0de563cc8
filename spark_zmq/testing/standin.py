"""What the driver of ``capture=executors`` does for its capture processes, without Spark: for
tests and benchmarks of the capture processes themselves (takeovers, spreading, what they
write).

``StandInDriver`` writes and renews the assignment (``assignment.json``), records commits
(``commits.json``) and starts capture processes as claim tasks and the driver do
(``placement.executors.launch``); ``NumberedPublishers`` are zmq PUB sockets on loopback that
send 0, 1, 2, ... each; ``numbers_in_spool`` reads back what a partition holds.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterable

import zmq

from spark_zmq.placement.executors.launch import launch
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.spool.contract import assignment_state, commits_state
from spark_zmq.spool.processes import EXECUTOR, ProcessRecord, host_identity, load_records
from spark_zmq.spool.reader import read_range
from spark_zmq.stream_settings import CaptureSettings

#: seconds between renewals of the assignment (as the driver's)
RENEW_SECONDS = 0.5


class StandInDriver:
    """The assignment, the commits and the capture processes of one spool."""

    def __init__(
        self, spool: str, settings: CaptureSettings, driver_host: str | None = None
    ) -> None:
        """``driver_host``: the host identity the assignment names as the driver's (this
        host's if not given: host-local endpoints are then this host's to capture)."""
        self.spool = spool
        self.settings = settings
        self.driver_host = driver_host or host_identity()
        self.pids: list[int] = []
        os.makedirs(spool, exist_ok=True)
        self._assignment = assignment_state(spool)
        self._commits = commits_state(spool)
        self._endpoints: dict[str, Endpoint] = {}
        self._spool_id = uuid.uuid4().hex
        self._beats = itertools.count(1)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renew()
        self._renewer = threading.Thread(target=self._renew_forever, daemon=True)
        self._renewer.start()

    def assign(self, endpoints: Iterable[Endpoint]) -> None:
        """The live endpoints are ``endpoints`` from now on."""
        with self._lock:
            self._endpoints = {e.key: e for e in endpoints}
        self._renew()

    def commit(self, ends: dict[str, int]) -> None:
        """Spark committed everything below ``ends`` (partition -> offset)."""
        committed = self._commits.load() or {}
        self._commits.save({**committed, **ends})

    def start_process(self, role: str = EXECUTOR) -> int:
        """Start a capture process (as a claim task would on an executor of its own: this
        machine has no JVM for it to serve); its pid."""
        pid = launch(self.spool, self.settings, role, f"standin/{len(self.pids)}")
        if pid is None:
            raise RuntimeError("the capture process did not start")
        self.pids.append(pid)
        return pid

    def records(self) -> dict[int, ProcessRecord]:
        """The records of the processes this stand-in started, by pid."""
        found = {int(r.process.rsplit("/", 1)[1]): r for r in load_records(self.spool).values()}
        return {pid: found[pid] for pid in self.pids if pid in found}

    def held_by(self) -> dict[str, int]:
        """Partition -> the pid of the live (not gone) process whose record lists it, at the
        highest epoch where several do."""
        found: dict[str, tuple[int, int]] = {}
        for pid, record in self.records().items():
            for key, epoch in record.partitions.items():
                if not record.gone and (key not in found or epoch > found[key][1]):
                    found[key] = (pid, epoch)
        return {key: pid for key, (pid, _) in found.items()}

    def close(self, timeout: float = 20.0) -> None:
        """Stop renewing; end every capture process started (SIGTERM, SIGCONT for one that is
        stopped, then SIGKILL after ``timeout``)."""
        self._stop.set()
        for pid in self.pids:
            for signum in (signal.SIGTERM, signal.SIGCONT):
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        for pid in self.pids:
            while _running(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _running(pid):
                os.kill(pid, signal.SIGKILL)

    def _renew(self) -> None:
        with self._lock:
            self._assignment.save(
                {
                    "spool_id": self._spool_id,
                    "beat": next(self._beats),
                    "format": self.settings.format_name,
                    "driver_host": self.driver_host,
                    "endpoints": {k: e.to_json() for k, e in sorted(self._endpoints.items())},
                }
            )

    def _renew_forever(self) -> None:
        while not self._stop.wait(RENEW_SECONDS):
            self._renew()


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not waited for, does not)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class NumberedPublishers:
    """``count`` zmq PUB sockets on loopback, each sending 0, 1, 2, ... at ``rate`` messages
    per second once ``start`` is called."""

    def __init__(self, count: int, rate: float) -> None:
        self.rate = rate
        self._context = zmq.Context()
        self._sockets = []
        for _ in range(count):
            socket = self._context.socket(zmq.PUB)
            socket.setsockopt(zmq.LINGER, 0)
            socket.bind("tcp://127.0.0.1:*")
            self._sockets.append(socket)
        self.endpoints = [
            Endpoint(address.removeprefix("tcp://"), address)
            for address in (s.getsockopt_string(zmq.LAST_ENDPOINT) for s in self._sockets)
        ]
        self.sent = {e.key: 0 for e in self.endpoints}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0 / self.rate):
            for endpoint, socket in zip(self.endpoints, self._sockets):
                socket.send(b"%d" % self.sent[endpoint.key])
                self.sent[endpoint.key] += 1

    def stop(self) -> dict[str, int]:
        """Stop sending; how many each sent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return dict(self.sent)

    def close(self) -> None:
        self.stop()
        for socket in self._sockets:
            socket.close(0)
        self._context.term()


def numbers_in_spool(spool: str, key: str, end: int) -> list[int | str]:
    """What partition ``key`` holds below offset ``end``, in offset order: each message's
    number, or the text of a gap row."""
    found: list[int | str] = []
    for _, _, table in read_range(spool, key, 0, end):
        for frames, fault in zip(table.column("frames").to_pylist(), table["fault"].to_pylist()):
            found.append(fault if fault else int(frames[0]))
    return found
