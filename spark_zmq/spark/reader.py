"""The one generic stream reader: Spark's calls on one side, a protocol object on the other.

Driver side (one long-lived process per query run): on the first offset call the reader starts
discovery and capture for the protocol where the option ``capture`` places them
(``spark_zmq.placement``), then plans offsets from what capture has written to the spool.
Executor side: ``read`` gets a ``ReadTask`` and the options, reads its ranges from the spool
(several endpoints' in one task: ``maxPartitions``), lets the protocol decode them and yields
Arrow record batches in the exact Spark schema; or it gets a ``Claim`` and makes sure a capture
process runs on its executor (``spark_zmq.placement.executors``).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from spark_zmq.log import configure_spark_worker_logging, logger
from spark_zmq.options import OptionError, Options
from spark_zmq.placement import make_placement
from spark_zmq.placement.base import Placement
from spark_zmq.placement.executors.claim import Claim, start_capture_here
from spark_zmq.placement.executors.holder import executor_id
from spark_zmq.protocols.contract import StreamProtocol
from spark_zmq.spark.offsets import (
    OffsetRange,
    PartitionOffsets,
    StreamOffset,
    admit,
    plan_tasks,
    ranges,
    resolve,
)
from spark_zmq.spark.rows import ReadTask, SpoolRange, read_rows
from spark_zmq.spool.contract import register_executor
from spark_zmq.spool.identity import other_spool_error, spool_identity
from spark_zmq.stream_options import METRICS, SPOOL_READER
from spark_zmq.stream_settings import ReaderSettings, SourceSettings


def default_spool_path(protocol: StreamProtocol[Any], settings: SourceSettings) -> str:
    """A folder that a restart of the same query (same format and options) finds again."""
    given = dict(settings.given)
    digest = hashlib.sha256(json.dumps([protocol.name, given]).encode()).hexdigest()[:16]
    user = os.environ.get("USER") or str(os.getuid())
    return os.path.join(tempfile.gettempdir(), f"spark_zmq-{user}", f"{protocol.name}-{digest}")


class ZmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Generic micro-batch reader over capture + spool, for any ``StreamProtocol``."""

    def __init__(self, protocol: StreamProtocol[Any], options: Options) -> None:
        query = ReaderSettings.of(options, protocol.read_settings(options))
        settings = query.source
        if settings.ending_offsets is not None:
            raise OptionError(
                f"{protocol.name}: option 'endingOffsets' applies to batch reads "
                f"(spark.read) only; a stream reads on as long as it runs"
            )
        if settings.placement == "service" and settings.spool_path is None:
            raise OptionError(
                f"{protocol.name}: option capture=service needs option spoolPath: the folder "
                f"that `spark-zmq capture --spool` fills"
            )
        if settings.placement != "service" and options.is_set(SPOOL_READER):
            raise OptionError(
                f"{protocol.name}: option spoolReader names a query reading a capture "
                f"service's spool (capture=service); with capture={settings.placement} the "
                f"query's spool is its own, and a second stream on it is refused"
            )
        if settings.placement == "service" and options.is_set(METRICS):
            raise OptionError(
                f"{protocol.name}: option metrics serves the metrics of the query's own "
                f"capture (capture=driver or executors); a capture service serves its own "
                f"(spark-zmq capture --metrics-port)"
            )
        self.protocol = protocol
        self.query = query
        self.settings = settings
        self.spool_path = settings.spool_path or default_spool_path(protocol, settings)
        # driver side only, created lazily (this object is also pickled to executors)
        self._placement: Placement | None = None
        self._available_now: PartitionOffsets | None = None
        #: minRecordsPerTrigger: when the last micro-batch was planned (monotonic seconds)
        self._last_trigger = time.monotonic()
        self._spool_id: str | None = None  # the spool's identity, once the placement started
        #: what the last ``latestOffset`` found available, for ``reportLatestOffset``, which
        #: Spark calls right after it in the same trigger (as Kafka's source keeps
        #: ``latestPartitionOffsets``): reading every partition's index once a trigger, not twice
        self._last_available: tuple[PartitionOffsets, PartitionOffsets, set[str]] | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(_placement=None, _last_available=None)
        return state

    # -- driver side ---------------------------------------------------------------------------

    def _started(self) -> Placement:
        if self._placement is None:
            configure_spark_worker_logging()
            if self.settings.spool_path is None:
                logger.warning(
                    "%s: option spoolPath is not set: spooling to %s, under the temporary "
                    "folder. A restart from the checkpoint is exactly-once only while that "
                    "folder lives (a reboot or a temp cleaner loses what was captured and not "
                    "yet committed); set spoolPath to durable storage, e.g. beside the "
                    "checkpoint",
                    self.protocol.name,
                    self.spool_path,
                )
            self._placement = make_placement(self.protocol, self.query, self.spool_path)
            _stop_on_sigterm()
            atexit.register(self.stop)
            self._placement.start()
        return self._placement

    def _spool(self) -> str:
        """The identity of the query's spool (``spool.identity``), which its offsets carry."""
        if self._spool_id is None:
            self._started()
            self._spool_id = spool_identity(self.spool_path)
        return self._spool_id

    def _offset(self, doc: dict) -> StreamOffset:
        """The offset ``doc``, checked to be taken in this query's spool (or before offsets
        named theirs): OtherSpool if not, whatever failOnDataLoss says, since another spool's
        offsets would skip this one's messages with no gap row, and commit them."""
        offset = StreamOffset.from_json(doc)
        current = self._spool()
        if offset.spool not in (None, current):
            raise other_spool_error(self.spool_path, str(offset.spool), current)
        return offset

    def _available(self) -> tuple[PartitionOffsets, PartitionOffsets, set[str]]:
        """(end, first uncommitted, retired) of every partition, with all captured so far.

        A partition that the offsets do not name (new, or one that left them) starts at its
        first uncommitted offset, not at the first retained one: what was committed stays in
        the spool for retention (batch reads, ``startingOffsets=earliest``), not to be read by
        this stream again."""
        state = self._started().snapshot()
        return (
            {k: s.end for k, s in state.items()},
            {k: s.first_uncommitted for k, s in state.items()},
            {k for k, s in state.items() if s.retired},
        )

    def initialOffset(self) -> dict:
        placement = self._started()
        spec = self.settings.starting_offsets or placement.default_starting_offsets
        if spec == "latest":
            return StreamOffset(self._latest(placement), spool=self._spool()).to_json()
        state = placement.snapshot()
        end = {k: s.end for k, s in state.items()}
        retained = {k: s.start for k, s in state.items()}  # earliest: all the spool keeps
        ends = resolve(spec, retained, end, "earliest", "startingOffsets")
        return StreamOffset(ends, spool=self._spool()).to_json()

    @staticmethod
    def _latest(placement: Placement) -> PartitionOffsets:
        """``latest`` for a new query: where this run's capture began (what it captured before
        Spark's first call is read, not skipped), past the gap rows of an earlier run's downtime,
        which came before this query."""
        waived = placement.waive_downtime()
        ends_at_start = placement.ends_at_start
        state = placement.snapshot()
        latest = {k: ends_at_start.get(k, s.start) for k, s in state.items()}
        for key in waived & latest.keys() & ends_at_start.keys():
            latest[key] = min(ends_at_start[key] + 1, state[key].end)
        return latest

    def latestOffset(self, start_json: dict, limit: ReadLimit) -> dict:
        offset = self._offset(start_json)
        start = offset.ends
        end, first, retired = self._last_available = self._available()
        if self._available_now is not None:
            end = {k: min(v, self._available_now.get(k, first.get(k, 0))) for k, v in end.items()}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = admit(start, end, first, max_rows)
        # A retired partition that the start offset puts at its end leaves the offsets: all
        # of it was read in a batch that completed, or skipped by the choice of the initial
        # offset (startingOffsets=latest over what an earlier run left). Its data is let go
        # now rather than at Spark's next commit, which comes only with the next batch that
        # has data: once left, a range would start at its first retained offset, which must
        # then be its end.
        leaving = {k: v for k, v in end.items() if k in retired and start.get(k, first.get(k)) == v}
        if leaving:
            self._started().commit(leaving)
            first.update(leaving)
        end = {k: v for k, v in end.items() if k not in leaving}
        claims_round = offset.claims_round
        if self._available_now is None:
            claims_round = self._started().next_claims_round(claims_round)
        if claims_round == offset.claims_round and self._too_few(start, end, first):
            return offset.to_json()  # the same offset: Spark plans no micro-batch
        self._last_trigger = time.monotonic()
        return StreamOffset(end, claims_round, self._spool()).to_json()

    def _too_few(
        self, start: PartitionOffsets, end: PartitionOffsets, first: PartitionOffsets
    ) -> bool:
        """minRecordsPerTrigger: fewer messages than that are waiting and the previous
        micro-batch was planned less than maxTriggerDelay ago (never under AvailableNow)."""
        wanted = self.settings.min_records_per_trigger
        if wanted is None or self._available_now is not None:
            return False
        waiting = sum(r.size for r in ranges(start, end, first))
        delay = self.settings.max_trigger_delay
        return waiting < wanted and time.monotonic() - self._last_trigger < delay

    def getDefaultReadLimit(self) -> ReadLimit:
        max_rows = self.settings.max_records_per_trigger
        return ReadMaxRows(max_rows) if max_rows else ReadAllAvailable()

    def reportLatestOffset(self) -> dict:
        """What capture has spooled, per partition, for the query's progress (the backlog, the
        endpoints of the progress lines): a retired partition that holds nothing more is gone,
        not an endpoint (an earlier run's, once read or skipped). What the trigger's
        ``latestOffset`` found, where it ran."""
        end, first, retired = self._last_available or self._available()
        return StreamOffset(
            {k: v for k, v in end.items() if not (k in retired and first.get(k) == v)}
        ).to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._available()[0]

    def partitions(self, start_json: dict, end_json: dict) -> list[InputPartition]:
        start, end = self._offset(start_json), self._offset(end_json)
        first = {}
        if any(k not in start.ends for k in end.ends):  # partitions new since ``start`` begin
            first = {k: s.first_uncommitted for k, s in self._started().snapshot().items()}
        placement = self._started()
        served = placement.served()
        planned: list[InputPartition] = [
            ReadTask(
                tuple(
                    SpoolRange(
                        self.spool_path,
                        r.key,
                        r.start,
                        r.end,
                        self._spool(),
                        served,
                        placement.listing(r.key, r.start, r.end),
                    )
                    for r in task
                )
            )
            for task in self._tasks(ranges(start.ends, end.ends, first))
        ]
        if end.claims_round is not None and end.claims_round != start.claims_round:
            planned += self._started().claims_of_round(end.claims_round)
        return planned

    def _tasks(self, planned: list[OffsetRange]) -> list[list[OffsetRange]]:
        """The ranges as read tasks (``plan_tasks``): cut into at least minPartitions, no cut
        below a partition's first retained offset; grouped into at most maxPartitions."""
        wanted = self.settings.min_partitions
        retained = {}
        if wanted is not None and len(planned) < wanted:
            retained = {k: s.start for k, s in self._started().snapshot().items()}
        return plan_tasks(planned, wanted, self.settings.read_tasks, retained)

    def commit(self, end: dict) -> None:
        if self._placement is not None:
            self._placement.commit(self._offset(end).ends)

    def stop(self) -> None:
        """Close sockets and write what was received; Spark may or may not call this."""
        if self._placement is not None:
            self._placement.close()
            self._placement = None

    # -- executor side -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Rows of a ``ReadTask``; for a ``Claim``, a capture process on this executor, and
        no rows."""
        configure_spark_worker_logging()
        if isinstance(partition, Claim):
            start_capture_here(partition)
            return
        if not isinstance(partition, ReadTask):
            raise TypeError(f"{self.protocol.name}: cannot read a {type(partition).__name__}")
        if self.settings.capture_on_executors:
            register_executor(partition.ranges[0].spool_path, executor_id())
        yield from read_rows(self.protocol, self.query.decoding, self.query.rows, partition)


_sigterm_installed = False


def _stop_on_sigterm() -> None:
    """Spark ends the driver-side reader process with SIGTERM and never calls stop(): turn the
    signal into SystemExit once, so ``finally``/atexit cleanup closes sockets and writes the
    spool. A second signal while that cleanup runs is ignored."""
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    fired: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if not fired:
            fired.append(signum)
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    _sigterm_installed = True
