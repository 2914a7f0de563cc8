"""What a read task hands Spark: one partition's offset range of a spool, decoded into rows of
the format's schema, with the delivery contract applied. Both readers use it (the stream's
micro-batches and a batch read of a spool).

The contract, row by row:

- A *malformed* message (the protocol could not decode it, or its decoder raised on it:
  ``decoding``) is handled per ``mode``: kept as a row with ``error`` set and its raw bytes in
  ``payload`` (PERMISSIVE), dropped, counted and logged (DROPMALFORMED), or it fails the query
  (FAILFAST). No message can fail a read task otherwise.
- A *gap* row says that messages were lost before they reached the spool (a connection zmq
  dropped, messages dropped at the spool's bound, a partition without a holder, a damaged
  segment). Its ``error`` starts with ``gap:`` and its ``payload`` is null. ``mode`` does not
  touch it: a gap row is always delivered, unless ``failOnDataLoss=true``, which fails the query
  at the first one with the partition, the offset and the gap's own text (what, when, why).
- No row's ``error`` is longer than ``decoding.MAX_ERROR_CHARS`` characters.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from spark_zmq.errors import RowError
from spark_zmq.extras import require
from spark_zmq.log import logger
from spark_zmq.protocols.contract import StreamProtocol
from spark_zmq.spark.decoding import DecodeFailures, bounded_errors, decode_isolating
from spark_zmq.spool.index import Source
from spark_zmq.spool.remote import ServedSpool, open_range
from spark_zmq.spool.segments import SegmentFiles
from spark_zmq.stream_settings import RowSettings

#: the format's reader settings
S = TypeVar("S")

#: rows per record batch handed to Spark (Arrow batches of ~64K rows are at the JVM's floor)
BATCH_ROWS = 65536
#: the most bytes of small spool slices a read task joins to decode at once (``_joined``):
#: enough to make a slice's fixed cost vanish, small beside a segment's bound
JOINED_BYTES = 8 << 20
#: how every gap row's ``error`` starts (a stable prefix: queries filter on it)
GAP_PREFIX = "gap:"

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


class DataLossError(RowError):
    """A gap row under ``failOnDataLoss=true``."""


def output_schema(protocol: StreamProtocol[Any]) -> pa.Schema:
    """The Arrow schema of the rows of a format: shared columns, then the protocol's."""
    return pa.schema(list(SHARED_COLUMNS) + list(protocol.columns))


@dataclass(frozen=True)
class SpoolRange(InputPartition):
    """One partition's offset range [start, end) of a spool; all a read task needs: the
    spool's folder and identity, and where it is served to hosts that do not see the folder
    (``spool.remote.open_range``)."""

    spool_path: str
    key: str
    start: int
    end: int
    spool_id: str | None = None  # None: read the folder's files, whatever spool they are
    served: ServedSpool | None = None


@dataclass(frozen=True)
class ReadTask(InputPartition):
    """One read task of several ranges (of one spool, each of its own partition or piece of
    one: ``offsets.plan_tasks``), read one after the other into the same record batches."""

    ranges: tuple[SpoolRange, ...]


def read_rows(
    protocol: StreamProtocol[S],
    decoding: S,
    settings: RowSettings,
    task: SpoolRange | ReadTask,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``task``'s ranges in the format's schema, in batches Spark takes well:
    decoded with the format's reader settings ``decoding``, shaped by ``settings``. Rows of
    a range keep their order; ranges come in the task's order."""
    require(
        protocol.name, f"format({protocol.name!r})"
    )  # an executor without the format's libraries fails, not decodes
    schema = output_schema(protocol)
    max_bytes = settings.max_bytes_per_batch
    pending: list[pa.RecordBatch] = []
    pending_rows = pending_bytes = 0
    files = SegmentFiles()  # the ranges of a task read the same flush files
    for part in task.ranges if isinstance(task, ReadTask) else (task,):
        for batch in _range_rows(protocol, decoding, settings, part, schema, files):
            pending.append(batch)
            pending_rows += batch.num_rows
            pending_bytes += batch.nbytes
            if pending_rows >= BATCH_ROWS or pending_bytes >= max_bytes:
                yield from _rebatch(pending, schema, max_bytes)
                pending, pending_rows, pending_bytes = [], 0, 0
    yield from _rebatch(pending, schema, max_bytes)


def _range_rows(
    protocol: StreamProtocol[S],
    decoding: S,
    settings: RowSettings,
    part: SpoolRange,
    schema: pa.Schema,
    files: SegmentFiles,
) -> Iterator[pa.RecordBatch]:
    """The non-empty batches of one range, decoded and with the delivery contract applied,
    as the spool's slices come; one log line per kind of trouble with them."""
    dropped = 0
    failures = DecodeFailures()
    try:
        slices = open_range(
            part.spool_path, part.key, part.start, part.end, part.spool_id, part.served, files
        )
        joined = min(settings.max_bytes_per_batch, JOINED_BYTES)
        for first, source, table in _joined(slices, joined):
            batch = _decode(protocol, decoding, part.key, first, source, table, schema, failures)
            batch, malformed = _apply_contract(protocol.name, part.key, batch, settings)
            dropped += malformed
            if batch.num_rows:
                yield batch
    finally:
        _log_task(protocol.name, part, settings, failures, dropped)


def _joined(
    slices: Iterable[tuple[int, Source, pa.Table]], max_bytes: int
) -> Iterator[tuple[int, Source, pa.Table]]:
    """``slices`` with those that go on from each other under one source joined, up to
    BATCH_ROWS rows or ``max_bytes`` (a joined slice is decoded at once, whole): decoding
    costs about a millisecond a slice whatever it holds, and a busy session's flushes leave a
    segment of one or two messages per endpoint."""
    pending: list[tuple[int, Source, pa.Table]] = []
    rows = nbytes = 0
    for first, source, table in slices:
        if pending and (
            source != pending[0][1]
            or first != pending[0][0] + rows
            or rows >= BATCH_ROWS
            or nbytes >= max_bytes
        ):
            yield pending[0][0], pending[0][1], pa.concat_tables([t for *_, t in pending])
            pending, rows, nbytes = [], 0, 0
        pending.append((first, source, table))
        rows += table.num_rows
        nbytes += table.nbytes
    if pending:
        yield pending[0][0], pending[0][1], pa.concat_tables([t for *_, t in pending])


def _log_task(
    name: str, part: SpoolRange, settings: RowSettings, failures: DecodeFailures, dropped: int
) -> None:
    """A read task's one line per thing that went wrong with its messages (not one per
    message): decoder failures, malformed messages dropped."""
    if failures.first is not None:
        offset, text = failures.first
        logger.warning(
            "%s: the decoder raised on %d messages of partition %s in offsets [%d, %d), "
            "which became malformed rows (mode=%s); the first, at offset %d: %s",
            name,
            failures.count,
            part.key,
            part.start,
            part.end,
            settings.mode,
            offset,
            text,
        )
    if dropped:
        logger.warning(
            "%s: dropped %d malformed messages of partition %s in offsets [%d, %d)",
            name,
            dropped,
            part.key,
            part.start,
            part.end,
        )


def _decode(
    protocol: StreamProtocol[S],
    decoding: S,
    key: str,
    first: int,
    source: Source,
    table: pa.Table,
    schema: pa.Schema,
    failures: DecodeFailures,
) -> pa.RecordBatch:
    """Rows of one spool slice in the output schema: gap rows carry the spool's fault text,
    other rows what the protocol decoded (``error`` set when malformed, or when the decoder
    raised on the message: ``decode_isolating``); no error text over MAX_ERROR_CHARS."""
    n = table.num_rows
    frames = table.column("frames").combine_chunks()
    fault = table.column("fault").combine_chunks()
    gaps = fault.is_valid().to_numpy(zero_copy_only=False)
    decoded, failed = decode_isolating(protocol, frames, source, decoding, gaps)
    for index, text in failed.items():
        failures.add(first + index, text)
    error = bounded_errors(pc.if_else(pc.is_null(fault), decoded.error, fault))
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
    if decoded.keep is not None:  # the protocol filters (events not asked for): gaps stay
        batch = batch.filter(pc.or_(decoded.keep, pc.is_valid(error)))
    return batch


def is_gap(error: pa.Array) -> pa.Array:
    """True where ``error`` is a gap row's text."""
    return pc.fill_null(pc.starts_with(error, GAP_PREFIX), False)


def _apply_contract(
    name: str, key: str, batch: pa.RecordBatch, settings: RowSettings
) -> tuple[pa.RecordBatch, int]:
    """``failOnDataLoss`` for gap rows, ``mode`` for malformed ones: the batch to deliver and
    the number of malformed rows it dropped."""
    error = batch.column("error")
    gaps = is_gap(error)
    if settings.fail_on_data_loss and pc.any(gaps).as_py():
        row = batch.filter(gaps).slice(0, 1).to_pylist()[0]
        raise DataLossError(
            f"{name}: data lost in partition {key} at offset {row['offset']} from "
            f"{row['endpoint']}: {row['error']} (failOnDataLoss=true; set it to false to get "
            f"each loss as a row whose error starts with '{GAP_PREFIX}')"
        )
    malformed = pc.and_(pc.is_valid(error), pc.invert(gaps))
    count = pc.sum(malformed).as_py() or 0
    if not count or settings.mode == "PERMISSIVE":
        return batch, 0
    if settings.mode == "FAILFAST":
        row = batch.filter(malformed).slice(0, 1).to_pylist()[0]
        raise MalformedMessageError(
            f"{name}: malformed message in partition {key} at offset "
            f"{row['offset']} from {row['endpoint']}: {row['error']} (mode=FAILFAST; use "
            f"mode=PERMISSIVE to keep such messages as rows, or DROPMALFORMED to skip them)"
        )
    return batch.filter(pc.invert(malformed)), count


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
