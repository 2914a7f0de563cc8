"""Durability: an append-only, segmented log per partition, re-readable by offset range.

Layout of a spool folder::

    LOCK                         held (flock) by a capture on the driver (capture=driver)
    discovery.json ...           small JSON documents of the driver (see ``state``)
    <quoted partition key>/
        e00000003.sealed/        an earlier holder's folder: index.json, lease.json, segments
        e00000004/               the current holder's folder
            index.json           replaced atomically after every change
            lease.json           the holder and its heartbeat
            00000000000000000000.arrow   one Arrow IPC file per flush, named by its first offset

Offsets are per-partition sequence numbers: a message's offset never changes, so a micro-batch
replayed after a failure reads the same rows. A segment records the endpoint it came from and that
endpoint's metadata (schema metadata), so rows decode the same way whenever they are read.
``truncate(end)`` deletes whole segments below ``end`` once Spark has committed them.

**One writer per partition, fenced by epochs.** A writer (a capture on the driver, or a holder
process on an executor) owns a partition by *claiming* the next epoch: ``mkdir e<n+1>``, which
exactly one claimant wins, also on a shared filesystem. It then *seals* the folders of earlier
epochs by renaming them to ``e<n>.sealed``, reads the sealed index (final from then on) and goes
on from its end. Every write of a holder goes through a path inside its own epoch folder, so once
that folder is sealed the writes fail (``LeaseLost``): a holder that was paused and resumed after
a takeover cannot append, even if it never noticed it lost the lease. A holder that stops cleanly
seals its own folder, which marks the partition free.

Readers (offset planning, ``read_range`` on executors) take the index of the highest epoch that
has one and look a segment up in its epoch's folder, sealed or not; they need no lock.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import functools
import json
import os
import re
import shutil
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Iterator, Mapping, NamedTuple

import pyarrow as pa

from .log import logger

SPOOL_SCHEMA = pa.schema([
    pa.field("received_at", pa.timestamp("us", tz="UTC")),
    pa.field("frames", pa.list_(pa.binary())),
    # A fault that capture itself observed (a gap: spool full, connection dropped); frames empty.
    pa.field("fault", pa.string()),
])

#: rows per record batch in a segment file
BATCH_ROWS = 4096
#: what an Arrow IPC file starts with, before the IPC stream it holds
IPC_FILE_MAGIC = b"ARROW1\0\0"
INDEX_NAME = "index.json"
LEASE_NAME = "lease.json"
LOCK_NAME = "LOCK"
SEALED = ".sealed"
_EPOCH_DIR = re.compile(r"e(\d{8,})(\.sealed)?")


class SpoolError(RuntimeError):
    """The spool folder is unusable (locked by another query, missing a range, corrupt)."""


class LeaseLost(SpoolError):
    """Another writer claimed the partition: this one may not write to it any more."""


class SpoolWriteError(SpoolError):
    """The spool's storage refused a write (full, read-only, I/O error). Nothing already in the
    spool is changed by the failed write: segments and indexes are replaced atomically."""


@dataclass(frozen=True)
class Source:
    """Where a segment's messages came from: the zmq endpoint and the discovery metadata."""

    endpoint: str
    metadata: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"endpoint": self.endpoint, "metadata": dict(self.metadata)})

    @classmethod
    def from_json(cls, data: bytes | str) -> "Source":
        obj = json.loads(data)
        return cls(obj["endpoint"], obj["metadata"])


class PartitionState(NamedTuple):
    start: int     # first offset still retained
    end: int       # next offset to be written
    retired: bool  # the endpoint left


@dataclass
class Segment:
    first: int
    count: int
    nbytes: int
    epoch: int = 0   # the epoch whose folder holds the file

    @property
    def end(self) -> int:
        return self.first + self.count

    @property
    def file_name(self) -> str:
        return f"{self.first:020d}.arrow"


