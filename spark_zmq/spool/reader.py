"""Reading a spool (any process, no lock): retained ranges, and rows by offset range.

Readers (offset planning, ``read_range`` on executors) take the index of the highest epoch that
has one and look a segment up in its epoch's folder, sealed or not; they need no lock. Retention
may delete committed segments while a read runs (the writer publishes the index first, then
deletes): offsets it deleted before the read reached them are read as one gap row, not an error.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import pyarrow as pa

from spark_zmq.log import logger
from spark_zmq.spool.index import Listing, PartitionIndex, PartitionState, Segment, Source
from spark_zmq.spool.layout import (
    INDEX_NAME,
    INDEX_READS,
    SEALED,
    PartitionFolder,
    SpoolError,
    epoch_name,
    load_index,
    load_indexes,
    partition_dir,
    partition_folders,
    read_in_epoch,
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
        f"deleted from the spool before this read reached them: by retention once committed "
        f"(options spoolRetention, spoolRetentionBytes), or to make room at maxSpoolBytes "
        f"(in a capture service's spool: once another spoolReader name committed them), or "
        f"after this reader name was silent for spoolReaderTimeout"
    )
    logger.warning("spool: %s", text)
    return start, DELETED, fault_rows(text, 1, time.time_ns() // 1000)


# -- reading (any process) ---------------------------------------------------------------------


def read_snapshot(root: str) -> dict[str, PartitionState]:
    """Every partition's retained range, read from the folder (a process that writes none)."""
    return {key: index.state() for key, index in load_indexes(root, history=False).items()}


class _Followed(NamedTuple):
    """What a SnapshotReader knows of one partition: the epoch and index.json it read (the
    file's identity), the appended-segments file's bytes read so far, and the index as they
    make it."""

    epoch: int
    identity: tuple[int, int, int]
    read: int  # bytes of the appended-segments file read (whole lines)
    stopped: bool  # a line ended what the file publishes: nothing after it counts
    partition: PartitionIndex


class SnapshotReader:
    """``read_snapshot`` for a process that asks at every micro-batch (the planner of
    ``capture=executors`` and of a capture service): a partition's index.json is read again
    only when it was written anew, and of its appended-segments file only the lines added
    since. With 1,000 endpoints reading every index whole took about a second a batch.

    Invariant: every snapshot is what ``read_snapshot`` would give at that moment (an index
    and the whole lines of the file it names), whatever was written, sealed or claimed
    between two snapshots; a partition whose index.json changed is read whole again."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._followed: dict[str, _Followed] = {}

    def snapshot(self) -> dict[str, PartitionState]:
        states = {}
        for partition in partition_folders(self.root):
            index = self._index(partition)
            if index is not None:
                states[partition.key] = index.state()
        for key in set(self._followed) - set(states):
            del self._followed[key]
        return states

    def listing(self, key: str, start: int, end: int) -> Listing | None:
        """``key``'s ``Listing`` of [start, end) as the last snapshot read it (None: not known
        here, or not listed whole)."""
        followed = self._followed.get(key)
        return followed.partition.listing(start, end) if followed is not None else None

    def _index(self, partition: PartitionFolder) -> PartitionIndex | None:
        for epoch, _ in reversed(partition.epochs):
            index = self._epoch_index(partition.key, partition.path, epoch)
            if index is not None:
                return index
        return None

    def _epoch_index(self, key: str, folder: str, epoch: int) -> PartitionIndex | None:
        """``key``'s index in epoch ``epoch``: what was read of it before and the lines its
        appended-segments file gained, if its index.json is the same file; else read whole."""
        identity = _identity(folder, epoch, INDEX_NAME)
        if identity is None:
            return None
        known = self._followed.get(key)
        if known is not None and (known.epoch, known.identity) == (epoch, identity):
            index = known.partition
            if not index.appended or known.stopped:
                return index
            data = _read_from(folder, epoch, index.appended, known.read)
            if data is not None:
                lines = data[: data.rfind(b"\n") + 1]
                stopped = not index.add_appended(lines.decode("utf-8", "replace"))
                self._followed[key] = known._replace(read=known.read + len(lines), stopped=stopped)
                return index
        return self._read_whole(key, folder, epoch)

    def _read_whole(self, key: str, folder: str, epoch: int) -> PartitionIndex | None:
        """As ``layout.load_index`` reads one epoch's index, noting what it read."""
        for _ in range(INDEX_READS):
            identity = _identity(folder, epoch, INDEX_NAME)
            found = read_in_epoch(folder, epoch, INDEX_NAME)
            if identity is None or found is None:
                return None
            index = PartitionIndex.from_json(found.text, found.path)
            read, stopped = 0, False
            if index.appended:
                data = _read_from(folder, epoch, index.appended, 0)
                if data is None:
                    continue  # a newer index.json was written meanwhile: read it
                lines = data[: data.rfind(b"\n") + 1]
                stopped = not index.add_appended(lines.decode("utf-8", "replace"))
                read = len(lines)
            self._followed[key] = _Followed(epoch, identity, read, stopped, index)
            return index
        self._followed.pop(key, None)
        return load_index(self.root, key, history=False)


