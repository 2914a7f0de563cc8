"""``DriverCapture`` (option ``capture=driver``, the embedded default): discovery and every zmq
socket live in the driver-side reader process, which writes the spool itself.

A run that ended (stopped or crashed) leaves the partitions it captured open; the next run owes
each of them one gap row for the time nobody captured it, written when its endpoint is read
again (``spool.downtime``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from spark_zmq.capture.loop import Capture
from spark_zmq.errors import CaptureError, SparkZmqError
from spark_zmq.log import logger
from spark_zmq.monitoring.health import Health, ready
from spark_zmq.monitoring.metrics import CaptureView, view_of
from spark_zmq.monitoring.server import MonitoringServer, capture_server
from spark_zmq.placement.base import DISCOVERY, Placement
from spark_zmq.placement.guard import EndpointGuard, guarded
from spark_zmq.protocols.contract import Discovery
from spark_zmq.spool.downtime import Alive, Downtime, alive_record, down_since, load_alive
from spark_zmq.spool.epochs import QUERY
from spark_zmq.spool.identity import spool_identity
from spark_zmq.spool.index import Listing, PartitionState
from spark_zmq.spool.remote import ServedSpool
from spark_zmq.spool.writer import Spool

if TYPE_CHECKING:
    from spark_zmq.spool.serving import SpoolServer


class DriverCapture(Placement):
    """Discovery, capture and the spool's writer all in this (driver-side) process."""

    _spool: Spool | None = None
    _capture: Capture | None = None
    _discovery: Discovery | None = None
    _guard: EndpointGuard | None = None
    _server: SpoolServer | None = None
    _monitoring: MonitoringServer | None = None
    #: who writes the spool, in its LOCK (a capture service is a DriverCapture run by itself)
    spool_role: str = QUERY
    #: where capture runs, for the log line that says it started
    runs_where: str = "on the driver"

    def start(self) -> None:
        settings = self.query.capture
        self._spool = Spool(
            self.spool_path,
            settings.max_spool_bytes,
            role=self.spool_role,
            retention=settings.retention,
        )
        previous = load_alive(self.spool_path)  # before this run's capture replaces it
        left = _retire_leftovers(self._spool)
        downtime = Downtime(_owed(self._spool, left, previous), alive_record(self.spool_path))
        downtime.alive(time.time(), force=True)  # nothing captured yet: all of it is spooled
        if left:
            logger.info(
                "%s: %d partitions left open by an earlier run are retired until their "
                "endpoints join again: %s",
                self.protocol.name,
                len(left),
                ", ".join(sorted(left)),
            )
        # "latest" means after what the spool held before this run's capture started:
        # everything this run receives is delivered (taken later, it would skip messages
        # received between the first connection and the first offset call).
        self.ends_at_start = {k: s.end for k, s in self._spool.snapshot().items()}
        self._capture = Capture.of(self._spool, settings, self.protocol.name, downtime)
        self._capture.start()
        logger.info(
            "%s: capturing %s, spooling to %s", self.protocol.name, self.runs_where, self.spool_path
        )
        self._serve(self._spool)
        self._monitor()
        self._discovery = self.protocol.discovery(self.query.decoding, self._spool.state(DISCOVERY))
        self._guard = guarded(self._capture, self.protocol.name, self.query.source.max_endpoints)
        self._discovery.start(self._guard)

    def _serve(self, spool: Spool) -> None:
        """Serve the spool to read tasks on hosts that do not see its folder (option
        spoolServer; ``spool.serving``), each range with its segments as ``spool`` holds them."""
        address = self.query.source.spool_server
        if address is None:
            return
        from spark_zmq.spool.serving import SpoolServer  # (Flight: only where it serves)

        self._server = SpoolServer(
            self.spool_path, spool_identity(self.spool_path), address, spool.listing
        )
        self._server.start()
        if any(self.query.capture.curve) and self._server.served.certificate is None:
            logger.warning(
                "%s: capture receives over CURVE, but the spool server at %s hands what it "
                "received to read tasks on other hosts unencrypted (gRPC without TLS). Give "
                "it a certificate (options spoolServerCertificate, spoolServerKey), or put "
                "spoolPath on storage the executors share and set spoolServer=off",
                self.protocol.name,
                self._server.served.location,
            )

    def served(self) -> ServedSpool | None:
        return self._server.served if self._server is not None else None

    def _running(self) -> tuple[Spool, Capture, Discovery]:
        if self._spool is None or self._capture is None or self._discovery is None:
            raise CaptureError(f"{self.protocol.name}: capture on the driver is not running")
        return self._spool, self._capture, self._discovery

    def snapshot(self) -> dict[str, PartitionState]:
        spool, capture, discovery = self._running()
        capture.sync()
        discovery.check()
        return spool.snapshot()

    def listing(self, key: str, start: int, end: int) -> Listing | None:
        spool, _, _ = self._running()
        return spool.listing(key, start, end)

    def waive_downtime(self) -> set[str]:
        _, capture, _ = self._running()
        written = capture.waive_downtime()
        logger.info(
            "%s: a new query starts where this run's capture began: no gap row for the time "
            "an earlier run of it was not capturing%s",
            self.protocol.name,
            f" (skipping the {len(written)} already written)" if written else "",
        )
        return written

    def view(self) -> CaptureView:
        """What a scrape of the metrics reads (``monitoring.metrics``): without a flush or a
        wait for one."""
        spool, capture, _ = self._running()
        return view_of(capture, spool, self._guard.held() if self._guard is not None else (0, 0))

    def endpoints_read(self) -> int:
        """Endpoints capture reads now (connected or not)."""
        _, capture, _ = self._running()
        return len(capture.received())

    def liveness(self) -> Health:
        """Whether capture and discovery run (the liveness probe, ``monitoring.server``)."""
        try:
            _, capture, discovery = self._running()
            capture.check()
            discovery.check()
        except SparkZmqError as exc:
            return Health(False, str(exc))
        return Health(True, f"{self.protocol.name}: capture and discovery run")

    def readiness(self) -> Health:
        """Liveness, and the spool takes a write (the readiness probe)."""
        return ready(self.liveness(), self.spool_path)

    def _monitor(self) -> None:
        """Serve the metrics and probes where option ``metrics`` says (``monitoring``)."""
        where = self.query.capture.metrics
        if where is None:
            return
        try:
            self._monitoring = capture_server(
                self.protocol.name, where, self.view, self.liveness, self.readiness
            )
        except OSError as exc:
            raise CaptureError(
                f"{self.protocol.name}: cannot serve metrics on {where[0]}:{where[1]} (option "
                f"metrics): {exc}"
            ) from None
        self._monitoring.start()

    def commit(self, end: dict[str, int]) -> None:
        spool = self._running()[0]
        for key, offset in end.items():
            spool.truncate(key, offset)

    def close(self) -> None:
        """Capture first: its sockets stop receiving at once, while discovery (a Zyre node, a
        ZeroConf browser) can take seconds to stop; joins it reports meanwhile go nowhere."""
        if self._spool is not None:
            self._spool.stopping()  # a restart of this query waits for the spool, not fails
        if self._monitoring is not None:
            self._monitoring.close()
            self._monitoring = None
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._capture is not None:
            self._capture.close()
            self._capture = None
        if self._discovery is not None:
            self._discovery.close()
            self._discovery = None
            self._guard = None
        if self._spool is not None:
            self._spool.close()
            self._spool = None


def _retire_leftovers(spool: Spool) -> list[str]:
    """At the start of capture on the driver, the partitions an earlier run left open (it ended
    without retiring them) are retired, so that they are read to their end and then leave the
    offsets instead of counting as live endpoints. Nothing is deleted, and one whose endpoint
    joins again reopens. The keys retired."""
    left = sorted(key for key, state in spool.snapshot().items() if not state.retired)
    for key in left:
        spool.open_partition(key)  # held from now on, as every partition of this spool
        spool.retire(key)
    return left


def _owed(spool: Spool, left: list[str], previous: Alive | None) -> dict[str, float]:
    """The downtimes this run owes: since when each partition an earlier run left open was not
    captured (``spool.downtime``), and those the previous run owed and never wrote (its
    endpoint did not join again before it ended)."""
    carried = previous.pending if previous is not None else {}
    owed = {key: since for key, since in carried.items() if key in spool.partitions}
    for key in left:
        since = down_since(spool.inherited.get(key), previous)
        if since is not None:
            owed[key] = since
        else:
            owed.pop(key, None)
    return owed
