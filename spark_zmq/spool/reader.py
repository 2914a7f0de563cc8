"""Reading a spool (any process, no lock): retained ranges, and rows by offset range.

Readers (offset planning, ``read_range`` on executors) take the index of the highest epoch that
has one and look a segment up in its epoch's folder, sealed or not; they need no lock. Retention
may delete committed segments while a read runs (the writer publishes the index first, then
deletes): offsets it deleted before the read reached them are read as one gap row, not an error.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa

from spark_zmq.log import logger
from spark_zmq.spool.index import PartitionState, Segment, Source
from spark_zmq.spool.layout import (
    SpoolError,
    load_index,
    load_indexes,
    partition_dir,
    segment_paths,
)
from spark_zmq.spool.segments import SegmentFiles, fault_rows


def _read_segment(
    root: str, key: str, segment: Segment, files: SegmentFiles, folder: str
) -> tuple[Source, pa.Table] | None:
    """A segment's source and rows (``segments``; ``folder``: its partition's); None if its
    file is gone, sealed or not."""
    for path in segment_paths(root, key, segment, folder):
        try:
            return files.read(path, segment)
        except FileNotFoundError:
            continue
    return None


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
    return start, DELETED, fault_rows(text, 1, time.time_ns() // 1000)


# -- reading (any process) ---------------------------------------------------------------------


def read_snapshot(root: str) -> dict[str, PartitionState]:
    """Every partition's retained range, read from the folder (a process that writes none)."""
    return {key: index.state() for key, index in load_indexes(root, history=False).items()}


def read_range(
    root: str, key: str, start: int, end: int, files: SegmentFiles | None = None
) -> Iterator[tuple[int, Source, pa.Table]]:
    """Yield (first offset, source, rows) for offsets [start, end) of one partition, in order;
    ``files``: the flush files read so far (a read task of many ranges reads each once).

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
    files = files or SegmentFiles()
    folder = partition_dir(root, key)
    if start < index.start:
        yield _deleted(key, start, min(end, index.start))
    for segment in index.segments:
        if segment.end <= start or segment.first >= end:
            continue
        lo = max(start, segment.first)
        hi = min(end, segment.end)
        found = _read_segment(root, key, segment, files, folder)
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
