"""The writer side of a spool folder: claims partitions, appends segments, records commits and
deletes what retention lets go.

Each partition has one writer at a time, fenced by epochs (``epochs``). Only committed segments
are ever deleted, oldest first across the partitions this process writes: when they are older
than the retention (``Retention.seconds``), when more of them than ``Retention.nbytes`` are
kept, and whenever a write needs room at the spool's bound (``has_room``). New messages are
dropped at the bound only when nothing committed is left to delete.
"""

from __future__ import annotations

import functools
import heapq
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Concatenate, ParamSpec, TypeVar

import pyarrow as pa

from spark_zmq.log import logger
from spark_zmq.spool.epochs import (
    QUERY,
    claim_epoch,
    lock_folder,
    mark_stopping,
    remove_unused_epochs,
    seal,
)
from spark_zmq.spool.layout import (
    BATCH_ROWS,
    HISTORY_NAME,
    INDEX_NAME,
    LEASE_NAME,
    SPOOL_SCHEMA,
    JsonState,
    LeaseLost,
    PartitionIndex,
    PartitionState,
    Retention,
    Segment,
    Source,
    SpoolError,
    SpoolWriteError,
    epoch_name,
    epochs,
    load_index,
    load_indexes,
    os_cause,
    partition_dir,
    remove_quietly,
    segment_paths,
    write_atomically,
)
from spark_zmq.spool.leases import Lease, process_id

#: dead lines (segments deleted since) a history file may hold beyond its live ones before it is
#: written anew
HISTORY_SLACK = 1024
#: at the bound, committed segments are deleted until the spool is this fraction of the bound
#: below it, so that appends at the bound do not each look for something to delete
ROOM_MADE_AT_ONCE = 1 / 16

P = ParamSpec("P")
R = TypeVar("R")


