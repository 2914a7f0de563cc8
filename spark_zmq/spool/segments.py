"""Segment files: the Arrow IPC files that hold a spool's rows, written and read.

Since 0.3 a flush writes *one* file for every partition it has rows of (a *flush file*). The
file's schema metadata ``parts`` lists, in row order, ``[row, count, source]`` for each
partition's rows, and a segment names its part (``part``). An exclusive writer keeps the file
in the spool's flush folder under a number that each segment names (``Segment.flush``,
``flushes``); a holder links it as each partition's segment file in its epoch folder, named by
the segment's first offset as before, and the file's space is freed with its last link. So a
flush of 300 endpoints costs one file, not 300 (and, for a holder, 300 links); a read task that
reads many partitions opens each flush file once (``SegmentFiles``).

A segment of an earlier release (``part`` None) is a file of its own, its source in the schema
metadata ``source``.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_zmq.log import logger
from spark_zmq.spool.index import Segment, Source
from spark_zmq.spool.layout import (
    BATCH_ROWS,
    FRAME_OVERHEAD,
    ROW_OVERHEAD,
    SPOOL_SCHEMA,
    remove_quietly,
)

#: what an Arrow IPC file starts with, before the IPC stream it holds
IPC_FILE_MAGIC = b"ARROW1\0\0"
#: how many bytes of flush files a ``SegmentFiles`` keeps mapped, the most recently read (a read
#: task's ranges read the same flush files one partition after the other): the pages a process
#: reads of a mapped file count in its resident memory while it stays mapped
OPEN_BYTES = 64 << 20


class Part(NamedTuple):
    """One partition's rows in a flush file."""

    source: Source
    table: pa.Table


def write_flush_file(path: str, rows: pa.Table, parts: Sequence[tuple[Source, int]]) -> list[int]:
    """Write ``rows`` (SPOOL_SCHEMA) as one Arrow IPC file at ``path``, whole or not at all,
    its ``parts`` (source, rows) in row order; the bytes of the file that each part accounts
    for (their sum is its size), which retention counts as its segment's size."""
    listing, row = [], 0
    for source, count in parts:  # (JSON made here of each source's own, made once)
        listing.append(f"[{row}, {count}, {source.to_json()}]")
        row += count
    schema = SPOOL_SCHEMA.with_metadata({"parts": f"[{', '.join(listing)}]"})
    tmp = path + ".tmp"
    try:
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            # batches of BATCH_ROWS at most, a chunk's rows each (a caller gives few chunks: a
            # batch costs its own metadata to write and read): a file cut short keeps its
            # earlier batches readable
            writer.write_table(rows, BATCH_ROWS)
        os.replace(tmp, path)
        size = os.path.getsize(path)
    except OSError:
        remove_quietly(tmp)
        raise
    if len(parts) == 1:
        return [size]
    return _shares(size, _weights(rows, [count for _, count in parts]))


def _weights(rows: pa.Table, counts: list[int]) -> list[int]:
    """What each run of ``counts`` rows of ``rows`` takes as arrays: its frames' bytes and
    FRAME_OVERHEAD and ROW_OVERHEAD a frame and a row (what a capture buffer counts)."""
    sizes = []  # per row, chunk by chunk (a chunk's offsets are its own)
    for chunk in rows.column("frames").chunks:
        row_frames = np.asarray(chunk.offsets, dtype=np.int64)
        row_frames -= row_frames[0]
        lengths = np.asarray(pc.binary_length(chunk.flatten()).fill_null(0), dtype=np.int64)
        byte_ends = np.concatenate([[0], np.cumsum(lengths)])
        sizes.append(np.diff(byte_ends[row_frames] + FRAME_OVERHEAD * row_frames))
    per_row = np.concatenate([np.zeros(0, dtype=np.int64), *sizes]) + ROW_OVERHEAD
    ends = np.concatenate([[0], np.cumsum(per_row)])
    bounds = np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64))])
    return [int(weight) for weight in np.diff(ends[bounds])]


