"""Durability: an append-only, segmented log per partition, re-readable by offset range.

Layout of a spool folder::

    LOCK                         held (flock) by the capture that writes this spool
    <quoted partition key>/
        index.json               replaced atomically after every change
        00000000000000000000.arrow   one Arrow IPC file per flush, named by its first offset
        ...

Offsets are per-partition sequence numbers: a message's offset never changes, so a micro-batch
replayed after a failure reads the same rows. A segment records the endpoint it came from and that
endpoint's metadata (schema metadata), so rows decode the same way whenever they are read.
``truncate(end)`` deletes whole segments below ``end`` once Spark has committed them.

One writer per spool (the capture), any number of readers (``read_range`` on executors): readers
only open the index and immutable segment files, so they need no lock.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import json
import os
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Iterator, Mapping, NamedTuple

import pyarrow as pa


SPOOL_SCHEMA = pa.schema([
    pa.field("received_at", pa.timestamp("us", tz="UTC")),
    pa.field("frames", pa.list_(pa.binary())),
    # A fault that capture itself observed (a gap: spool full, connection dropped); frames empty.
    pa.field("fault", pa.string()),
])

INDEX_NAME = "index.json"
LOCK_NAME = "LOCK"


class SpoolError(RuntimeError):
    """The spool folder is unusable (locked by another query, missing a range, corrupt)."""


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
            "segments": [[s.first, s.count, s.nbytes] for s in self.segments],
        })

    @classmethod
    def from_json(cls, text: str) -> "PartitionIndex":
        obj = json.loads(text)
        return cls(obj["key"], obj["start"], obj["end"],
                   [Segment(*s) for s in obj["segments"]], obj["dropped"], obj["retired"])

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.segments)


def partition_dir(root: str, key: str) -> str:
    return os.path.join(root, urllib.parse.quote(key, safe=""))


def load_index(root: str, key: str) -> PartitionIndex | None:
    try:
        with open(os.path.join(partition_dir(root, key), INDEX_NAME), encoding="utf-8") as f:
            return PartitionIndex.from_json(f.read())
    except FileNotFoundError:
        return None


def _locked(method):
    """Run a Spool method under its mutex."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._mutex:
            return method(self, *args, **kwargs)
    return wrapper


def _write_atomically(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class Spool:
    """The writer side of a spool folder; used by exactly one capture at a time."""

    def __init__(self, root: str, max_bytes: int, lock_wait: float = 15.0) -> None:
        self.root = root
        self.max_bytes = max_bytes
        try:
            os.makedirs(root, exist_ok=True)
        except OSError as exc:
            raise SpoolError(f"cannot use {root!r} as a spool folder (option spoolPath): "
                             f"{exc.strerror or exc}") from None
        self._lock_file = self._take_lock(lock_wait)
        self._mutex = threading.RLock()  # capture thread appends while the reader truncates
        self.partitions: dict[str, PartitionIndex] = {}
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name, INDEX_NAME)
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    index = PartitionIndex.from_json(f.read())
                self.partitions[index.key] = index
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
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    @_locked
    def snapshot(self) -> dict[str, PartitionState]:
        """Every partition's retained range, for planning offsets."""
        return {key: PartitionState(index.start, index.end, index.retired)
                for key, index in self.partitions.items()}

    # -- writing -------------------------------------------------------------------------------

    @_locked
    def open_partition(self, key: str) -> PartitionIndex:
        """The partition's index, created if new; a retired partition that comes back reopens."""
        index = self.partitions.get(key)
        if index is None:
            index = PartitionIndex(key)
            os.makedirs(partition_dir(self.root, key), exist_ok=True)
            self.partitions[key] = index
            self._save(index)
        elif index.retired:
            index.retired = False
            self._save(index)
        return index

    def has_room(self) -> bool:
        return self.nbytes < self.max_bytes

    @_locked
    def append(self, key: str, source: Source, table: pa.Table) -> None:
        """Write one segment of rows (SPOOL_SCHEMA) and publish it in the index."""
        index = self.open_partition(key)
        if table.num_rows == 0:
            return
        segment = Segment(index.end, table.num_rows, 0)
        path = os.path.join(partition_dir(self.root, key), segment.file_name)
        schema = SPOOL_SCHEMA.with_metadata({"source": source.to_json()})
        tmp = path + ".tmp"
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            writer.write_table(table.replace_schema_metadata(schema.metadata))
        os.replace(tmp, path)
        segment.nbytes = os.path.getsize(path)
        index.segments.append(segment)
        index.end = segment.end
        self.nbytes += segment.nbytes
        self._save(index)

    @_locked
    def count_dropped(self, key: str, count: int) -> None:
        index = self.open_partition(key)
        index.dropped += count
        self._save(index)

    @_locked
    def retire(self, key: str) -> None:
        index = self.partitions.get(key)
        if index is not None and not index.retired:
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
        index.segments = keep
        index.start = keep[0].first if keep else index.end
        self._save(index)  # publish first, then delete: a reader never sees a missing file listed
        for segment in gone:
            self.nbytes -= segment.nbytes
            try:
                os.remove(os.path.join(partition_dir(self.root, key), segment.file_name))
            except FileNotFoundError:
                pass

    def state(self, name: str) -> "JsonState":
        """A small JSON document kept beside the partitions (discovery's durable state)."""
        return JsonState(os.path.join(self.root, f"{name}.json"))

    def _save(self, index: PartitionIndex) -> None:
        path = os.path.join(partition_dir(self.root, index.key), INDEX_NAME)
        _write_atomically(path, index.to_json().encode("utf-8"))


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

def read_range(root: str, key: str, start: int, end: int) -> Iterator[tuple[int, Source, pa.Table]]:
    """Yield (first offset, source, rows) for offsets [start, end) of one partition, in order."""
    index = load_index(root, key)
    if index is None or start < index.start or end > index.end:
        held = "nothing" if index is None else f"[{index.start}, {index.end})"
        raise SpoolError(
            f"spool {root} cannot serve offsets [{start}, {end}) of partition {key!r}: it holds "
            f"{held}. The spool was deleted or belongs to another query; restore it or start "
            f"the query with a new checkpoint")
    folder = partition_dir(root, key)
    for segment in index.segments:
        if segment.end <= start or segment.first >= end:
            continue
        with pa.OSFile(os.path.join(folder, segment.file_name), "rb") as source_file:
            reader = pa.ipc.open_file(source_file)
            source = Source.from_json(reader.schema.metadata[b"source"])
            table = reader.read_all()
        lo = max(start, segment.first) - segment.first
        hi = min(end, segment.end) - segment.first
        yield segment.first + lo, source, table.slice(lo, hi - lo)
