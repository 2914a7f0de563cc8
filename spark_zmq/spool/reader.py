"""Reading a spool (any process, no lock): retained ranges, and rows by offset range.

Readers (offset planning, ``read_range`` on executors) take the index of the highest epoch that
has one and look a segment up in its epoch's folder, sealed or not; they need no lock. Retention
may delete committed segments while a read runs (the writer publishes the index first, then
deletes): offsets it deleted before the read reached them are read as one gap row, not an error.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pyarrow as pa

from spark_zmq.log import logger
from spark_zmq.spool.index import PartitionState, Segment, Source
from spark_zmq.spool.layout import SPOOL_SCHEMA, SpoolError, load_index, load_indexes, segment_paths

#: what an Arrow IPC file starts with, before the IPC stream it holds
IPC_FILE_MAGIC = b"ARROW1\0\0"


def _read_segment(root: str, key: str, segment: Segment) -> tuple[Source, pa.Table] | None:
    """A segment's source and rows (a damaged file: ``_recover_segment``); None if its file
    is gone, sealed or not."""
    paths = segment_paths(root, key, segment)
    for path in paths:
        try:
            source_file = pa.OSFile(path, "rb")
        except FileNotFoundError:
            continue
        with source_file:
            try:
                reader = pa.ipc.open_file(source_file)
                table = reader.read_all()
                if table.num_rows == segment.count:
                    return Source.from_json(reader.schema.metadata[b"source"]), table
            except (pa.ArrowInvalid, OSError, KeyError, ValueError):
                pass
        return _recover_segment(path, segment)
    return None


def _recover_segment(path: str, segment: Segment) -> tuple[Source, pa.Table]:
    """A damaged segment file (cut short by a crash of its host, or by a full disk): its rows
    up to the damage, then one fault row per message lost, so that every offset still names one
    row and a replayed micro-batch reads the same rows."""
    with open(path, "rb") as f:
        data = f.read()
    source, batches = Source("(unknown: damaged spool segment)", {}), []
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(data[len(IPC_FILE_MAGIC) :]))
        source = Source.from_json(reader.schema.metadata[b"source"])
        while True:
            batches.append(reader.read_next_batch())
    except (StopIteration, pa.ArrowInvalid, OSError, KeyError, ValueError, TypeError):
        pass
    rows = pa.Table.from_batches(batches, SPOOL_SCHEMA).slice(0, segment.count)
    lost = segment.count - rows.num_rows
    text = (
        f"gap: {lost} messages at offsets [{segment.first + rows.num_rows}, {segment.end}) "
        f"are lost: spool segment {path} is damaged (cut short by a crash or a full disk)"
    )
    logger.warning("spool: %s; %d rows of it recovered", text, rows.num_rows)
    faults = _fault_rows(text, lost, int(os.path.getmtime(path) * 1e6))
    return source, pa.concat_tables([rows, faults])


def _fault_rows(text: str, count: int, when_us: int) -> pa.Table:
    """``count`` rows of fault ``text``, received at ``when_us`` (microseconds, UTC)."""
    return pa.table(
        {
            "received_at": pa.array([when_us] * count, pa.int64()).cast(
                SPOOL_SCHEMA.field("received_at").type
            ),
            "frames": pa.array([[]] * count, SPOOL_SCHEMA.field("frames").type),
            "fault": pa.array([text] * count, pa.string()),
        },
        schema=SPOOL_SCHEMA,
    )


#: the source of a row that stands for deleted messages (the segments that named it are gone)
DELETED = Source("(deleted from the spool by retention)", {})


def _deleted(key: str, start: int, end: int) -> tuple[int, Source, pa.Table]:
    """One gap row, at offset ``start``, for offsets [start, end) that retention deleted before
    a read reached them (a checkpoint or startingOffsets older than what the spool keeps, or a
    batch read that ran while retention deleted)."""
    text = (
        f"gap: {end - start} messages at offsets [{start}, {end}) of partition {key} were "
        f"deleted from the spool by retention (options spoolRetention, spoolRetentionBytes, "
        f"or room made at maxSpoolBytes) after Spark committed them, before this read reached "
        f"them"
    )
    logger.warning("spool: %s", text)
    return start, DELETED, _fault_rows(text, 1, time.time_ns() // 1000)


# -- reading (any process) ---------------------------------------------------------------------


def read_snapshot(root: str) -> dict[str, PartitionState]:
    """Every partition's retained range, read from the folder (a process that writes none)."""
    return {key: index.state() for key, index in load_indexes(root, history=False).items()}


def read_range(root: str, key: str, start: int, end: int) -> Iterator[tuple[int, Source, pa.Table]]:
    """Yield (first offset, source, rows) for offsets [start, end) of one partition, in order.

    Offsets that retention deleted (below the index's start, or a segment whose file went after
    the index was read) come as one gap row at the first of them (``_deleted``); a spool that
    never held the range is a SpoolError."""
    index = load_index(root, key, history=False)
    if index is not None and start < (index.segments[0].first if index.segments else index.end):
        index = load_index(root, key)  # committed segments too, from the history file
    if index is None or end > index.end:
        held = "nothing" if index is None else f"[{index.start}, {index.end})"
        raise SpoolError(
            f"spool {root} cannot serve offsets [{start}, {end}) of partition {key!r}: it holds "
            f"{held}. The spool was deleted or belongs to another query; restore it or start "
            f"the query with a new checkpoint"
        )
    if start < index.start:
        yield _deleted(key, start, min(end, index.start))
    for segment in index.segments:
        if segment.end <= start or segment.first >= end:
            continue
        lo = max(start, segment.first)
        hi = min(end, segment.end)
        found = _read_segment(root, key, segment)
        if found is None:
            yield _gone(root, key, segment, lo, hi)
            continue
        source, table = found
        yield lo, source, table.slice(lo - segment.first, hi - lo)


def _gone(root: str, key: str, segment: Segment, lo: int, hi: int) -> tuple[int, Source, pa.Table]:
    """The rows for [lo, hi) of a segment whose file is gone: a gap row if retention deleted
    it since the index was read (the index now starts after it), else a SpoolError."""
    now = load_index(root, key, history=False)
    if now is not None and now.start >= segment.end:
        return _deleted(key, lo, hi)
    raise SpoolError(
        f"spool segment {segment_paths(root, key, segment)[0]} of partition {key!r} is "
        f"missing, sealed or not; the spool was changed by something other than spark_zmq"
    )
