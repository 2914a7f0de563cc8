"""Peak resident memory of every process a test runs: this one, its descendants (Spark's JVM,
the Python workers and the streaming source's runner that the JVM starts) and capture
processes (detached from the workers that start them). Sampled from /proc in a thread."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from spark_zmq.testing.processes import rss_bytes
from support.holders import holders_here

MIB = 1 << 20


def _parents() -> dict[int, int]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    found[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return found


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _kind(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return "gone"
    command = os.path.basename(words[0]).decode(errors="replace") if words[0] else "?"
    if command == "java":
        return "jvm"
    if b"spark_zmq.placement.executors.holder" in words:
        return "capture"
    return "python" if command.startswith("python") else command


@dataclass
class PeakMemory:
    """Per process kind (``jvm``, ``python``, ``capture``, ...) while running: the peak RSS
    (``peaks``), and the most any one process grew (``growth``): its peak less its RSS when
    first sampled, for a process that was there at the start (the session's JVM and Python
    workers live across tests, and keep what earlier tests made them take), or its peak, for
    one started meanwhile."""

    interval: float = 0.2
    peaks: dict[str, int] = field(default_factory=dict)
    growth: dict[str, int] = field(default_factory=dict)
    _baseline: dict[int, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> PeakMemory:
        self.sample(starting=True)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self, starting: bool = False) -> None:
        for pid in _descendants(os.getpid()) | set(holders_here()):
            kind, rss = _kind(pid), rss_bytes(pid)
            baseline = self._baseline.setdefault(pid, rss if starting else 0)
            self.peaks[kind] = max(self.peaks.get(kind, 0), rss)
            self.growth[kind] = max(self.growth.get(kind, 0), rss - baseline)

    def shown(self) -> str:
        return ", ".join(
            f"{k} {v / MIB:.0f} MiB (grew {self.growth[k] / MIB:.0f})"
            for k, v in sorted(self.peaks.items())
        )

    def check(self, bounds: dict[str, int]) -> None:
        """No process grew by its kind's bound in bytes (kinds not named: ``python``'s)."""
        for kind, grown in self.growth.items():
            bound = bounds.get(kind, bounds["python"])
            assert grown < bound, (
                f"a {kind} process grew by {grown / MIB:.0f} MiB (bound {bound / MIB:.0f})"
            )


#: how much any process may grow while a hostile peer's test runs (measured on quiet runs of
#: those tests: the JVM by up to 300 MiB, a Python process by at most 160 MiB; a decompression
#: bomb took a Python worker to 656 MiB and the JVM, whose heap is 1 GiB, out of heap)
HOSTILE_BOUNDS = {"jvm": 1024 * MIB, "python": 512 * MIB}