def _shares(size: int, weights: list[int]) -> list[int]:
    """``size`` split in proportion to ``weights``, in whole bytes that add up to it."""
    total = sum(weights) or 1
    shares = [size * weight // total for weight in weights]
    shares[-1] += size - sum(shares)
    return shares


class _FlushFile(NamedTuple):
    parts: list[tuple[int, int, Source]]  # (row, count, source), in row order
    table: pa.Table  # every row readable, memory-mapped


class SegmentFiles:
    """Reads segments, each flush file once while it stays among the files read last (up to
    ``capacity`` bytes of them, and always the last). A file is known by its device, inode,
    size and change time, so a link under any partition's name finds it, and a file made anew
    under a reused inode does not. Thread-safe: the spool server's calls share one."""

    def __init__(self, capacity: int = OPEN_BYTES) -> None:
        self.capacity = capacity
        self._files: OrderedDict[tuple[int, int, int, int], _FlushFile] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def read(self, path: str, segment: Segment) -> tuple[Source, pa.Table]:
        """The source and rows of ``segment``, whose file is at ``path`` (FileNotFoundError if
        it is not); a damaged file's rows up to the damage, then a fault row per message lost
        (``_recover``)."""
        if segment.part is None:
            return _read_whole(path, segment)
        stat = os.stat(path)
        identity = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        with self._lock:
            found = self._files.get(identity)
            if found is not None:
                self._files.move_to_end(identity)
        if found is None:
            found = _open_flush_file(path)
            if found is None:
                return _recover(path, segment)
            with self._lock:
                if identity not in self._files:
                    self._files[identity] = found
                    self._bytes += stat.st_size
                while self._bytes > self.capacity and len(self._files) > 1:
                    (_, _, size, _), _ = self._files.popitem(last=False)
                    self._bytes -= size
        return _part_rows(found, path, segment)


def _open_flush_file(path: str) -> _FlushFile | None:
    """A flush file's parts and rows (memory-mapped: a read task reads what it uses); None if
    it is damaged."""
    try:
        with pa.memory_map(path) as mapped:
            reader = pa.ipc.open_file(mapped)
            table = reader.read_all()
            parts = [
                (int(row), int(count), Source.from_dict(source))
                for row, count, source in json.loads(reader.schema.metadata[b"parts"])
            ]
    except (pa.ArrowInvalid, OSError, KeyError, ValueError, TypeError):
        return None
    return _FlushFile(parts, table)


def _part_rows(found: _FlushFile, path: str, segment: Segment) -> tuple[Source, pa.Table]:
    """The rows of ``segment``'s part of a flush file."""
    part = segment.part if segment.part is not None else 0
    if part >= len(found.parts) or found.parts[part][1] != segment.count:
        return _recover(path, segment)
    row, count, source = found.parts[part]
    return source, found.table.slice(row, count)


def _read_whole(path: str, segment: Segment) -> tuple[Source, pa.Table]:
    """A segment file of its own (written before 0.3): every row is the segment's."""
    with pa.OSFile(path, "rb") as source_file:
        try:
            reader = pa.ipc.open_file(source_file)
            table = reader.read_all()
            if table.num_rows == segment.count:
                return Source.from_json(reader.schema.metadata[b"source"]), table
        except (pa.ArrowInvalid, OSError, KeyError, ValueError):
            pass
    return _recover(path, segment)


def _recover(path: str, segment: Segment) -> tuple[Source, pa.Table]:
    """A damaged segment file (cut short by a crash of its host, or by a full disk): the
    segment's rows up to the damage, then one fault row per message lost, so that every offset
    still names one row and a replayed micro-batch reads the same rows."""
    with open(path, "rb") as f:
        data = f.read()
    source, batches = Source("(unknown: damaged spool segment)", {}), []
    row = 0
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(data[len(IPC_FILE_MAGIC) :]))
        metadata = reader.schema.metadata or {}
        if segment.part is None:
            source = Source.from_json(metadata[b"source"])
        else:
            row, _, found = json.loads(metadata[b"parts"])[segment.part]
            source = Source.from_dict(found)
        while True:
            batches.append(reader.read_next_batch())
    except (StopIteration, pa.ArrowInvalid, OSError, KeyError, ValueError, TypeError, IndexError):
        pass
    readable = pa.Table.from_batches(batches, SPOOL_SCHEMA)
    rows = readable.slice(min(row, readable.num_rows), segment.count)
    lost = segment.count - rows.num_rows
    text = (
        f"gap: {lost} messages at offsets [{segment.first + rows.num_rows}, {segment.end}) "
        f"are lost: spool segment {path} is damaged (cut short by a crash or a full disk)"
    )
    logger.warning("spool: %s; %d rows of it recovered", text, rows.num_rows)
    faults = fault_rows(text, lost, int(os.path.getmtime(path) * 1e6))
    return source, pa.concat_tables([rows.replace_schema_metadata(None), faults])


def fault_rows(text: str, count: int, when_us: int) -> pa.Table:
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


#: the causes of gap rows, as metrics count them (``gap_cause``): the start of the row's text
#: (each module that writes gap rows words its own), then a word for it
GAP_CAUSES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"gap: the connection to "), "connection_dropped"),
    (re.compile(r"gap: receiving from "), "receive_failed"),
    (re.compile(r"gap: (1 message|\d+ messages) of .* over "), "over_bounds"),
    (
        re.compile(r"gap: \d+ messages dropped between .* because the spool could not"),
        "spool_error",
    ),
    (re.compile(r"gap: \d+ messages dropped between "), "spool_full"),
    (re.compile(r"gap: capture of partition "), "capture_not_running"),
    (re.compile(r"gap: partition .* had no holder "), "no_holder"),
    (re.compile(r"gap: \d+ messages at offsets .* spool segment "), "damaged_segment"),
)


def gap_cause(text: str) -> str:
    """What a gap row's ``text`` says was its cause, in one word (``GAP_CAUSES``; ``other``)."""
    for pattern, cause in GAP_CAUSES:
        if pattern.match(text):
            return cause
    return "other"
