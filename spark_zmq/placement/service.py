"""Capture without a query: a capture service fills a spool, queries read it.

A scheduled job (``trigger(availableNow=True)``) runs for minutes and is gone for hours; a
capture tied to its query captures nothing in between. ``spark-zmq capture`` (``CaptureService``)
runs the very capture of ``capture=driver`` (``driver.DriverCapture``: discovery, CURVE, bounds,
spool) on its own, for as long as it runs, holding the spool's LOCK with role ``service``. A
query with ``capture=service`` (``ServiceSpool``) starts no discovery and no capture: it plans its
offsets from the partitions' indexes on disk (the service writes them atomically) and records
what Spark committed in the spool's ``commits.json``, which the service applies
(``DriverCapture.commit``). So the spool keeps everything no run committed, and successive runs
from one checkpoint deliver every message the service captured exactly once.

Invariants: only queries write ``commits.json`` (the service reads it); the service only lets go
of what a query committed. One query (one checkpoint) reads a service's spool: a second
query's commits would let go of what the first has not read.
"""

from __future__ import annotations

import os
import socket
from typing import Any, NamedTuple

from spark_zmq.log import logger
from spark_zmq.placement.base import Placement
from spark_zmq.placement.driver import DriverCapture
from spark_zmq.protocols.contract import StreamProtocol
from spark_zmq.spool.contract import commits_state
from spark_zmq.spool.epochs import SERVICE, folder_holder, holder_text
from spark_zmq.spool.index import PartitionState
from spark_zmq.spool.layout import SpoolError, load_indexes
from spark_zmq.spool.reader import SnapshotReader
from spark_zmq.spool.remote import ServedSpool, load_served
from spark_zmq.stream_settings import ReaderSettings


class ServiceSpool(Placement):
    """``capture=service``: the query reads a spool that a capture service fills (module doc)."""

    #: a new stream reads everything the service holds (committed data within spoolRetention)
    default_starting_offsets = "earliest"

    def __init__(
        self, protocol: StreamProtocol[Any], query: ReaderSettings[Any], spool_path: str
    ) -> None:
        super().__init__(protocol, query, spool_path)
        self._commits = commits_state(spool_path)
        self._warned = False
        #: the spool's indexes, read again at each snapshot only where they changed
        self._snapshots = SnapshotReader(spool_path)

    def start(self) -> None:
        if not os.path.isdir(self.spool_path):
            raise SpoolError(
                f"{self.protocol.name}: spool {self.spool_path} (option spoolPath) does not "
                f"exist on host {socket.gethostname()}, which runs this query's driver. With "
                f"capture=service the driver reads the spool that `spark-zmq capture --spool "
                f"{self.spool_path}` fills: start the service first, and run the query where "
                f"it sees that folder (the service's host, or storage shared with it); the "
                f"executors need not see it"
            )
        holder = folder_holder(self.spool_path)
        if holder is None or (holder.get("role") != SERVICE and holder.get("stopping")):
            self._warn_nothing_captures()  # (a query that captured into it is letting go)
        elif holder.get("role") != SERVICE:
            raise SpoolError(
                f"{self.protocol.name}: spool {self.spool_path} is captured by a running query "
                f"({holder_text(holder)}), not by a capture service: option capture=service "
                f"reads the spoolPath that `spark-zmq capture --spool` fills"
            )
        else:
            logger.info(
                "%s: reading spool %s, filled by a capture service (%s); this query "
                "captures nothing itself",
                self.protocol.name,
                self.spool_path,
                holder_text(holder),
            )
        self.ends_at_start = {k: s.end for k, s in self._snapshots.snapshot().items()}

    def _warn_nothing_captures(self) -> None:
        """Once per run: the query reads what the spool holds, and nothing adds to it."""
        if self._warned:
            return
        self._warned = True
        logger.warning(
            "%s: no capture service holds spool %s: this query reads what the spool holds, "
            "but nothing is capturing (capture=service). Start one: spark-zmq capture "
            "--format %s --spool %s",
            self.protocol.name,
            self.spool_path,
            self.protocol.name,
            self.spool_path,
        )

    def snapshot(self) -> dict[str, PartitionState]:
        if folder_holder(self.spool_path) is None:
            self._warn_nothing_captures()
        return self._snapshots.snapshot()

    def served(self) -> ServedSpool | None:
        """Where the capture service serves its spool (its ``served.json``), read anew for
        each micro-batch: a restarted service serves on another port, with another token."""
        return load_served(self.spool_path)

    def commit(self, end: dict[str, int]) -> None:
        """Record what Spark committed; the service lets it go (``CaptureService``)."""
        committed = self._commits.load() or {}
        committed.update(end)
        self._commits.save(committed)

    def close(self) -> None:
        """Nothing runs here: the service goes on capturing."""


class ServiceCapture(DriverCapture):
    """``DriverCapture`` run by a capture service: the same capture, with ``service`` in the
    spool's LOCK so that queries can tell it from another query's capture."""

    spool_role = SERVICE
    runs_where = "in this capture service"


class CaptureService:
    """Capture into a spool without a query; applies the commits of the query that reads it.

    ``poll`` (often: every second) applies new commits; ``progress`` (every progress line)
    also makes capture write what it received and checks discovery, raising its failure.
    """

    def __init__(
        self, protocol: StreamProtocol[Any], query: ReaderSettings[Any], spool_path: str
    ) -> None:
        self.protocol = protocol
        self.spool_path = spool_path
        self.capture = ServiceCapture(protocol, query, spool_path)
        self._commits = commits_state(spool_path)
        self._applied: dict[str, int] = {}
        self._last_ends: dict[str, int] = {}

    def start(self) -> None:
        self.capture.start()
        self._last_ends = dict(self.capture.ends_at_start)
        self.poll()

    def poll(self) -> None:
        """Apply what queries committed since the last call (each partition's end once)."""
        committed = self._commits.load() or {}
        new = {
            key: end
            for key, end in committed.items()
            if isinstance(end, int) and self._applied.get(key) != end
        }
        if new:
            self.capture.commit(new)
            self._applied.update(new)

    def progress(self) -> Progress:
        """Everything received is in the spool; what it holds, and what was captured since the
        previous call."""
        state = self.capture.snapshot()
        self.poll()
        ends = {key: s.end for key, s in state.items()}
        previous = self._last_ends
        captured = sum(end - previous.get(key, state[key].start) for key, end in ends.items())
        self._last_ends = ends
        return Progress(
            live=sum(1 for s in state.values() if not s.retired),
            retired=sum(1 for s in state.values() if s.retired),
            captured=max(0, captured),
            uncommitted=sum(
                max(0, s.end - max(s.start, self._applied.get(key, 0))) for key, s in state.items()
            ),
            spool_bytes=sum(i.nbytes for i in load_indexes(self.spool_path).values()),
        )

    def close(self) -> None:
        """Stop capturing; what was received is written and the spool let go of."""
        self.capture.close()


class Progress(NamedTuple):
    """What one progress line of a capture service says."""

    live: int  # partitions whose endpoints are connected
    retired: int  # partitions whose endpoints left, kept until read
    captured: int  # messages written since the previous line
    uncommitted: int  # messages the spool holds that no query has committed
    spool_bytes: int  # what the spool's segments take on disk
