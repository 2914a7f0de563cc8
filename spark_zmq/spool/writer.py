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
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Concatenate, NamedTuple, ParamSpec, TypeVar

import pyarrow as pa

from spark_zmq.log import logger
from spark_zmq.spool.epochs import (
    QUERY,
    claim_epoch,
    lock_folder,
    mark_stopping,
    seal,
)
from spark_zmq.spool.files import EpochFiles, local_storage
from spark_zmq.spool.flushes import NumberedFlushes
from spark_zmq.spool.index import (
    Listing,
    PartitionIndex,
    PartitionState,
    Retention,
    Segment,
    Source,
)
from spark_zmq.spool.layout import (
    FLUSHES,
    LEASE_NAME,
    JsonState,
    LeaseLost,
    SpoolError,
    SpoolWriteError,
    flush_number,
    load_index,
    load_indexes,
    os_cause,
    partition_dir,
    remove_quietly,
)
from spark_zmq.spool.leases import Lease, process_id
from spark_zmq.spool.reserve import Reserve
from spark_zmq.spool.retention import RetentionLedger
from spark_zmq.spool.segments import Part, gap_cause, write_flush_file

P = ParamSpec("P")
R = TypeVar("R")
SP = TypeVar("SP", bound="SpoolPartitions")

#: a holder's flush file older than this was left by a writer that stopped before deleting it
STALE_FLUSH_SECONDS = 600.0


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
        _clear_flushes(root)
        self._lock_file = lock_folder(root, lock_wait, role) if exclusive else None
        self._mutex = threading.RLock()  # capture thread appends while the reader truncates
        self.partitions: dict[str, PartitionIndex] = {}
        self.epochs: dict[str, int] = {}  # partitions this process holds -> its epoch
        self.inherited: dict[str, Lease | None] = {}  # the previous holder of each claimed one
        self._beats: dict[str, int] = {}
        self._ledger = RetentionLedger(self.retention, root)
        #: gap rows this process wrote, by cause (``segments.gap_cause``), for metrics
        self.gap_rows: Counter[str] = Counter()
        #: bytes of the segments this process wrote (a counter: deletions do not lower it)
        self.written_bytes = 0
        #: a capture service's spool: per partition, below what some reader name committed
        #: (beyond what every name did: ``read_by_some``)
        self._read_ahead: dict[str, int] = {}
        self._files = EpochFiles(
            root, self.epochs, self._forget, keep_open=exclusive and local_storage(root)
        )
        self._reserve = Reserve(root)
        self._reserve.keep()
        #: an exclusive writer's flush files, named by number and kept while a segment names
        #: them (``flushes``); None: a holder, whose segments link its flush files
        self._numbered = NumberedFlushes(root) if exclusive else None
        if exclusive:
            self.partitions = load_indexes(root)
        self.nbytes = sum(p.nbytes for p in self.partitions.values())
        for index in self.partitions.values():
            self._ledger.count(index, +1)
        if self._numbered is not None:
            for index in self.partitions.values():
                self._numbered.count(index, +1)
            self._numbered.sweep()

    def stopping(self) -> None:
        """Say that this process is about to let go of the folder (see ``lock_folder``)."""
        if self._lock_file is not None:
            mark_stopping(self._lock_file)

    def close(self) -> None:
        """Let go of every partition held (seal) and of the folder."""
        with self._mutex:
            self.write_commits()
            for key in list(self.epochs):
                self.release(key)
            self._files.close()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    @_locked
    def snapshot(self) -> dict[str, PartitionState]:
        """Every partition's retained range, for planning offsets."""
        return {key: index.state() for key, index in self.partitions.items()}

    @_locked
    def listing(self, key: str, start: int, end: int) -> Listing | None:
        """``key``'s ``Listing`` of [start, end), as published (None: not listed whole)."""
        index = self.partitions.get(key)
        return index.listing(start, end) if index is not None else None

    @_locked
    def segment_count(self) -> int:
        """Segments the spool retains (each a file in its partition's folder)."""
        return sum(len(index.segments) for index in self.partitions.values())

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
        if self._numbered is not None:
            self._numbered.count(old, -1)
            self._numbered.count(index, +1)
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
        self._report(self._files.write_commits([key]))
        epoch = self._forget(key)
        if epoch is not None:
            seal(partition_dir(self.root, key), epoch)

    @_locked
    def write_commits(self) -> None:
        """Write the commits that wait for their partition's next segment (``Spool.truncate``):
        capture calls it after each flush, so that every commit is in the spool within a flush
        interval."""
        self._report(self._files.write_commits())

    @staticmethod
    def _report(failures: dict[str, SpoolError]) -> None:
        """Log the commits that could not be written: a partition taken over is let go already
        (its holder says so), and after a refused write its next one writes index.json whole."""
        for exc in failures.values():
            if not isinstance(exc, LeaseLost):
                logger.warning("spool: %s; the next write of the index publishes this commit", exc)

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
        """``append_all`` of one append: the error, if any, raised."""
        failure = self.append_all([Append(key, source, table, dropped, into_reserve)]).get(key)
        if failure is not None:
            raise failure

    @_locked
    def append_all(self, appends: Sequence[Append]) -> dict[str, SpoolError]:
        """Write the rows of ``appends`` (SPOOL_SCHEMA) in one flush file (``append_rows``), a
        segment per partition and source (the appends of one partition, in their order)."""
        merged = list(_merged(appends))
        if not merged:
            return {}
        tables = [part.table for _, part, _, _ in merged]
        rows = tables[0] if len(tables) == 1 else pa.concat_tables(tables).combine_chunks()
        parts = [
            FlushPart(key, part.source, part.table.num_rows, dropped, into_reserve)
            for key, part, dropped, into_reserve in merged
        ]
        return self.append_rows(rows, parts)

    @_locked
    def append_rows(self, rows: pa.Table, parts: Sequence[FlushPart]) -> dict[str, SpoolError]:
        """Write ``rows`` (SPOOL_SCHEMA), the rows of ``parts`` one after the other, in one
        flush file (``segments``), a segment per part, and publish each in its partition's
        index with its count of dropped messages. A partition whose storage refuses a part
        ``into_reserve`` (the gap rows that report drops) is tried once more after deleting
        the spool's reserve (``reserve``).

        The partitions that could not be written, with why: LeaseLost (taken over, no longer
        held), SpoolWriteError (the storage refused). Such a partition is as it was before
        the call; the others are written."""
        runs = _runs(parts)
        failures = self._append_rows(rows, runs)
        reserve = {part.key for _, part in runs if part.into_reserve}
        retry = {k for k, e in failures.items() if k in reserve and isinstance(e, SpoolWriteError)}
        if retry and self._reserve.release():
            for key in retry:
                del failures[key]
            failures.update(self._append_rows(rows, [run for run in runs if run[1].key in retry]))
        self._reserve.keep()
        return failures

    def _append_rows(
        self, rows: pa.Table, runs: Sequence[tuple[int, FlushPart]]
    ) -> dict[str, SpoolError]:
        """``append_rows`` of the parts in ``runs`` (where each begins in ``rows``), once."""
        failures: dict[str, SpoolError] = {}
        kept: list[tuple[int, FlushPart]] = []
        for begin, part in runs:
            if part.key in failures:
                continue
            try:
                self.open_partition(part.key)
            except SpoolError as exc:
                failures[part.key] = exc
                continue
            if part.rows:
                kept.append((begin, part))
        if not kept:
            return failures
        if sum(part.rows for _, part in kept) != rows.num_rows:  # (all of them, in order)
            rows = pa.concat_tables([rows.slice(begin, part.rows) for begin, part in kept])
        number, flush_file = 0, os.path.join(self.root, FLUSHES, f"{uuid.uuid4().hex}.arrow")
        if self._numbered is not None:
            number, flush_file = self._numbered.next()
        try:
            shares = write_flush_file(flush_file, rows, [(p.source, p.rows) for _, p in kept])
        except OSError as exc:
            keys = sorted({part.key for _, part in kept})
            error = SpoolWriteError(
                f"cannot write {flush_file} (spool {self.root}, {_named(keys)}): {os_cause(exc)}"
            )
            return failures | {part.key: error for _, part in kept}
        if self._numbered is None:
            try:
                self._publish_all(rows, kept, (flush_file, 0), shares, failures)
            finally:
                remove_quietly(flush_file)  # the segments link it
        else:  # (kept if this raises: a segment may name it; swept at the next start if not)
            self._publish_all(rows, kept, (flush_file, number), shares, failures)
            self._numbered.written(number)
        return failures

    def _publish_all(
        self,
        rows: pa.Table,
        kept: list[tuple[int, FlushPart]],
        flush_file: tuple[str, int],
        shares: list[int],
        failures: dict[str, SpoolError],
    ) -> None:
        """Publish a segment for each part of the flush file ``flush_file`` (its path, and
        its number if it is kept by number: ``flushes``), whose rows are ``rows``; what fails
        goes in ``failures``."""
        written_at, begin = time.time(), 0
        path, flush = flush_file
        faults = rows.column("fault")
        counting = faults.null_count < len(faults)  # gap rows to count by cause (rare)
        for number, ((_, part), nbytes) in enumerate(zip(kept, shares, strict=True)):
            first, begin = begin, begin + part.rows
            if part.key in failures:
                continue  # an earlier part of it failed: offsets would not go on
            index = self.partitions[part.key]
            epoch = self.epochs[part.key]
            segment = Segment(index.end, part.rows, nbytes, epoch, written_at, number, flush)
            own = _PartRows(part.source, rows, first, part.rows)
            try:
                self._publish_segment(index, segment, path, own, part.dropped)
            except SpoolError as exc:
                failures[part.key] = exc
            else:
                if self._numbered is not None:
                    self._numbered.named(flush)
                if counting:
                    self._count_gap_rows(rows.slice(first, part.rows))

    def _count_gap_rows(self, table: pa.Table) -> None:
        """Count the gap rows of ``table`` by cause (``gap_rows``)."""
        faults = table.column("fault")
        if faults.null_count < len(faults):
            for text in faults.drop_null().to_pylist():
                self.gap_rows[gap_cause(text)] += 1

    def _publish_segment(
        self,
        index: PartitionIndex,
        segment: Segment,
        flush_file: str,
        part: _PartRows,
        dropped: int,
    ) -> None:
        """Link ``segment``'s file and publish it at the end of ``index``, with ``dropped``
        more messages dropped."""
        self._files.segment(index.key, segment, flush_file, part.part)
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
        self.written_bytes += segment.nbytes

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
        if self.nbytes >= self.max_bytes and (self.committed_nbytes or self._read_ahead):
            self.make_room()
        if self.nbytes < self.max_bytes or key is None:
            return self.nbytes < self.max_bytes
        index = self.partitions.get(key)
        return index is None or index.nbytes < self.max_bytes // max(1, len(self.partitions))

    @_locked
    def truncate(self, key: str, end: int) -> None:
        """Spark committed everything below ``end`` in partition ``key``: record it in the index
        (so that any later holder knows), then apply the retention, which may now delete it.

        The line that records it goes in the spool with the partition's next segment line, in
        one write, or after capture's next flush (``write_commits``): within a flush interval.
        A crash in between loses only that mark: the query's checkpoint holds its offsets, the
        next commit writes a later one, and retention keeps those segments meanwhile. A retired
        partition's is written at once: read to its end, it leaves the query's offsets, and a
        restarted query finds where it stands in its index alone."""
        index = self.partitions.get(key)
        if index is not None and min(end, index.end) > index.committed:
            index = self._held(key)
            if index is not None:
                before = index.committed_count()
                index.committed = min(end, index.end)
                self._ledger.committed(index.segments, before, index.committed_count())
                if not (self._ledger.due() and self._apply_retention(time.time()).get(key)):
                    self._publish(index, commit=True)  # retention deleted nothing of it
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
        ``retention.ROOM_MADE_AT_ONCE`` of the bound below it or nothing committed is left;
        then, in a capture service's spool, segments that some reader name committed
        (``read_by_some``)."""
        self._delete(self._ledger.room(self.partitions, self.nbytes, self.max_bytes))
        if self._read_ahead:
            doomed = self._ledger.room_read_ahead(
                self.partitions, self._read_ahead, self.nbytes, self.max_bytes
            )
            self._delete(doomed)
            self._read_ahead = {
                key: end
                for key, end in self._read_ahead.items()
                if key in self.partitions and end > self.partitions[key].start
            }

    @_locked
    def read_by_some(self, ends: dict[str, int]) -> None:
        """A capture service's spool, whose reader names commit each on their own: some name
        committed everything below ``ends`` (``truncate`` gets what every name committed).
        At the bound, once nothing that every name committed is left, these segments go before
        a new message is dropped (``make_room``): the names behind get a gap row for them, the
        names ahead lose nothing."""
        self._read_ahead = {
            key: end
            for key, end in ends.items()
            if key in self.partitions and end > self.partitions[key].committed
        }

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
        """Delete the first ``count`` segments of partition ``key`` (committed, or, at the
        bound of a capture service's spool, committed by some reader name: ``committed``
        then moves up to the new start, since what is gone cannot be read)."""
        index = self._held(key)
        if index is None:
            return
        before = index.nbytes
        gone = index.segments.take_first(count)
        freed = before - index.nbytes  # (the segments keep the sum of their sizes)
        index.start = index.segments[0].first if index.segments else index.end
        committed_freed = sum(s.nbytes for s in gone if s.end <= index.committed)
        index.committed = max(index.committed, index.start)
        self._publish(index)  # publish first, then delete: a listed file is there or retained
        self.nbytes -= freed
        self._ledger.freed(committed_freed)
        self._files.delete(key, gone, index.segments)
        if self._numbered is not None:
            self._numbered.release(gone)

    def _publish(self, index: PartitionIndex, commit: bool = False) -> None:
        """Publish ``index`` (``commit``: only its ``committed`` changed)."""
        try:
            if commit:
                self._files.commit(index, now=index.retired)
            else:
                self._save(index)
        except SpoolWriteError as exc:
            # A full disk cannot take the new index, and only deleting frees space: delete
            # anyway (only committed segments go); the next write of the index publishes it.
            logger.warning("spool: %s; the next write of the index publishes this change", exc)


class Append(NamedTuple):
    """Rows for one partition (``SpoolPartitions.append_all``)."""

    key: str
    source: Source
    table: pa.Table  # SPOOL_SCHEMA
    dropped: int = 0  # messages dropped before these rows, which they report
    into_reserve: bool = False  # gap rows that report drops: into the reserve if need be


class FlushPart(NamedTuple):
    """One partition's rows in a flush's table, which holds those of its parts one after the
    other (``SpoolPartitions.append_rows``)."""

    key: str
    source: Source
    rows: int
    dropped: int = 0  # messages dropped before these rows, which they report
    into_reserve: bool = False  # gap rows that report drops: into the reserve if need be


class _PartRows(NamedTuple):
    """A part's rows in the table of a flush file: made a table of their own only where the
    storage has no hard links (``files.EpochFiles.segment``)."""

    source: Source
    table: pa.Table  # the flush's
    begin: int
    length: int

    def part(self) -> Part:
        return Part(self.source, self.table.slice(self.begin, self.length))


def _runs(parts: Sequence[FlushPart]) -> list[tuple[int, FlushPart]]:
    """Each part with the row of the flush's table where it begins."""
    runs, begin = [], 0
    for part in parts:
        runs.append((begin, part))
        begin += part.rows
    return runs


