"""The writer side of a spool folder: claims partitions, appends segments, truncates.

Each partition has one writer at a time, fenced by epochs (``epochs``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from collections.abc import Callable
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
    INDEX_NAME,
    LEASE_NAME,
    SPOOL_SCHEMA,
    JsonState,
    LeaseLost,
    PartitionIndex,
    PartitionState,
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
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.exclusive = exclusive
        self.executor = executor or process_id()
        _make_folder(root)
        self._lock_file = lock_folder(root, lock_wait, role) if exclusive else None
        self._mutex = threading.RLock()  # capture thread appends while the reader truncates
        self.partitions: dict[str, PartitionIndex] = {}
        self.epochs: dict[str, int] = {}  # partitions this process holds -> its epoch
        self.inherited: dict[str, Lease | None] = {}  # the previous holder of each claimed one
        self._beats: dict[str, int] = {}
        if exclusive:
            self.partitions = load_indexes(root)
        self.nbytes = sum(p.nbytes for p in self.partitions.values())

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
        return {
            key: PartitionState(index.start, index.end, index.retired)
            for key, index in self.partitions.items()
        }

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
        self.inherited[key] = previous if previous and previous.holder else None
        self._beats[key] = 0
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
        if epoch is not None and not self.exclusive:
            self.partitions.pop(key, None)
        return epoch

    # -- writing -------------------------------------------------------------------------------

    def has_room(self, key: str | None = None) -> bool:
        """Whether more of partition ``key`` may be written: the spool is under its bound, or
        ``key`` holds less than its share of the bound (the bound divided among the partitions
        held). So when one peer floods the spool to its bound, its partition is the one that
        drops, not its neighbours; the spool then holds at most the bound plus what the
        partitions under their shares add."""
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
        updated = dataclasses.replace(
            index,
            segments=[*index.segments, segment],
            end=segment.end,
            dropped=index.dropped + dropped,
        )
        self._save(updated)  # a file not in the index is never read, and replaced later
        self.partitions[key] = updated
        self.nbytes += segment.nbytes

    @_locked
    def retire(self, key: str) -> None:
        index = self.partitions.get(key)
        if index is not None and not index.retired and key in self.epochs:
            index.retired = True
            self._save(index)

    @_locked
    def truncate(self, key: str, end: int) -> None:
        """Drop whole segments that end at or before ``end`` (Spark committed them)."""
        index = self.partitions.get(key)
        if index is None:
            return
        keep = [s for s in index.segments if s.end > end]
        gone = index.segments[: len(index.segments) - len(keep)]
        if not gone:
            return
        if key not in self.epochs:
            if not self.exclusive:
                return
            index = self.open_partition(key)
        index.segments = keep
        index.start = keep[0].first if keep else index.end
        try:  # publish first, then delete: a reader never sees a missing file listed
            self._save(index)
        except SpoolWriteError as exc:
            # A full disk cannot take the new index, and only deleting frees space: delete
            # anyway (Spark never reads committed segments again); the next write publishes it.
            logger.warning("spool: %s; deleting the committed segments first", exc)
        self.nbytes -= sum(segment.nbytes for segment in gone)
        _delete_segments(self.root, key, gone, index.segments, self.epochs[key])

    def state(self, name: str) -> JsonState:
        """A small JSON document kept beside the partitions (discovery's durable state)."""
        return JsonState(os.path.join(self.root, f"{name}.json"))

    def _path(self, key: str, name: str) -> str:
        return os.path.join(partition_dir(self.root, key), epoch_name(self.epochs[key]), name)

    def _save(self, index: PartitionIndex) -> None:
        self._write(index.key, INDEX_NAME, index.to_json().encode("utf-8"))

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
