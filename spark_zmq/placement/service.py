"""Capture without a query: a capture service fills a spool, queries read it.

A scheduled job (``trigger(availableNow=True)``) runs for minutes and is gone for hours; a
capture tied to its query captures nothing in between. ``spark-zmq capture`` (``CaptureService``)
runs the very capture of ``capture=driver`` (``driver.DriverCapture``: discovery, CURVE, bounds,
spool) on its own, for as long as it runs, holding the spool's LOCK with role ``service``. A
query with ``capture=service`` (``ServiceSpool``) starts no discovery and no capture: it plans its
offsets from the partitions' indexes on disk (the service writes them atomically) and records
what Spark committed under its reader name (option ``spoolReader``, ``spool.readers``), which
the service applies: it lets go of what every reader name committed
(``DriverCapture.commit``). So the spool keeps everything some reader has not committed, and
successive runs under one name deliver every message the service captured exactly once, however
many other names read the same spool.

Invariants: only queries write their reader documents (the service reads them); the service
only lets go of what every reader that holds data committed; one running query per name.
"""

from __future__ import annotations

import dataclasses
import math
import os
import socket
import time
from typing import Any, NamedTuple

from spark_zmq.log import logger
from spark_zmq.monitoring.health import Health
from spark_zmq.monitoring.metrics import CaptureView
from spark_zmq.placement.base import Placement
from spark_zmq.placement.driver import DriverCapture
from spark_zmq.protocols.contract import StreamProtocol
from spark_zmq.spool.epochs import SERVICE, folder_holder, holder_text
from spark_zmq.spool.index import Listing, PartitionState
from spark_zmq.spool.layout import SpoolError, load_indexes
from spark_zmq.spool.reader import SnapshotReader
from spark_zmq.spool.readers import (
    ReaderCount,
    ReaderHandle,
    ReaderRecord,
    held_ends,
    read_ends,
)
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
        #: what this query committed under its reader name (opened at start)
        self._reader = ReaderHandle(spool_path, query.source.reader_name)
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
                "%s: reading spool %s, filled by a capture service (%s), as reader %r; "
                "this query captures nothing itself",
                self.protocol.name,
                self.spool_path,
                holder_text(holder),
                self._reader.name,
            )
        self._reader.open()
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

    def listing(self, key: str, start: int, end: int) -> Listing | None:
        return self._snapshots.listing(key, start, end)

    def snapshot(self) -> dict[str, PartitionState]:
        """The spool's partitions, each ``committed`` where this query's reader name committed
        it (other names' commits are theirs: a partition this name has not committed is
        read from its first retained offset)."""
        if folder_holder(self.spool_path) is None:
            self._warn_nothing_captures()
        self._reader.beat()
        own = self._reader.committed
        return {
            key: state._replace(committed=max(state.start, min(state.end, own.get(key, 0))))
            for key, state in self._snapshots.snapshot().items()
        }

    def served(self) -> ServedSpool | None:
        """Where the capture service serves its spool (its ``served.json``), read anew for
        each micro-batch: a restarted service serves on another port, with another token."""
        return load_served(self.spool_path)

    def commit(self, end: dict[str, int]) -> None:
        """Record what Spark committed under this query's reader name; the service lets go of
        it once every reader name committed it (``CaptureService``)."""
        self._reader.commit(end)

    def close(self) -> None:
        """The reader name is free again; the service goes on capturing."""
        self._reader.close()


class ServiceCapture(DriverCapture):
    """``DriverCapture`` run by a capture service: the same capture, with ``service`` in the
    spool's LOCK so that queries can tell it from another query's capture."""

    spool_role = SERVICE
    runs_where = "in this capture service"

    def read_by_some(self, ends: dict[str, int]) -> None:
        """Some reader name committed everything below ``ends`` (``Spool.read_by_some``)."""
        self._running()[0].read_by_some(ends)


