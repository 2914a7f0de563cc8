"""At most ``SLOTS`` tests that start JVMs of their own run at once, across the suite's workers.

Such a test (marked ``jvms``: a spark-submit job, the Spark of a notebook or of a docs example,
a standalone cluster, a Spark Connect server) starts one to six JVMs beside its worker's
session, and each JVM's start costs about 10 CPU-seconds (tests/spark-conf). The suite starts
its longest units first (``scheduling``), and those are such tests: with four of them starting
at once on 2 cores, a job read nothing within 60 s of its query's start and a streaming
source's Python runner missed the 10 s that Spark gives it to connect back (stop 44's CI). A
worker whose next test is marked waits here for a slot; the wait is not part of the test's
duration.

A slot is a file locked with ``flock`` in a folder the workers share (the run's base temporary
folder), so the slot of a worker that dies is free again at once.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import IO

#: tests marked ``jvms`` that run at once
SLOTS = 2
#: seconds between two looks for a free slot
POLL_SECONDS = 0.5


class JvmSlots:
    """The slots of one test run, in ``folder`` (shared by its workers)."""

    def __init__(self, folder: Path, slots: int = SLOTS) -> None:
        self.paths = [folder / f"jvm-slot-{n}" for n in range(slots)]
        self._held: IO[bytes] | None = None

    def acquire(self) -> float:
        """Wait for a free slot and take it; the seconds waited."""
        assert self._held is None, "a worker holds one slot at a time"
        began = time.monotonic()
        while True:
            for path in self.paths:
                slot = open(path, "ab")  # held until release
                try:
                    fcntl.flock(slot, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    slot.close()
                    continue
                self._held = slot
                return time.monotonic() - began
            time.sleep(POLL_SECONDS)

    def release(self) -> None:
        if self._held is not None:
            self._held.close()  # closing the file lets go of its lock
            self._held = None


def shared_folder(basetemp: Path) -> Path:
    """The folder every worker of this run sees: under pytest-xdist, the parent of the worker's
    own base temporary folder (``.../pytest-N/popen-gwK``), else the base temporary folder."""
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp
