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

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from spark_zmq.errors import RowError
from spark_zmq.extras import require
from spark_zmq.log import logger
from spark_zmq.protocols.contract import StreamProtocol
from spark_zmq.spark.decoding import (
    DecodeFailures,
    bounded_errors,
    decode_runs_isolating,
)
from spark_zmq.spool.index import Listing, Source
from spark_zmq.spool.remote import ServedSpool, open_range, sees_spool
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
    #: its segments as the planner saw them (None: the task loads the partition's index)
    listing: Listing | None = None


@dataclass(frozen=True)
class ReadTask(InputPartition):
    """One read task of several ranges (of one spool, each of its own partition or piece of
    one: ``offsets.plan_tasks``), read one after the other into the same record batches."""

    ranges: tuple[SpoolRange, ...]


class _Run(NamedTuple):
    """Consecutive rows of one partition from one source: what a read task decodes together
    with the runs of other partitions (``decode_runs``), adding the shared columns and applying
    the contract once."""

    part: int  # the range of the task it belongs to
    key: str
    first: int  # the offset of its first row
    source: Source
    table: pa.Table  # its spool rows


def read_rows(
    protocol: StreamProtocol[S],
    decoding: S,
    settings: RowSettings,
    task: SpoolRange | ReadTask,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``task``'s ranges in the format's schema, in batches Spark takes well:
    decoded with the format's reader settings ``decoding``, shaped by ``settings``. Rows of
    a range keep their order; ranges come in the task's order.

    The protocol decodes each source's run of rows on its own (its columns depend on the
    source); the shared columns and the contract are applied to the runs of many partitions
    at once, up to ``JOINED_BYTES``: a task of hundreds of quiet endpoints pays them once per
    batch, not once per endpoint."""
    require(
        protocol.name, f"format({protocol.name!r})"
    )  # an executor without the format's libraries fails, not decodes
    parts = task.ranges if isinstance(task, ReadTask) else (task,)
    schema = output_schema(protocol)
    max_bytes = settings.max_bytes_per_batch
    joined = min(max_bytes, JOINED_BYTES)
    dropped = np.zeros(len(parts), np.int64)
    failures = [DecodeFailures() for _ in parts]
    pending: list[pa.RecordBatch] = []
    pending_rows = pending_bytes = 0
    runs: list[_Run] = []
    runs_rows = runs_bytes = 0
    try:
        for run in _runs(parts, joined):
            runs.append(run)
            runs_rows += run.table.num_rows
            runs_bytes += run.table.nbytes
            if runs_rows < BATCH_ROWS and runs_bytes < joined:
                continue
            batch = _delivered(protocol, decoding, runs, schema, settings, dropped, failures)
            runs, runs_rows, runs_bytes = [], 0, 0
            pending.append(batch)
            pending_rows += batch.num_rows
            pending_bytes += batch.nbytes
            if pending_rows >= BATCH_ROWS or pending_bytes >= max_bytes:
                yield from _rebatch(pending, schema, max_bytes)
                pending, pending_rows, pending_bytes = [], 0, 0
        if runs:
            pending.append(
                _delivered(protocol, decoding, runs, schema, settings, dropped, failures)
            )
        yield from _rebatch(pending, schema, max_bytes)
    finally:
        for part, count, failed in zip(parts, dropped.tolist(), failures, strict=True):
            _log_failures(protocol.name, part, settings, failed)
            _log_dropped(protocol.name, part, count)


def _runs(parts: Sequence[SpoolRange], joined: int) -> Iterator[_Run]:
    """The runs of ``parts``, in order, as the spool's slices come (joined up to ``joined``
    bytes: ``_joined``)."""
    files = SegmentFiles()  # the ranges of a task read the same flush files
    seen: dict[tuple[str, str], bool] = {}  # (folder, identity): this host sees that spool
    for index, part in enumerate(parts):
        spool_id = part.spool_id
        if spool_id is not None:
            where = (part.spool_path, spool_id)
            if seen.setdefault(where, sees_spool(*where)):
                spool_id = None  # checked once for the task's ranges
        slices = open_range(
            part.spool_path,
            part.key,
            part.start,
            part.end,
            spool_id,
            part.served,
            files,
            part.listing,
        )
        for first, source, table in _joined(slices, joined):
            yield _Run(index, part.key, first, source, table)


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
            yield _concatenated(pending)
            pending, rows, nbytes = [], 0, 0
        pending.append((first, source, table))
        rows += table.num_rows
        nbytes += table.nbytes
    if pending:
        yield _concatenated(pending)


def _concatenated(slices: list[tuple[int, Source, pa.Table]]) -> tuple[int, Source, pa.Table]:
    """Slices that go on from each other under one source, as one."""
    first, source, table = slices[0]
    if len(slices) > 1:
        table = pa.concat_tables([t for *_, t in slices])
    return first, source, table


def _log_failures(
    name: str, part: SpoolRange, settings: RowSettings, failures: DecodeFailures
) -> None:
    """A range's one line for the messages that made the decoder raise (not one per message)."""
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


def _log_dropped(name: str, part: SpoolRange, dropped: int) -> None:
    """A range's one line for the malformed messages it dropped (mode=DROPMALFORMED)."""
    if dropped:
        logger.warning(
            "%s: dropped %d malformed messages of partition %s in offsets [%d, %d)",
            name,
            dropped,
            part.key,
            part.start,
            part.end,
        )