def _merged(appends: Sequence[Append]) -> Iterator[tuple[str, Part, int, bool]]:
    """(partition, rows, messages dropped, into the reserve) of ``appends``, partition by
    partition in the order they first come, the rows of consecutive appends of one partition
    and source together."""
    by_key: dict[str, list[Append]] = {}
    for append in appends:
        by_key.setdefault(append.key, []).append(append)
    for key, mine in by_key.items():
        runs = [[mine[0]]]
        for append in mine[1:]:
            if append.source == runs[-1][0].source:
                runs[-1].append(append)
            else:
                runs.append([append])
        for run in runs:
            tables = [a.table for a in run]
            rows = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
            dropped = sum(a.dropped for a in run)
            yield key, Part(run[0].source, rows), dropped, any(a.into_reserve for a in run)


#: partitions a message names (the others are counted)
NAMED_PARTITIONS = 3


def _named(keys: list[str]) -> str:
    """``partition K``, or ``partitions K1, K2, K3 and 7 more``."""
    if len(keys) == 1:
        return f"partition {keys[0]}"
    more = len(keys) - NAMED_PARTITIONS
    return f"partitions {', '.join(keys[:NAMED_PARTITIONS])}" + (f" and {more} more" * (more > 0))


def _clear_flushes(root: str) -> None:
    """The folder of flush files, made, without what was left there by a writer that stopped
    between writing one and deleting it (older than STALE_FLUSH_SECONDS: writers of other
    processes share the folder). Numbered flush files, which segments name, are an exclusive
    writer's to delete (``flushes``)."""
    folder = os.path.join(root, FLUSHES)
    _make_folder(folder)
    now = time.time()
    for entry in os.scandir(folder):
        if flush_number(entry.name) is not None:
            continue  # (no stat for each of an exclusive writer's thousands of files)
        try:
            if now - entry.stat().st_mtime > STALE_FLUSH_SECONDS:
                os.remove(entry.path)
        except OSError:
            continue


def _make_folder(root: str) -> None:
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        raise SpoolError(
            f"cannot use {root!r} as a spool folder (option spoolPath): {exc.strerror or exc}"
        ) from None
