"""The writer side of a spool folder: claims partitions, appends segments, records commits and
deletes what retention lets go.

Each partition has one writer at a time, fenced by epochs (``epochs``). Only committed segments
are ever deleted, oldest first across the partitions this process writes: when they are older
than the retention (``Retention.seconds``), when more of them than ``Retention.nbytes`` are
kept, and whenever a write needs room at the spool's bound (``has_room``). New messages are
dropped at the bound only when nothing committed is left to delete. What retention deletes is
chosen by ``retention.RetentionLedger``; the files are written by ``files.EpochFiles``.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

import pyarrow as pa

from spark_zmq.log import logger
from spark_zmq.spool.epochs import (
    QUERY,
    claim_epoch,
    lock_folder,
    mark_stopping,
    seal,
)
from spark_zmq.spool.files import EpochFiles
from spark_zmq.spool.index import PartitionIndex, PartitionState, Retention, Segment, Source
from spark_zmq.spool.layout import (
    LEASE_NAME,
    JsonState,
    LeaseLost,
    SpoolError,
    SpoolWriteError,
    load_index,
    load_indexes,
    partition_dir,
)
from spark_zmq.spool.leases import Lease, process_id
from spark_zmq.spool.reserve import Reserve
from spark_zmq.spool.retention import RetentionLedger

P = ParamSpec("P")
R = TypeVar("R")
SP = TypeVar("SP", bound="SpoolPartitions")


def _locked(method: Callable[Concatenate[SP, P], R]) -> Callable[Concatenate[SP, P], R]:
    """Run a Spool method under its mutex."""

    @functools.wraps(method)
    def wrapper(self: SP, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._mutex:
            return method(self, *args, **kwargs)

    return wrapper


class SpoolPartitions:
    """The partitions a process holds in a spool folder: claims, leases, appends (``Spool``
    adds commits and retention).

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
        self._ledger = RetentionLedger(self.retention, root)
        self._files = EpochFiles(root, self.epochs, self._forget)
        self._reserve = Reserve(root)
        self._reserve.keep()
        if exclusive:
            self.partitions = load_indexes(root)
        self.nbytes = sum(p.nbytes for p in self.partitions.values())
        for index in self.partitions.values():
            self._ledger.count(index, +1)

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
                raise LeaseLost(f"partition {key!r} is not held by this process", key)
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
        self._files.forget(key)  # a new epoch folder, without a history file yet
        self.inherited[key] = previous if previous and previous.holder else None
        self._beats[key] = 0
        self._ledger.count(old, -1)
        self._ledger.count(index, +1)
        self._save(index)
        self.write_lease(key)

    @_locked
    def write_lease(self, key: str, failure: str = "") -> None:
        """Write the lease of a held partition: at its claim, and with the ``failure`` that
        stops its holder (a holder's heartbeat is its process record, ``processes``);
        LeaseLost if it was taken over."""
        if key not in self.epochs:
            raise LeaseLost(f"partition {key!r} is not held by this process", key)
        self._beats[key] += 1
        lease = Lease.renewed(self.epochs[key], self.executor, self._beats[key], failure)
        self._write(key, LEASE_NAME, lease.to_json().encode())

    @_locked
    def release(self, key: str, failure: str = "") -> None:
        """Stop holding a partition: seal its folder so that the next claimant needs no wait.
        ``failure`` (capture failed) is left in the lease for the driver to raise."""
        if failure and key in self.epochs:
            try:
                self.write_lease(key, failure)
            except SpoolError:
                pass
        epoch = self._forget(key)
        if epoch is not None:
            seal(partition_dir(self.root, key), epoch)

    @_locked
    def held(self) -> dict[str, int]:
        """The partitions this process holds, with the epoch of each (a copy: the capture
        thread lets go of one that was taken over while another thread reads this)."""
        return dict(self.epochs)

    @_locked
    def let_go(self, key: str) -> None:
        """Stop holding ``key`` without sealing it: a newer holder took it over (its epoch
        folder is sealed already, or is about to be), so nothing of it is written any more."""
        self._forget(key)

    def _forget(self, key: str) -> int | None:
        """This process no longer holds ``key``: the epoch it held it under, if any."""
        epoch = self.epochs.pop(key, None)
        self._files.forget(key)
        if epoch is not None and not self.exclusive:
            gone = self.partitions.pop(key, None)
            self.nbytes -= gone.nbytes if gone else 0
            self._ledger.count(gone, -1)
        return epoch

    # -- writing -------------------------------------------------------------------------------

    @_locked
    def append(
        self,
        key: str,
        source: Source,
        table: pa.Table,
        dropped: int = 0,
        *,
        into_reserve: bool = False,
    ) -> None:
        """Write one segment of rows (SPOOL_SCHEMA) and publish it in the index; ``dropped``
        adds to the partition's count of dropped messages in the same index update. With
        ``into_reserve`` (for the gap rows that report drops), a write the storage refuses is
        tried once more after deleting the spool's reserve (``reserve``).

        SpoolWriteError if the storage refuses; the spool is then as it was before the call.
        """
        try:
            self._append(key, source, table, dropped)
        except SpoolWriteError:
            if not (into_reserve and self._reserve.release()):
                raise
            self._append(key, source, table, dropped)
        self._reserve.keep()

    def _append(self, key: str, source: Source, table: pa.Table, dropped: int) -> None:
        index = self.open_partition(key)
        if table.num_rows == 0:
            return
        segment = Segment(index.end, table.num_rows, 0, self.epochs[key])
        self._files.segment(key, segment, source, table)
        segment.at = time.time()
        before = (index.end, index.dropped)
        index.segments.append(segment)  # in place: retention may keep many segments
        index.end, index.dropped = segment.end, index.dropped + dropped
        try:  # a segment file not published is never read, and replaced later
            self._files.append(index, segment)
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

    def state(self, name: str) -> JsonState:
        """A small JSON document kept beside the partitions (discovery's durable state)."""
        return JsonState(os.path.join(self.root, f"{name}.json"))

    def _save(self, index: PartitionIndex) -> None:
        self._files.save(index)

    def _write(self, key: str, name: str, data: bytes) -> None:
        self._files.write(key, name, data)