def _delivered(
    protocol: StreamProtocol[S],
    decoding: S,
    runs: list[_Run],
    schema: pa.Schema,
    settings: RowSettings,
    dropped: np.ndarray,
    failures: list[DecodeFailures],
) -> pa.RecordBatch:
    """The rows of ``runs`` to deliver (``_decode``, then ``_apply_contract``); the messages
    that made the decoder raise and the malformed rows dropped are counted by range, in
    ``failures`` and ``dropped``."""
    batch, ranges = _decode(protocol, decoding, runs, schema, failures)
    batch, malformed = _apply_contract(protocol.name, batch, settings)
    if malformed is not None:
        np.add.at(dropped, ranges[malformed], 1)
    return batch


def _decode(
    protocol: StreamProtocol[S],
    decoding: S,
    runs: list[_Run],
    schema: pa.Schema,
    failures: list[DecodeFailures],
) -> tuple[pa.RecordBatch, np.ndarray]:
    """Rows of ``runs`` in the output schema, and the range of each row: gap rows carry the
    spool's fault text, other rows what the protocol decoded (``error`` set when malformed,
    or when the decoder raised on the message: ``decode_runs_isolating``); no error text over
    MAX_ERROR_CHARS. Rows the protocol does not keep (``Decoded.keep``) are left out; gap
    rows always stay."""
    counts = np.array([run.table.num_rows for run in runs], np.int64)
    n = int(counts.sum())
    which = np.repeat(np.arange(len(runs)), counts)  # each row's run
    starts = np.cumsum(counts) - counts
    firsts = np.array([run.first for run in runs], np.int64)
    offsets = np.arange(n, dtype=np.int64) - starts[which] + firsts[which]
    frames = pa.chunked_array([run.table.column("frames") for run in runs]).combine_chunks()
    fault = pa.chunked_array([run.table.column("fault") for run in runs]).combine_chunks()
    gaps = fault.is_valid().to_numpy(zero_copy_only=False)
    decoded, failed = decode_runs_isolating(
        protocol, frames, [(run.source, run.table.num_rows) for run in runs], decoding, gaps
    )
    for row, text in failed.items():
        failures[runs[which[row]].part].add(int(offsets[row]), text)
    error = bounded_errors(pc.if_else(pc.is_null(fault), decoded.error, fault))
    columns = {
        "partition": _per_run([run.key for run in runs], which),
        "offset": pa.array(offsets),
        "received_at": pa.chunked_array(
            [run.table.column("received_at") for run in runs]
        ).combine_chunks(),
        "endpoint": _per_run([run.source.endpoint for run in runs], which),
        "payload": pc.if_else(pc.is_null(fault), decoded.payload, pa.nulls(n, pa.binary())),
        "error": error,
        **decoded.columns,
    }
    batch = pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)
    ranges = np.array([run.part for run in runs], np.int64)[which]
    if decoded.keep is not None:  # the protocol filters (events not asked for): gaps stay
        kept = pc.or_(decoded.keep, pc.is_valid(error))
        batch = batch.filter(kept)
        ranges = ranges[kept.to_numpy(zero_copy_only=False)]
    return batch, ranges


def _per_run(values: list[str], which: np.ndarray) -> pa.Array:
    """A string column of ``values[which[i]]`` for row i (one value per run)."""
    return pa.array(values, pa.string()).take(pa.array(which))


def is_gap(error: pa.Array) -> pa.Array:
    """True where ``error`` is a gap row's text."""
    return pc.fill_null(pc.starts_with(error, GAP_PREFIX), False)


def _apply_contract(
    name: str, batch: pa.RecordBatch, settings: RowSettings
) -> tuple[pa.RecordBatch, np.ndarray | None]:
    """``failOnDataLoss`` for gap rows, ``mode`` for malformed ones: the batch to deliver and,
    if it dropped malformed rows, which of ``batch``'s rows they were."""
    error = batch.column("error")
    gaps = is_gap(error)
    if settings.fail_on_data_loss and pc.any(gaps).as_py():
        row = batch.filter(gaps).slice(0, 1).to_pylist()[0]
        raise DataLossError(
            f"{name}: data lost in partition {row['partition']} at offset {row['offset']} "
            f"from {row['endpoint']}: {row['error']} (failOnDataLoss=true; set it to false to "
            f"get each loss as a row whose error starts with '{GAP_PREFIX}')"
        )
    malformed = pc.and_(pc.is_valid(error), pc.invert(gaps))
    if not pc.any(malformed).as_py() or settings.mode == "PERMISSIVE":
        return batch, None
    if settings.mode == "FAILFAST":
        row = batch.filter(malformed).slice(0, 1).to_pylist()[0]
        raise MalformedMessageError(
            f"{name}: malformed message in partition {row['partition']} at offset "
            f"{row['offset']} from {row['endpoint']}: {row['error']} (mode=FAILFAST; use "
            f"mode=PERMISSIVE to keep such messages as rows, or DROPMALFORMED to skip them)"
        )
    return batch.filter(pc.invert(malformed)), malformed.to_numpy(zero_copy_only=False)


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