@dataclass
class PartitionIndex:
    """What index.json holds for one partition."""

    key: str
    start: int = 0            # first offset still retained
    end: int = 0              # next offset to be written
    segments: list[Segment] = field(default_factory=list)
    dropped: int = 0          # messages dropped at the spool bound, ever
    retired: bool = False     # the endpoint left; no more appends expected

    def to_json(self) -> str:
        return json.dumps({
            "key": self.key, "start": self.start, "end": self.end, "dropped": self.dropped,
            "retired": self.retired,
            "segments": [[s.first, s.count, s.nbytes, s.epoch] for s in self.segments],
        })

    @classmethod
    def from_json(cls, text: str) -> "PartitionIndex":
        obj = json.loads(text)
        return cls(obj["key"], obj["start"], obj["end"],
                   [Segment(*s) for s in obj["segments"]], obj["dropped"], obj["retired"])

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.segments)


@dataclass(frozen=True)
class Lease:
    """Who holds a partition: what its holder writes into ``lease.json`` at every heartbeat."""

    epoch: int
    holder: str            # host/pid of the writing process
    executor: str          # host/pid of the JVM the holder serves (driver or executor)
    beat: int              # heartbeat counter
    at: float              # wall-clock time of the last heartbeat
    sealed: bool = False   # the holder let go (or was taken over): the partition is free
    failure: str = ""      # why the holder stopped, if capture failed

    def to_json(self) -> str:
        return json.dumps({"holder": self.holder, "executor": self.executor, "beat": self.beat,
                           "at": self.at, "failure": self.failure})


def partition_dir(root: str, key: str) -> str:
    return os.path.join(root, urllib.parse.quote(key, safe=""))


def partition_keys(root: str) -> list[str]:
    """Keys of every partition the spool folder holds."""
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    return [urllib.parse.unquote(n) for n in names
            if os.path.isdir(os.path.join(root, n)) and epochs(os.path.join(root, n))]


def epochs(folder: str) -> list[tuple[int, bool]]:
    """(epoch, sealed) of every epoch folder of a partition folder, oldest first."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        match = _EPOCH_DIR.fullmatch(name)
        if match:
            found.append((int(match.group(1)), bool(match.group(2))))
    return sorted(found)


def _epoch_name(epoch: int) -> str:
    return f"e{epoch:08d}"


def _read_in_epoch(folder: str, epoch: int, name: str) -> tuple[str, bool] | None:
    """(text, sealed) of a file of an epoch folder, found whether or not it has been sealed
    meanwhile (a holder seals by renaming its folder); None if it has no such file."""
    base = os.path.join(folder, _epoch_name(epoch))
    for path, sealed in ((os.path.join(base, name), False),
                         (os.path.join(base + SEALED, name), True)):
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(), sealed
        except FileNotFoundError:
            continue
    return None


def load_index(root: str, key: str) -> PartitionIndex | None:
    """The partition's index: the one of the highest epoch that has written one."""
    folder = partition_dir(root, key)
    for epoch, _ in reversed(epochs(folder)):
        found = _read_in_epoch(folder, epoch, INDEX_NAME)
        if found is not None:
            return PartitionIndex.from_json(found[0])
    return None


def load_lease(root: str, key: str) -> Lease | None:
    """The lease of the partition's highest epoch; None if nobody ever claimed it."""
    folder = partition_dir(root, key)
    claimed = epochs(folder)
    if not claimed:
        return None
    return _lease_of(folder, *claimed[-1])


def _lease_of(folder: str, epoch: int, sealed: bool) -> Lease:
    found = _read_in_epoch(folder, epoch, LEASE_NAME)
    if found is None:   # claimed a moment ago; its lease is being written
        return Lease(epoch, "", "", 0, 0.0, sealed)
    obj = json.loads(found[0])
    return Lease(epoch, obj["holder"], obj["executor"], obj["beat"], obj["at"],
                 sealed or found[1], obj.get("failure", ""))


def segment_paths(root: str, key: str, segment: Segment) -> tuple[str, str]:
    """Where a segment's file is: in its epoch folder, or in that folder once sealed."""
    base = os.path.join(partition_dir(root, key), _epoch_name(segment.epoch))
    return os.path.join(base, segment.file_name), os.path.join(base + SEALED, segment.file_name)


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
    raise SpoolError(f"spool segment {paths[0]} of partition {key!r} is missing, sealed or not; "
                     f"the spool was changed by something other than spark_zmq")


def _recover_segment(path: str, segment: Segment) -> tuple[Source, pa.Table]:
    """A damaged segment file (cut short by a crash of its host, or by a full disk): its rows
    up to the damage, then one fault row per message lost, so that every offset still names one
    row and a replayed micro-batch reads the same rows."""
    with open(path, "rb") as f:
        data = f.read()
    source, batches = Source("(unknown: damaged spool segment)", {}), []
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(data[len(IPC_FILE_MAGIC):]))
        source = Source.from_json(reader.schema.metadata[b"source"])
        while True:
            batches.append(reader.read_next_batch())
    except (StopIteration, pa.ArrowInvalid, OSError, KeyError, ValueError, TypeError):
        pass
    rows = pa.Table.from_batches(batches, SPOOL_SCHEMA).slice(0, segment.count)
    lost = segment.count - rows.num_rows
    text = (f"gap: {lost} messages at offsets [{segment.first + rows.num_rows}, {segment.end}) "
            f"are lost: spool segment {path} is damaged (cut short by a crash or a full disk)")
    logger.warning("spool: %s; %d rows of it recovered", text, rows.num_rows)
    when = int(os.path.getmtime(path) * 1e6)
    faults = pa.table({"received_at": pa.array([when] * lost, pa.int64()).cast(
                           SPOOL_SCHEMA.field("received_at").type),
                       "frames": pa.array([[]] * lost, SPOOL_SCHEMA.field("frames").type),
                       "fault": pa.array([text] * lost, pa.string())}, schema=SPOOL_SCHEMA)
    return source, pa.concat_tables([rows, faults])


def process_id() -> str:
    """host/pid of this process: how holders name themselves in leases."""
    return f"{socket.gethostname()}/{os.getpid()}"