def _identity(folder: str, epoch: int, name: str) -> tuple[int, int, int] | None:
    """The identity (inode, change time, size) of an epoch's file, sealed or not; None if
    neither exists. A file written anew (``write_atomically``) is a new inode."""
    base = os.path.join(folder, epoch_name(epoch))
    for path in (os.path.join(base, name), os.path.join(base + SEALED, name)):
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            continue
        return stat.st_ino, stat.st_mtime_ns, stat.st_size
    return None


def _read_from(folder: str, epoch: int, name: str, offset: int) -> bytes | None:
    """The bytes of an epoch's file from ``offset`` on, sealed or not; None if it is gone."""
    base = os.path.join(folder, epoch_name(epoch))
    for path in (os.path.join(base, name), os.path.join(base + SEALED, name)):
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            continue
    return None


def read_range(
    root: str,
    key: str,
    start: int,
    end: int,
    files: SegmentFiles | None = None,
    listing: Listing | None = None,
) -> Iterator[tuple[int, Source, pa.Table]]:
    """Yield (first offset, source, rows) for offsets [start, end) of one partition, in order;
    ``files``: the flush files read so far (a read task of many ranges reads each once);
    ``listing``: the segments as the planner saw them (``PartitionIndex.listing``), so that
    the index is not loaded here unless a listed segment is gone.

    Offsets that retention deleted (below the index's start, or a segment whose file went after
    the index was read) come as one gap row at the first of them (``_deleted``); a spool that
    never held the range is a SpoolError."""
    segments: Sequence[Segment]
    if listing is not None:
        retained_from, segments = listing.start, listing.segment_list()
    else:
        index = _index_of_range(root, key, start, end)
        retained_from, segments = index.start, index.segments
    files = files or SegmentFiles()
    folder = partition_dir(root, key)
    if start < retained_from:
        yield _deleted(key, start, min(end, retained_from))
    for segment in segments:
        if segment.end <= start or segment.first >= end:
            continue
        lo = max(start, segment.first)
        hi = min(end, segment.end)
        found = _read_segment(root, key, segment, files, folder)
        if found is None and listing is not None:  # deleted since it was listed: from lo on,
            yield from read_range(root, key, lo, end, files)  # as the index says now
            return
        if found is None:
            yield _gone(root, key, segment, lo, hi)
            continue
        source, table = found
        yield lo, source, table.slice(lo - segment.first, hi - lo)


def _index_of_range(root: str, key: str, start: int, end: int) -> PartitionIndex:
    """The index that lists [start, end) of ``key`` (its committed segments too where the
    range starts among them); SpoolError if the spool does not hold the range."""
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
    return index


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
