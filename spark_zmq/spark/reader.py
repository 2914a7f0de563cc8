"""The one generic stream reader: Spark's calls on one side, a protocol object on the other.

Driver side (one long-lived process per query run): on the first offset call the reader starts
discovery and capture for the protocol where the option ``capture`` places them
(``spark_zmq.planning``), then plans offsets from what capture has written to the spool.
Executor side: ``read`` gets a ``SpoolRange`` and the options, reads that range from the spool,
lets the protocol decode it and yields Arrow record batches in the exact Spark schema; or it
gets a ``Claim`` and makes sure a capture process holds that partition
(``spark_zmq.capture.holder``).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from spark_zmq.capture.assignment import Claim
from spark_zmq.capture.holder import executor_id, register_executor, take_partition
from spark_zmq.errors import RowError
from spark_zmq.log import logger
from spark_zmq.options import Options
from spark_zmq.planning import make_placement
from spark_zmq.planning.placement import Placement
from spark_zmq.protocols.base import StreamProtocol
from spark_zmq.spark.offsets import PartitionOffsets, StreamOffset, admit, ranges
from spark_zmq.spool.reader import read_range

#: rows per record batch handed to Spark (Arrow batches of ~64K rows are at the JVM's floor)
BATCH_ROWS = 65536

SHARED_COLUMNS = pa.schema(
    [
        pa.field("partition", pa.string()),
        pa.field("offset", pa.int64()),
        pa.field("received_at", pa.timestamp("us", tz="UTC")),
        pa.field("endpoint", pa.string()),
        pa.field("payload", pa.binary()),
        pa.field("error", pa.string()),
    ]
)


class MalformedMessageError(RowError):
    """A malformed message under ``mode=FAILFAST``."""


def output_schema(protocol: StreamProtocol) -> pa.Schema:
    """The Arrow schema of the rows of a format: shared columns, then the protocol's."""
    return pa.schema(list(SHARED_COLUMNS) + list(protocol.columns))


def default_spool_path(protocol: StreamProtocol, options: Options) -> str:
    """A folder that a restart of the same query (same format and options) finds again."""
    given = {name: str(options[name]) for name in sorted(options.given) if name != "spoolPath"}
    digest = hashlib.sha256(json.dumps([protocol.name, given]).encode()).hexdigest()[:16]
    user = os.environ.get("USER") or str(os.getuid())
    return os.path.join(tempfile.gettempdir(), f"spark_zmq-{user}", f"{protocol.name}-{digest}")


@dataclass(frozen=True)
class SpoolRange(InputPartition):
    """One partition's offset range of one micro-batch; all an executor needs to read it."""

    spool_path: str
    key: str
    start: int
    end: int


class ZmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Generic micro-batch reader over capture + spool, for any ``StreamProtocol``."""

    def __init__(self, protocol: StreamProtocol, options: Options) -> None:
        self.protocol = protocol
        self.options = options
        self.spool_path = options["spoolPath"] or default_spool_path(protocol, options)
        # driver side only, created lazily (this object is also pickled to executors)
        self._placement: Placement | None = None
        self._available_now: PartitionOffsets | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(_placement=None)
        return state

    # -- driver side ---------------------------------------------------------------------------

    def _started(self) -> Placement:
        if self._placement is None:
            self._placement = make_placement(self.protocol, self.options, self.spool_path)
            _stop_on_sigterm()
            atexit.register(self.stop)
            self._placement.start()
        return self._placement

    def _available(self) -> tuple[PartitionOffsets, PartitionOffsets, set[str]]:
        """(end, first available, retired) of every partition, with all captured so far."""
        state = self._started().snapshot()
        return (
            {k: s.end for k, s in state.items()},
            {k: s.start for k, s in state.items()},
            {k for k, s in state.items() if s.retired},
        )

    def initialOffset(self) -> dict:
        first = self._available()[1]
        if self.options["startingOffsets"] == "earliest":
            return StreamOffset(first).to_json()
        ends_at_start = self._started().ends_at_start
        return StreamOffset({k: ends_at_start.get(k, v) for k, v in first.items()}).to_json()

    def latestOffset(self, start_json: dict, limit: ReadLimit) -> dict:
        offset = StreamOffset.from_json(start_json)
        start = offset.ends
        end, first, retired = self._available()
        if self._available_now is not None:
            end = {k: min(v, self._available_now.get(k, first.get(k, 0))) for k, v in end.items()}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = admit(start, end, first, max_rows)
        # A retired partition that has been read to its end leaves the offsets, and stays out:
        # once left, its range would start at its first retained offset, which is its end.
        end = {
            k: v for k, v in end.items() if not (k in retired and start.get(k, first.get(k)) == v)
        }
        claims_round = offset.claims_round
        if self._available_now is None:
            claims_round = self._started().next_claims_round(claims_round)
        return StreamOffset(end, claims_round).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        max_rows = self.options["maxRecordsPerTrigger"]
        return ReadMaxRows(max_rows) if max_rows else ReadAllAvailable()

    def reportLatestOffset(self) -> dict:
        return StreamOffset(self._available()[0]).to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._available()[0]

    def partitions(self, start_json: dict, end_json: dict) -> list[InputPartition]:
        start, end = StreamOffset.from_json(start_json), StreamOffset.from_json(end_json)
        first = {}
        if any(k not in start.ends for k in end.ends):  # partitions new since ``start`` begin
            first = {k: s.start for k, s in self._started().snapshot().items()}
        planned: list[InputPartition] = [
            SpoolRange(self.spool_path, r.key, r.start, r.end)
            for r in ranges(start.ends, end.ends, first)
        ]
        if end.claims_round is not None and end.claims_round != start.claims_round:
            planned += self._started().claims_of_round(end.claims_round)
        return planned

    def commit(self, end: dict) -> None:
        if self._placement is not None:
            self._placement.commit(StreamOffset.from_json(end).ends)

    def stop(self) -> None:
        """Close sockets and write what was received; Spark may or may not call this."""
        if self._placement is not None:
            self._placement.close()
            self._placement = None

    # -- executor side -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Rows of a ``SpoolRange``; for a ``Claim``, a holder of its partition, and no rows."""
        if isinstance(partition, Claim):
            take_partition(partition)
            return
        if not isinstance(partition, SpoolRange):
            raise TypeError(f"{self.protocol.name}: cannot read a {type(partition).__name__}")
        if self.options["capture"] == "executors":
            register_executor(partition.spool_path, executor_id())
        schema = output_schema(self.protocol)
        max_bytes = self.options["maxBytesPerBatch"]
        pending: list[pa.RecordBatch] = []
        pending_rows = pending_bytes = 0
        dropped = 0
        for first, source, table in read_range(
            partition.spool_path, partition.key, partition.start, partition.end
        ):
            batch, malformed = self._decode(partition.key, first, source, table, schema)
            dropped += malformed
            if batch.num_rows:
                pending.append(batch)
                pending_rows += batch.num_rows
                pending_bytes += batch.nbytes
            if pending_rows >= BATCH_ROWS or pending_bytes >= max_bytes:
                yield from _rebatch(pending, schema, max_bytes)
                pending, pending_rows, pending_bytes = [], 0, 0
        yield from _rebatch(pending, schema, max_bytes)
        if dropped:
            logger.warning(
                "%s: dropped %d malformed messages of partition %s in offsets [%d, %d)",
                self.protocol.name,
                dropped,
                partition.key,
                partition.start,
                partition.end,
            )

    def _decode(
        self, key: str, first: int, source, table: pa.Table, schema: pa.Schema
    ) -> tuple[pa.RecordBatch, int]:
        """Rows of one spool slice in the output schema, with ``mode`` applied."""
        n = table.num_rows
        frames = table.column("frames").combine_chunks()
        decoded = self.protocol.decode(frames, source, self.options)
        fault = table.column("fault").combine_chunks()
        error = pc.if_else(pc.is_null(fault), decoded.error, fault)
        columns = {
            "partition": pa.repeat(pa.scalar(key, pa.string()), n),
            "offset": pa.array(np.arange(first, first + n, dtype=np.int64)),
            "received_at": table.column("received_at").combine_chunks(),
            "endpoint": pa.repeat(pa.scalar(source.endpoint, pa.string()), n),
            "payload": pc.if_else(pc.is_null(fault), decoded.payload, pa.nulls(n, pa.binary())),
            "error": error,
            **decoded.columns,
        }
        batch = pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)
        if decoded.keep is not None:
            batch = batch.filter(pc.or_(decoded.keep, pc.is_valid(error)))
        malformed = pc.is_valid(batch.column("error"))
        count = pc.sum(malformed).as_py() or 0
        if not count:
            return batch, 0
        mode = self.options["mode"]
        if mode == "FAILFAST":
            row = batch.filter(malformed).slice(0, 1).to_pylist()[0]
            raise MalformedMessageError(
                f"{self.protocol.name}: malformed message in partition {key} at offset "
                f"{row['offset']} from {row['endpoint']}: {row['error']} (mode=FAILFAST; use "
                f"mode=PERMISSIVE to keep such messages as rows, or DROPMALFORMED to skip them)"
            )
        if mode == "DROPMALFORMED":
            return batch.filter(pc.invert(malformed)), count
        return batch, 0


def _rebatch(
    batches: list[pa.RecordBatch], schema: pa.Schema, max_bytes: int
) -> Iterator[pa.RecordBatch]:
    """Few, large batches out of many small ones: at most BATCH_ROWS rows and ``max_bytes``
    bytes each (a single larger row alone), so that no batch strains the Python worker or the
    JVM's direct memory that Spark reads it into."""
    if not batches:
        return
    table = pa.Table.from_batches(batches, schema=schema).combine_chunks()
    for batch in table.to_batches(max_chunksize=BATCH_ROWS):
        yield from _within_bytes(batch, max_bytes)


def _within_bytes(batch: pa.RecordBatch, max_bytes: int) -> Iterator[pa.RecordBatch]:
    """``batch`` cut into slices of at most ``max_bytes`` (zero-copy), halving the rows of a
    slice that is still over."""
    if batch.nbytes <= max_bytes or batch.num_rows <= 1:
        yield batch
        return
    rows = max(1, min(batch.num_rows // 2, batch.num_rows * max_bytes // batch.nbytes))
    for start in range(0, batch.num_rows, rows):
        yield from _within_bytes(batch.slice(start, rows), max_bytes)


_sigterm_installed = False


def _stop_on_sigterm() -> None:
    """Spark ends the driver-side reader process with SIGTERM and never calls stop(): turn the
    signal into SystemExit once, so ``finally``/atexit cleanup closes sockets and writes the
    spool. A second signal while that cleanup runs is ignored."""
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    fired: list[int] = []

    def handler(signum, frame):
        if not fired:
            fired.append(signum)
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    _sigterm_installed = True