class Spool(SpoolPartitions):
    """The writer side of a spool folder: the partitions held (``SpoolPartitions``), what Spark
    committed in them, and retention, which deletes committed segments only (``retention``).
    """

    @property
    def committed_nbytes(self) -> int:
        """Bytes of the committed segments in ``partitions`` (what room can be made of)."""
        return self._ledger.nbytes

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
    def truncate(self, key: str, end: int) -> None:
        """Spark committed everything below ``end`` in partition ``key``: record it in the index
        (so that any later holder knows), then apply the retention, which may now delete it."""
        index = self.partitions.get(key)
        if index is not None and min(end, index.end) > index.committed:
            index = self._held(key)
            if index is not None:
                before = index.committed_count()
                index.committed = min(end, index.end)
                self._ledger.committed(index.segments[before : index.committed_count()])
                if not (self._ledger.due() and self._apply_retention(time.time()).get(key)):
                    self._publish(index)  # the commit alone: retention deleted nothing of it
                return
        self.expire()

    @_locked
    def expire(self) -> None:
        """Apply the retention (segments that passed it by age, or the bytes beyond
        ``Retention.nbytes``); cheap when nothing is due. The writer's periodic tick calls it,
        so that retention runs with nothing new written or committed."""
        if self._ledger.due():
            self._apply_retention(time.time())

    @_locked
    def make_room(self) -> None:
        """At the bound: delete committed segments, oldest first, until the spool is
        ``retention.ROOM_MADE_AT_ONCE`` of the bound below it or nothing committed is left."""
        self._delete(self._ledger.room(self.partitions, self.nbytes, self.max_bytes))

    def _apply_retention(self, now: float) -> dict[str, int]:
        """Delete the committed segments that retention lets go; how many went per partition."""
        doomed = self._ledger.expired(self.partitions, now)
        self._delete(doomed)
        return doomed

    def _delete(self, doomed: dict[str, int]) -> None:
        for key, count in doomed.items():
            self._delete_first(key, count)

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
        self._ledger.freed(freed)
        self._files.delete(key, gone, index.segments)

    def _publish(self, index: PartitionIndex) -> None:
        try:
            self._save(index)
        except SpoolWriteError as exc:
            # A full disk cannot take the new index, and only deleting frees space: delete
            # anyway (only committed segments go); the next write of the index publishes it.
            logger.warning("spool: %s; the next write of the index publishes this change", exc)


def _make_folder(root: str) -> None:
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        raise SpoolError(
            f"cannot use {root!r} as a spool folder (option spoolPath): {exc.strerror or exc}"
        ) from None