def _locked(method):
    """Run a Spool method under its mutex."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._mutex:
            return method(self, *args, **kwargs)
    return wrapper


def _write_atomically(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        _remove_quietly(tmp)
        raise


def _os_cause(exc: OSError) -> str:
    """``No space left on device`` rather than pyarrow's ``Error writing bytes to file. Detail:
    [errno 28] No space left on device``."""
    number = exc.errno
    if number is None:
        match = re.search(r"\[errno (\d+)\]", str(exc))
        number = int(match.group(1)) if match else None
    return os.strerror(number) if number else str(exc)


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


class Spool:
    """The writer side of a spool folder.

    ``exclusive`` (capture on the driver): one process writes every partition of the folder; a
    LOCK file keeps a second query off it, and a partition is claimed from whoever had it
    before. Not exclusive (a holder on an executor): the process writes only the partitions it
    claims with ``open_partition(key, expect_epoch=...)``.
    """

    def __init__(self, root: str, max_bytes: int, lock_wait: float = 15.0,
                 exclusive: bool = True, executor: str = "") -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.exclusive = exclusive
        self.executor = executor or process_id()
        try:
            os.makedirs(root, exist_ok=True)
        except OSError as exc:
            raise SpoolError(f"cannot use {root!r} as a spool folder (option spoolPath): "
                             f"{exc.strerror or exc}") from None
        self._lock_file = self._take_lock(lock_wait) if exclusive else None
        self._mutex = threading.RLock()  # capture thread appends while the reader truncates
        self.partitions: dict[str, PartitionIndex] = {}
        self.epochs: dict[str, int] = {}    # partitions this process holds -> its epoch
        self.inherited: dict[str, Lease | None] = {}  # the previous holder of each claimed one
        self._beats: dict[str, int] = {}
        if exclusive:
            for key in partition_keys(root):
                index = load_index(root, key)
                if index is not None:
                    self.partitions[key] = index
        self.nbytes = sum(p.nbytes for p in self.partitions.values())

    def _take_lock(self, wait: float):
        """Exclusive use of the folder. Waits a little: a query restarted in the same session
        may start before the process of its previous run has released the lock."""
        lock = open(os.path.join(self.root, LOCK_NAME), "a+")
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    lock.close()
                    raise
                if time.monotonic() > deadline:
                    lock.close()
                    raise SpoolError(
                        f"spool folder {self.root} is in use by another running query; give "
                        f"each query its own option spoolPath") from None
                time.sleep(0.2)
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        return lock

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
        return {key: PartitionState(index.start, index.end, index.retired)
                for key, index in self.partitions.items()}

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
        folder = partition_dir(self.root, key)
        os.makedirs(folder, exist_ok=True)
        claimed = epochs(folder)
        current = claimed[-1][0] if claimed else 0
        if expect_epoch is not None and current != expect_epoch:
            raise LeaseLost(f"partition {key!r} is held by epoch {current}, not {expect_epoch}")
        mine = current + 1
        try:
            os.mkdir(os.path.join(folder, _epoch_name(mine)))
        except FileExistsError:
            raise LeaseLost(f"partition {key!r}: epoch {mine} was claimed by another holder "
                            f"first") from None
        for epoch, sealed in claimed:
            if not sealed:
                self._seal(folder, epoch)
        previous = _lease_of(folder, current, True) if claimed else None
        index = load_index(self.root, key) or PartitionIndex(key)
        old = self.partitions.get(key)
        self.nbytes += index.nbytes - (old.nbytes if old else 0)
        self.partitions[key] = index
        self.epochs[key] = mine
        self.inherited[key] = previous if previous and previous.holder else None
        self._beats[key] = 0
        self._save(index)
        self.heartbeat(key)

    @staticmethod
    def _seal(folder: str, epoch: int) -> None:
        base = os.path.join(folder, _epoch_name(epoch))
        try:
            os.rename(base, base + SEALED)
        except FileNotFoundError:   # sealed by its holder meanwhile
            pass

    @_locked
    def heartbeat(self, key: str, failure: str = "") -> None:
        """Renew the lease of a held partition; LeaseLost if it was taken over."""
        if key not in self.epochs:
            raise LeaseLost(f"partition {key!r} is not held by this process")
        self._beats[key] += 1
        lease = Lease(self.epochs[key], process_id(), self.executor, self._beats[key],
                      time.time(), failure=failure)
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
        epoch = self.epochs.pop(key, None)
        if epoch is not None:
            self._seal(partition_dir(self.root, key), epoch)
            if not self.exclusive:
                self.partitions.pop(key, None)

    # -- writing -------------------------------------------------------------------------------

    def has_room(self, key: str | None = None) -> bool:
        """Whether more of partition ``key`` may be written: the spool is under its bound, or
        ``key`` holds less than its share of the bound (the bound divided among the partitions
        held). So when one peer floods the spool to its bound, its partition is the one that
        drops, not its neighbours; the spool then holds at most the bound plus what the
        partitions under their shares add."""
        if self.nbytes < self.max_bytes:
            return True
        if key is None:
            return False
        index = self.partitions.get(key)
        share = self.max_bytes // max(1, len(self.partitions))
        return index is None or index.nbytes < share

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
        schema = SPOOL_SCHEMA.with_metadata({"source": source.to_json()})
        tmp = path + ".tmp"
        try:
            with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
                # batches of BATCH_ROWS: a file cut short keeps its earlier batches readable
                writer.write_table(table.replace_schema_metadata(schema.metadata), BATCH_ROWS)
            os.replace(tmp, path)
            segment.nbytes = os.path.getsize(path)
        except OSError as exc:
            _remove_quietly(tmp)
            raise self._write_failed(key, path, exc) from None
        updated = dataclasses.replace(index, segments=[*index.segments, segment],
                                      end=segment.end, dropped=index.dropped + dropped)
        self._save(updated)     # a file not in the index is never read, and replaced later
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
        gone = index.segments[:len(index.segments) - len(keep)]
        if not gone:
            return
        if key not in self.epochs:
            if not self.exclusive:
                return
            index = self.open_partition(key)
        index.segments = keep
        index.start = keep[0].first if keep else index.end
        try:   # publish first, then delete: a reader never sees a missing file listed
            self._save(index)
        except SpoolWriteError as exc:
            # A full disk cannot take the new index, and only deleting frees space: delete
            # anyway (Spark never reads committed segments again); the next write publishes it.
            logger.warning("spool: %s; deleting the committed segments first", exc)
        for segment in gone:
            self.nbytes -= segment.nbytes
            for path in segment_paths(self.root, key, segment):
                try:
                    os.remove(path)
                    break
                except FileNotFoundError:
                    continue
        self._remove_unused_epochs(key, index)

    def _remove_unused_epochs(self, key: str, index: PartitionIndex) -> None:
        """Sealed folders of earlier epochs whose segments are all committed."""
        folder = partition_dir(self.root, key)
        used = {s.epoch for s in index.segments} | {self.epochs[key]}
        for epoch, sealed in epochs(folder):
            if sealed and epoch not in used and epoch < self.epochs[key]:
                shutil.rmtree(os.path.join(folder, _epoch_name(epoch) + SEALED),
                              ignore_errors=True)

    def state(self, name: str) -> "JsonState":
        """A small JSON document kept beside the partitions (discovery's durable state)."""
        return JsonState(os.path.join(self.root, f"{name}.json"))

    def _path(self, key: str, name: str) -> str:
        return os.path.join(partition_dir(self.root, key), _epoch_name(self.epochs[key]), name)

    def _save(self, index: PartitionIndex) -> None:
        self._write(index.key, INDEX_NAME, index.to_json().encode("utf-8"))

    def _write(self, key: str, name: str, data: bytes) -> None:
        path = self._path(key, name)
        try:
            _write_atomically(path, data)
        except OSError as exc:
            raise self._write_failed(key, path, exc) from None

    def _write_failed(self, key: str, path: str, exc: OSError) -> SpoolError:
        """LeaseLost if the epoch folder was sealed (someone claimed the partition), else a
        SpoolWriteError naming the file, the partition and the cause."""
        mine = self.epochs.get(key, 0)
        newer = [e for e, _ in epochs(partition_dir(self.root, key)) if e > mine]
        if isinstance(exc, FileNotFoundError) and newer:
            epoch = self.epochs.pop(key, None)
            if not self.exclusive:
                self.partitions.pop(key, None)
            return LeaseLost(f"partition {key!r}: epoch {epoch} was taken over by a newer "
                             f"holder; this process may no longer write to it")
        return SpoolWriteError(f"cannot write {path} (spool {self.root}, partition {key}): "
                               f"{_os_cause(exc)}")


class JsonState:
    """One JSON document in a spool folder, replaced atomically on every save."""

    def __init__(self, path: str) -> None:
        self.path = path

    def load(self) -> dict | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise SpoolError(f"{self.path} is not valid JSON ({exc}); remove it to start over")

    def save(self, data: dict) -> None:
        _write_atomically(self.path, json.dumps(data, indent=1, sort_keys=True).encode())


# -- reading (any process) ---------------------------------------------------------------------

def read_snapshot(root: str) -> dict[str, PartitionState]:
    """Every partition's retained range, read from the folder (a process that writes none)."""
    found = {}
    for key in partition_keys(root):
        index = load_index(root, key)
        if index is not None:
            found[key] = PartitionState(index.start, index.end, index.retired)
    return found


def read_range(root: str, key: str, start: int, end: int) -> Iterator[tuple[int, Source, pa.Table]]:
    """Yield (first offset, source, rows) for offsets [start, end) of one partition, in order."""
    index = load_index(root, key)
    if index is None or start < index.start or end > index.end:
        held = "nothing" if index is None else f"[{index.start}, {index.end})"
        raise SpoolError(
            f"spool {root} cannot serve offsets [{start}, {end}) of partition {key!r}: it holds "
            f"{held}. The spool was deleted or belongs to another query; restore it or start "
            f"the query with a new checkpoint")
    for segment in index.segments:
        if segment.end <= start or segment.first >= end:
            continue
        source, table = _read_segment(root, key, segment)
        lo = max(start, segment.first) - segment.first
        hi = min(end, segment.end) - segment.first
        yield segment.first + lo, source, table.slice(lo, hi - lo)