def _locked(method: Callable[Concatenate[Spool, P], R]) -> Callable[Concatenate[Spool, P], R]:
    """Run a Spool method under its mutex."""

    @functools.wraps(method)
    def wrapper(self: Spool, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._mutex:
            return method(self, *args, **kwargs)

    return wrapper


class Spool:
    """The writer side of a spool folder.

    ``exclusive`` (capture on the driver): one process writes every partition of the folder; a
    LOCK file keeps a second query off it, and a partition is claimed from whoever had it
    before; ``role`` says in the LOCK who writes (``epochs.QUERY`` or ``epochs.SERVICE``).
    Not exclusive (a holder on an executor): the process writes only the partitions it claims
    with ``open_partition(key, expect_epoch=...)``.
    """

    def __init__(
        self,
        root: str,
        max_bytes: int,
        lock_wait: float = 15.0,
        exclusive: bool = True,
        executor: str = "",
        role: str = QUERY,
        retention: Retention | None = None,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.retention = retention or Retention()
        self.exclusive = exclusive
        self.executor = executor or process_id()
        _make_folder(root)
        self._lock_file = lock_folder(root, lock_wait, role) if exclusive else None
        self._mutex = threading.RLock()  # capture thread appends while the reader truncates
        self.partitions: dict[str, PartitionIndex] = {}
        self.epochs: dict[str, int] = {}  # partitions this process holds -> its epoch
        self.inherited: dict[str, Lease | None] = {}  # the previous holder of each claimed one
        self._beats: dict[str, int] = {}
        #: bytes of the committed segments in ``partitions`` (what room can be made of)
        self.committed_nbytes = 0
        #: when (wall clock) the oldest committed segment passes the retention by age
        self._expires_at = math.inf
        self._made_room_before = False  # the first time room is made at the bound is logged
        #: per held partition, what its epoch's history file holds: (the end of the last
        #: segment in it, its lines); none yet: written whole at the next save
        self._history: dict[str, tuple[int, int]] = {}
        if exclusive:
            self.partitions = load_indexes(root)
        self.nbytes = sum(p.nbytes for p in self.partitions.values())
        for index in self.partitions.values():
            self._count(index, +1)

    def stopping(self) -> None:
        """Say that this process is about to let go of the folder (see ``lock_folder``)."""
        if self._lock_file is not None:
            mark_stopping(self._lock_file)

    def close(self) -> None:
        """Let go of every partition held (seal) and of the folder."""
        with self._mutex:
            for key in list(self.epochs):
                self.release(key)
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    @_locked
    def snapshot(self) -> dict[str, PartitionState]:
        """Every partition's retained range, for planning offsets."""
        return {key: index.state() for key, index in self.partitions.items()}

    # -- ownership -----------------------------------------------------------------------------

    @_locked
    def open_partition(self, key: str, expect_epoch: int | None = None) -> PartitionIndex:
        """The partition's index, claimed for this process if it does not hold it yet.

        ``expect_epoch``: claim only if the partition's highest epoch is still that one (0: never
        claimed); otherwise LeaseLost. An exclusive spool claims whatever the epoch.
        A retired partition that comes back reopens.
        """
        if key not in self.epochs:
            if not self.exclusive and expect_epoch is None:
                raise LeaseLost(f"partition {key!r} is not held by this process")
            self._claim(key, expect_epoch)
        index = self.partitions[key]
        if index.retired:
            index.retired = False
            self._save(index)
        return index

    def _claim(self, key: str, expect_epoch: int | None) -> None:
        mine, previous = claim_epoch(self.root, key, expect_epoch)
        index = load_index(self.root, key) or PartitionIndex(key)
        old = self.partitions.get(key)
        self.nbytes += index.nbytes - (old.nbytes if old else 0)
        self.partitions[key] = index
        self.epochs[key] = mine
        self._history.pop(key, None)  # a new epoch folder, without a history file yet
        self.inherited[key] = previous if previous and previous.holder else None
        self._beats[key] = 0
        self._count(old, -1)
        self._count(index, +1)
        self._save(index)
        self.heartbeat(key)

    @_locked
    def heartbeat(self, key: str, failure: str = "") -> None:
        """Renew the lease of a held partition; LeaseLost if it was taken over."""
        if key not in self.epochs:
            raise LeaseLost(f"partition {key!r} is not held by this process")
        self._beats[key] += 1
        lease = Lease.renewed(self.epochs[key], self.executor, self._beats[key], failure)
        self._write(key, LEASE_NAME, lease.to_json().encode())

    @_locked
    def release(self, key: str, failure: str = "") -> None:
        """Stop holding a partition: seal its folder so that the next claimant needs no wait.
        ``failure`` (capture failed) is left in the lease for the driver to raise."""
        if failure and key in self.epochs:
            try:
                self.heartbeat(key, failure)
            except SpoolError:
                pass
        epoch = self._forget(key)
        if epoch is not None:
            seal(partition_dir(self.root, key), epoch)

    def _forget(self, key: str) -> int | None:
        """This process no longer holds ``key``: the epoch it held it under, if any."""
        epoch = self.epochs.pop(key, None)
        self._history.pop(key, None)
        if epoch is not None and not self.exclusive:
            gone = self.partitions.pop(key, None)
            self.nbytes -= gone.nbytes if gone else 0
            self._count(gone, -1)
        return epoch

    # -- writing -------------------------------------------------------------------------------

    def has_room(self, key: str | None = None) -> bool:
        """Whether more of partition ``key`` may be written: the spool is under its bound (once
        committed segments were deleted to make room, see ``make_room``), or ``key`` holds less
        than its share of the bound (the bound divided among the partitions held). So when one
        peer floods the spool to its bound, its partition is the one that drops, not its
        neighbours; the spool then holds at most the bound plus what the partitions under their
        shares add."""
        if self.nbytes >= self.max_bytes and self.committed_nbytes:
            self.make_room()
        if self.nbytes < self.max_bytes or key is None:
            return self.nbytes < self.max_bytes
        index = self.partitions.get(key)
        return index is None or index.nbytes < self.max_bytes // max(1, len(self.partitions))

    @_locked
    def append(self, key: str, source: Source, table: pa.Table, dropped: int = 0) -> None:
        """Write one segment of rows (SPOOL_SCHEMA) and publish it in the index; ``dropped``
        adds to the partition's count of dropped messages in the same index update.

        SpoolWriteError if the storage refuses; the spool is then as it was before the call.
        """
        index = self.open_partition(key)
        if table.num_rows == 0:
            return
        segment = Segment(index.end, table.num_rows, 0, self.epochs[key])
        path = self._path(key, segment.file_name)
        try:
            segment.nbytes = _write_segment_file(path, source, table)
        except OSError as exc:
            raise self._write_failed(key, path, exc) from None
        segment.at = time.time()
        before = (index.end, index.dropped)
        index.segments.append(segment)  # in place: retention may keep many segments
        index.end, index.dropped = segment.end, index.dropped + dropped
        try:
            self._save(index)  # a file not in the index is never read, and replaced later
        except SpoolError:
            index.segments.pop()
            index.end, index.dropped = before
            raise
        self.nbytes += segment.nbytes

    @_locked
    def retire(self, key: str) -> None:
        index = self.partitions.get(key)
        if index is not None and not index.retired and key in self.epochs:
            index.retired = True
            self._save(index)

    @_locked
    def truncate(self, key: str, end: int) -> None:
        """Spark committed everything below ``end`` in partition ``key``: record it in the index
        (so that any later holder knows), then apply the retention, which may now delete it."""
        index = self.partitions.get(key)
        if index is not None and min(end, index.end) > index.committed:
            index = self._held(key)
            if index is not None:
                before = index.committed_count()
                index.committed = min(end, index.end)
                newly = index.segments[before : index.committed_count()]
                self.committed_nbytes += sum(s.nbytes for s in newly)
                if newly and self.retention.seconds is not None:
                    oldest = min(s.at for s in newly) + self.retention.seconds
                    self._expires_at = min(self._expires_at, oldest)
                if not (self._retention_due() and self._apply_retention(time.time()).get(key)):
                    self._publish(index)  # the commit alone: retention deleted nothing of it
                return
        self.expire()

    @_locked
    def expire(self) -> None:
        """Apply the retention (segments that passed it by age, or the bytes beyond
        ``Retention.nbytes``); cheap when nothing is due. The writer's periodic tick calls it,
        so that retention runs with nothing new written or committed."""
        if self._retention_due():
            self._apply_retention(time.time())

    def _retention_due(self) -> bool:
        """Whether retention would delete something: committed bytes over
        ``Retention.nbytes``, or the oldest committed segment past its age (checked without
        walking the partitions)."""
        max_kept = self.retention.nbytes
        over = max_kept is not None and self.committed_nbytes > max_kept
        return over or time.time() >= self._expires_at

    @_locked
    def make_room(self) -> None:
        """At the bound: delete committed segments, oldest first, until the spool is
        ``ROOM_MADE_AT_ONCE`` of the bound below it or nothing committed is left."""
        target = self.max_bytes - int(self.max_bytes * ROOM_MADE_AT_ONCE)
        over = self.nbytes - target
        if over <= 0 or not self.committed_nbytes:
            return
        if not self._made_room_before:
            logger.info(
                "spool %s reached maxSpoolBytes (%d bytes): committed segments are deleted, "
                "oldest first, to make room for new messages (logged once)",
                self.root,
                self.max_bytes,
            )
            self._made_room_before = True
        self._delete_oldest(lambda segment, freed: freed < over)

    def _apply_retention(self, now: float) -> dict[str, int]:
        """Delete the committed segments older than ``Retention.seconds`` and the oldest beyond
        ``Retention.nbytes``; how many went per partition."""
        seconds, max_kept = self.retention.seconds, self.retention.nbytes
        cutoff = now - seconds if seconds is not None else -math.inf
        over = self.committed_nbytes - max_kept if max_kept is not None else 0
        return self._delete_oldest(lambda segment, freed: segment.at <= cutoff or freed < over)

    def _delete_oldest(self, goes: Callable[[Segment, int], bool]) -> dict[str, int]:
        """Delete committed segments, oldest first across partitions, while ``goes(segment,
        bytes freed so far)``; how many went per partition. ``goes`` must stay false once it
        is (the segments come oldest first), so the walk stops at the first one kept."""
        doomed: dict[str, int] = {}
        freed = 0
        self._expires_at = math.inf
        for key, segment in self._committed_oldest_first():
            if not goes(segment, freed):
                if self.retention.seconds is not None:
                    self._expires_at = segment.at + self.retention.seconds
                break
            doomed[key] = doomed.get(key, 0) + 1
            freed += segment.nbytes
        for key, count in doomed.items():
            self._delete_first(key, count)
        return doomed

    def _committed_oldest_first(self) -> Iterator[tuple[str, Segment]]:
        """(key, segment) of every committed segment, oldest first (each partition's are in
        offset order, which is the order they were written)."""

        def committed(key: str, index: PartitionIndex) -> Iterator[tuple[str, Segment]]:
            for segment in index.segments:
                if segment.end > index.committed:
                    return
                yield key, segment

        held = [committed(k, i) for k, i in self.partitions.items() if i.committed > i.start]
        return heapq.merge(*held, key=lambda item: item[1].at)

    def _held(self, key: str) -> PartitionIndex | None:
        """The index of ``key``, claimed if this (exclusive) process does not hold it yet; None
        if it may not write it (a holder's partition it does not hold)."""
        if key not in self.epochs:
            if not self.exclusive:
                return None
            self._claim(key, None)  # keeps ``retired`` as it is, unlike open_partition
        return self.partitions[key]

    def _delete_first(self, key: str, count: int) -> None:
        """Delete the first ``count`` segments of partition ``key`` (all committed)."""
        index = self._held(key)
        if index is None:
            return
        gone, index.segments = index.segments[:count], index.segments[count:]
        index.start = index.segments[0].first if index.segments else index.end
        self._publish(index)  # publish first, then delete: a listed file is there or retained
        freed = sum(segment.nbytes for segment in gone)
        self.nbytes -= freed
        self.committed_nbytes -= freed
        _delete_segments(self.root, key, gone, index.segments, self.epochs[key])

    def _publish(self, index: PartitionIndex) -> None:
        try:
            self._save(index)
        except SpoolWriteError as exc:
            # A full disk cannot take the new index, and only deleting frees space: delete
            # anyway (only committed segments go); the next write of the index publishes it.
            logger.warning("spool: %s; the next write of the index publishes this change", exc)

    def _count(self, index: PartitionIndex | None, sign: int) -> None:
        """Add (``sign`` +1: loaded or claimed) or take away (-1: let go) what ``index``'s
        committed segments count in ``committed_nbytes``; a new index also moves the next
        expiry earlier if its oldest committed segment is due sooner. Segments an earlier
        release wrote (age not known) count from now."""
        if index is None:
            return
        now = time.time()
        committed = index.committed_count()
        for segment in index.segments:
            if not segment.at:
                segment.at = now
        self.committed_nbytes += sign * sum(s.nbytes for s in index.segments[:committed])
        seconds = self.retention.seconds
        if sign > 0 and committed and seconds is not None:
            self._expires_at = min(self._expires_at, index.segments[0].at + seconds)

    def state(self, name: str) -> JsonState:
        """A small JSON document kept beside the partitions (discovery's durable state)."""
        return JsonState(os.path.join(self.root, f"{name}.json"))

    def _path(self, key: str, name: str) -> str:
        return os.path.join(partition_dir(self.root, key), epoch_name(self.epochs[key]), name)

    def _save(self, index: PartitionIndex) -> None:
        """Publish ``index``: its committed segments in the history file first, then
        index.json, which lists the others (so the history holds whatever an index names)."""
        self._save_history(index)
        self._write(index.key, INDEX_NAME, index.to_json().encode("utf-8"))

    def _save_history(self, index: PartitionIndex) -> None:
        """Add the newly committed segments to the epoch's history file: appended, so a commit
        costs what it committed, not what retention keeps; written whole in a new epoch, and
        once it holds more than HISTORY_SLACK (and as many as its live lines) of segments that
        retention deleted."""
        key = index.key
        committed = index.committed_count()
        written = self._history.get(key)
        if written is None and not committed:
            return
        if written is None or written[1] - committed > max(HISTORY_SLACK, committed):
            data, lines, mode = index.history_lines(0, committed), committed, "wb"
        else:
            begin = index.count_before(written[0])
            data, lines, mode = index.history_lines(begin, committed), written[1], "ab"
            lines += committed - begin
            if not data:
                return
        path = self._path(key, HISTORY_NAME)
        self._history.pop(key, None)  # written whole next time if this write fails
        try:
            if mode == "wb":
                write_atomically(path, data.encode())
            else:
                with open(path, "ab") as f:
                    f.write(data.encode())
        except OSError as exc:
            raise self._write_failed(key, path, exc) from None
        self._history[key] = (index.segments[committed - 1].end if committed else 0, lines)

    def _write(self, key: str, name: str, data: bytes) -> None:
        path = self._path(key, name)
        try:
            write_atomically(path, data)
        except OSError as exc:
            raise self._write_failed(key, path, exc) from None

    def _write_failed(self, key: str, path: str, exc: OSError) -> SpoolError:
        """The error for a write that failed (see ``_write_error``); a partition taken over
        is no longer held."""
        error = _write_error(self.root, key, path, exc, self.epochs.get(key, 0))
        if isinstance(error, LeaseLost):
            self._forget(key)
        return error


def _write_segment_file(path: str, source: Source, table: pa.Table) -> int:
    """Write ``table`` as an Arrow IPC file at ``path`` (whole or not at all); its size."""
    schema = SPOOL_SCHEMA.with_metadata({"source": source.to_json()})
    tmp = path + ".tmp"
    try:
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            # batches of BATCH_ROWS: a file cut short keeps its earlier batches readable
            writer.write_table(table.replace_schema_metadata(schema.metadata), BATCH_ROWS)
        os.replace(tmp, path)
        return os.path.getsize(path)
    except OSError:
        remove_quietly(tmp)
        raise


def _delete_segments(
    root: str, key: str, gone: list[Segment], kept: list[Segment], epoch: int
) -> None:
    """Delete the files of segments ``gone`` (each in whichever epoch folder it is; gone
    already: nothing to do), then the epoch folders that neither ``kept`` nor ``epoch`` use."""
    for segment in gone:
        for path in segment_paths(root, key, segment):
            try:
                os.remove(path)
                break
            except FileNotFoundError:
                continue
    used = {s.epoch for s in kept} | {epoch}
    remove_unused_epochs(partition_dir(root, key), used, epoch)


def _make_folder(root: str) -> None:
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        raise SpoolError(
            f"cannot use {root!r} as a spool folder (option spoolPath): {exc.strerror or exc}"
        ) from None


def _write_error(root: str, key: str, path: str, exc: OSError, mine: int) -> SpoolError:
    """LeaseLost if the epoch folder was sealed (someone claimed the partition after epoch
    ``mine``), else a SpoolWriteError naming the file, the partition and the cause."""
    newer = any(e > mine for e, _ in epochs(partition_dir(root, key)))
    if isinstance(exc, FileNotFoundError) and newer:
        return LeaseLost(
            f"partition {key!r}: epoch {mine} was taken over by a newer "
            f"holder; this process may no longer write to it"
        )
    return SpoolWriteError(f"cannot write {path} (spool {root}, partition {key}): {os_cause(exc)}")