class CaptureService:
    """Capture into a spool without a query; lets go of what its readers committed.

    ``poll`` (often: every second) applies new commits; ``progress`` (every progress line)
    also makes capture write what it received and checks discovery, raising its failure.
    """

    def __init__(
        self, protocol: StreamProtocol[Any], query: ReaderSettings[Any], spool_path: str
    ) -> None:
        self.protocol = protocol
        self.spool_path = spool_path
        self.capture = ServiceCapture(protocol, query, spool_path)
        timeout = query.capture.reader_timeout
        self._readers = ReaderCount(spool_path, math.inf if timeout is None else timeout)
        self._applied: dict[str, int] = {}
        self._read_ahead: dict[str, int] = {}
        self._last_ends: dict[str, int] = {}
        #: the reader names that held data at the last ``poll`` (for the metrics' thread)
        self._holding: dict[str, ReaderRecord] = {}
        #: when the readiness probe last saw an endpoint read (or first ran)
        self._endpoint_seen_at: float | None = None

    def start(self) -> None:
        self.capture.start()
        self._last_ends = dict(self.capture.ends_at_start)
        self.poll()

    def poll(self) -> dict[str, ReaderRecord]:
        """Apply what every reader that holds data committed since the last call (each
        partition's end once); those readers."""
        holding = self._readers.holding()
        keys = sorted({key for record in holding.values() for key in record.committed})
        new = {
            key: end
            for key, end in held_ends(holding, keys).items()
            if end > self._applied.get(key, 0)
        }
        if new:
            self.capture.commit(new)
            self._applied.update(new)
        ahead = read_ends(holding, keys)
        if ahead != self._read_ahead:
            self.capture.read_by_some(ahead)
            self._read_ahead = ahead
        self._holding = holding
        return holding

    def progress(self) -> Progress:
        """Everything received is in the spool; what it holds, and what was captured since the
        previous call."""
        state = self.capture.snapshot()
        holding = self.poll()
        ends = {key: s.end for key, s in state.items()}
        previous = self._last_ends
        captured = sum(end - previous.get(key, state[key].start) for key, end in ends.items())
        self._last_ends = ends
        lags = {name: record.lag(state) for name, record in holding.items()}
        slowest = max(lags, key=lambda name: (lags[name], name), default=None)
        return Progress(
            live=sum(1 for s in state.values() if not s.retired),
            retired=sum(1 for s in state.values() if s.retired),
            captured=max(0, captured),
            uncommitted=sum(
                max(0, s.end - max(s.start, self._applied.get(key, 0))) for key, s in state.items()
            ),
            spool_bytes=sum(i.nbytes for i in load_indexes(self.spool_path).values()),
            readers=len(holding),
            slowest=None if slowest is None else (slowest, lags[slowest]),
        )

    def view(self) -> CaptureView:
        """What a scrape of the service's metrics reads: the capture's, and how far behind
        each reader name that holds data is."""
        view = self.capture.view()
        lag = {name: r.lag(view.partitions) for name, r in self._holding.items()}
        return dataclasses.replace(view, reader_lag=lag)

    def readiness(self, endpoint_timeout: float | None) -> Health:
        """The readiness probe: capture's (``DriverCapture.readiness``), and (unless
        ``endpoint_timeout`` is None) some endpoint read within ``endpoint_timeout`` s."""
        ready = self.capture.readiness()
        if not ready.ok:
            return ready
        now = time.monotonic()
        reading = self.capture.endpoints_read()
        if reading or self._endpoint_seen_at is None:
            self._endpoint_seen_at = now
        silent = now - self._endpoint_seen_at
        if endpoint_timeout is not None and not reading and silent > endpoint_timeout:
            return Health(
                False,
                f"no endpoint read for {silent:.0f} s (over {endpoint_timeout:g} s): discovery "
                f"finds none",
            )
        return Health(True, f"capture runs, spool writable, {reading} endpoints read")

    def close(self) -> None:
        """Stop capturing; what was received is written and the spool let go of."""
        self.capture.close()


class Progress(NamedTuple):
    """What one progress line of a capture service says."""

    live: int  # partitions whose endpoints are connected
    retired: int  # partitions whose endpoints left, kept until read
    captured: int  # messages written since the previous line
    uncommitted: int  # messages the spool holds that some reader name has not committed
    spool_bytes: int  # what the spool's segments take on disk
    readers: int = 0  # reader names that hold data
    slowest: tuple[str, int] | None = None  # the reader name furthest behind, and by how much
