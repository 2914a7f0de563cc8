"""Reading a spool (any process, no lock): retained ranges, and rows by offset range.

Readers (offset planning, ``read_range`` on executors) take the index of the highest epoch that
has one and look a segment up in its epoch's folder, sealed or not; they need no lock.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa

from spark_zmq.log import logger
from spark_zmq.spool.layout import (
    SPOOL_SCHEMA,
    PartitionState,
    Segment,
    Source,
    SpoolError,
    load_index,
    load_indexes,
    segment_paths,
)

#: what an Arrow IPC file starts with, before the IPC stream it holds
IPC_FILE_MAGIC = b"ARROW1\0\0"


def _read_segment(root: str, key: str, segment: Segment) -> tuple[Source, pa.Table]:
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
    raise SpoolError(
        f"spool segment {paths[0]} of partition {key!r} is missing, sealed or not; "
        f"the spool was changed by something other than spark_zmq"
    )


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
    when = int(os.path.getmtime(path) * 1e6)
    faults = pa.table(
        {
            "received_at": pa.array([when] * lost, pa.int64()).cast(
                SPOOL_SCHEMA.field("received_at").type
            ),
            "frames": pa.array([[]] * lost, SPOOL_SCHEMA.field("frames").type),
            "fault": pa.array([text] * lost, pa.string()),
        },
        schema=SPOOL_SCHEMA,
    )
    return source, pa.concat_tables([rows, faults])


# -- reading (any process) ---------------------------------------------------------------------


def read_snapshot(root: str) -> dict[str, PartitionState]:
    """Every partition's retained range, read from the folder (a process that writes none)."""
    return {
        key: PartitionState(index.start, index.end, index.retired)
        for key, index in load_indexes(root).items()
    }


def read_range(root: str, key: str, start: int, end: int) -> Iterator[tuple[int, Source, pa.Table]]:
    """Yield (first offset, source, rows) for offsets [start, end) of one partition, in order."""
    index = load_index(root, key)
    if index is None or start < index.start or end > index.end:
        held = "nothing" if index is None else f"[{index.start}, {index.end})"
        raise SpoolError(
            f"spool {root} cannot serve offsets [{start}, {end}) of partition {key!r}: it holds "
            f"{held}. The spool was deleted or belongs to another query; restore it or start "
            f"the query with a new checkpoint"
        )
    for segment in index.segments:
        if segment.end <= start or segment.first >= end:
            continue
        source, table = _read_segment(root, key, segment)
        lo = max(start, segment.first) - segment.first
        hi = min(end, segment.end) - segment.first
        yield segment.first + lo, source, table.slice(lo, hi - lo)
