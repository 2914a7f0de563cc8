"""Durability: an append-only, segmented log per partition, re-readable by offset range.

Layout of a spool folder::

    LOCK                         held (flock) by a capture on the driver (capture=driver)
    discovery.json ...           small JSON documents of the driver (see ``state``)
    alive.json                   capture on the driver: when it was last known alive, and the
                                 gap rows it still owes (``downtime``); about once a second
    <quoted partition key>/      (``folder_name``: never a path of its own, never too long)
        KEY                      the key, where the folder's name is a digest of it
        e00000003.sealed/        an earlier holder's folder: index.json, lease.json, segments
        e00000004/               the current holder's folder
            index.json           replaced atomically after every change
            lease.json           the holder and its heartbeat
            00000000000000000000.arrow   one Arrow IPC file per flush, named by its first offset

Offsets are per-partition sequence numbers: a message's offset never changes, so a micro-batch
replayed after a failure reads the same rows. A segment records the endpoint it came from and that
endpoint's metadata (schema metadata), so rows decode the same way whenever they are read.
``truncate(end)`` marks what Spark committed (``committed`` in the index); committed segments
are kept for replay, batch reads and backfills until retention deletes them (``Retention``: by
age, by bytes, and first whenever a write needs room at the spool's bound). A segment that is not
committed is never deleted.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa

from spark_zmq.errors import SpoolError

SPOOL_SCHEMA = pa.schema(
    [
        pa.field("received_at", pa.timestamp("us", tz="UTC")),
        pa.field("frames", pa.list_(pa.binary())),
        # a fault that capture itself observed (a gap: spool full, connection dropped);
        # its frames are empty
        pa.field("fault", pa.string()),
    ]
)

#: rows per record batch in a segment file
BATCH_ROWS = 4096
INDEX_NAME = "index.json"
#: committed segments an index no longer lists, one JSON line each (``PartitionIndex``)
HISTORY_NAME = "history.jsonl"
LEASE_NAME = "lease.json"
LOCK_NAME = "LOCK"
#: the file that holds a partition's key where its folder's name is a digest
KEY_NAME = "KEY"
#: the longest folder name a key becomes as it is (quoted); longer keys get a digest
MAX_NAME_BYTES = 200
#: how much of a long key's quoted text starts its digest folder's name (for people)
HASHED_PREFIX = 64
#: what separates that start from the digest (``quote`` never leaves a ``+``)
HASHED_MARK = "+"
SEALED = ".sealed"
#: the layout of the JSON files of a spool (index.json, lease.json, the driver's documents) that
#: this release writes and reads; a file without one predates versions (the same layout)
FORMAT_VERSION = 1
VERSION_KEY = "format_version"
_EPOCH_DIR = re.compile(r"e(\d{8,})(\.sealed)?")


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
    def from_json(cls, data: bytes | str) -> Source:
        obj = json.loads(data)
        return cls(obj["endpoint"], obj["metadata"])


@dataclass(frozen=True)
class Retention:
    """How long committed segments are kept (options ``spoolRetention``,
    ``spoolRetentionBytes``): ``seconds`` after they were written (None: no bound by age), and
    at most ``nbytes`` of them in the spool (None: no bound of their own; the spool's bound
    ``maxSpoolBytes`` still deletes them first whenever a write needs room)."""

    seconds: float | None = None
    nbytes: int | None = None


class PartitionState(NamedTuple):
    start: int  # first offset still retained (committed or not)
    end: int  # next offset to be written
    retired: bool  # the endpoint left
    committed: int = 0  # Spark committed every offset below this one (start <= committed <= end)

    @property
    def first_uncommitted(self) -> int:
        """Where a stream that has read everything committed goes on (``start`` at least)."""
        return max(self.start, self.committed)


@dataclass
class Segment:
    first: int
    count: int
    nbytes: int
    epoch: int = 0  # the epoch whose folder holds the file
    #: when it was written (wall-clock seconds), for retention by age; 0: not known (written by
    #: an earlier release, see ``PartitionIndex.from_json``)
    at: float = 0.0

    @property
    def end(self) -> int:
        return self.first + self.count

    @property
    def file_name(self) -> str:
        return f"{self.first:020d}.arrow"


@dataclass
class PartitionIndex:
    """What index.json holds for one partition.

    Invariants: ``start <= committed <= end``; ``segments`` cover [start, end) in order, and
    those that end at or before ``committed`` (a prefix) are the committed ones, the only ones
    retention deletes.
    """

    key: str
    start: int = 0  # first offset still retained (committed or not)
    end: int = 0  # next offset to be written
    segments: list[Segment] = field(default_factory=list)
    dropped: int = 0  # messages dropped at the spool bound, ever
    retired: bool = False  # the endpoint left; no more appends expected
    committed: int = 0  # Spark committed every offset below this one

    def to_json(self) -> str:
        """index.json: every segment not wholly committed; the committed ones are in the
        history file (``history_lines``), so that the index written at every append stays
        small however much retention keeps. ``start`` is the first offset the index lists (as
        an earlier release reads it), ``retained_from`` the first one kept."""
        listed = self.segments[self.committed_count() :]
        return json.dumps(
            versioned(
                {
                    "key": self.key,
                    "start": listed[0].first if listed else self.end,
                    "retained_from": self.start,
                    "end": self.end,
                    "dropped": self.dropped,
                    "retired": self.retired,
                    "committed": self.committed,
                    "segments": [[s.first, s.count, s.nbytes, s.epoch] for s in listed],
                    # beside the segments, not in them: an earlier release reads this index too
                    "written_at": [s.at for s in listed],
                }
            )
        )

    @classmethod
    def from_json(
        cls, text: str, where: str = "index.json", history: str | None = None
    ) -> PartitionIndex:
        """An index as written by this release or an earlier one: without ``committed`` (an
        earlier release deleted what was committed at once: everything it kept is uncommitted)
        and without ``written_at`` (ages not known: 0).

        ``history`` (the history file's text) adds the committed segments the index does not
        list; without it, ``segments`` may start after ``start``. Segments the history lacks
        (a history cut short) count as deleted: ``start`` moves up to what is listed."""
        obj = checked_version(json.loads(text), where)
        segments = [Segment(*s) for s in obj["segments"]]
        times = obj.get("written_at") or []
        if len(times) == len(segments):
            for segment, at in zip(segments, times, strict=True):
                segment.at = float(at)
        start = obj.get("retained_from", obj["start"])
        if history is not None:
            start, older = _committed_before(history, start, obj["start"])
            segments = older + segments
        return cls(
            obj["key"],
            start,
            obj["end"],
            segments,
            obj["dropped"],
            obj["retired"],
            obj.get("committed", obj["start"]),
        )

    def history_lines(self, begin: int, stop: int) -> str:
        """History file lines of segments ``begin`` to ``stop`` (committed ones)."""
        return "".join(
            json.dumps([s.first, s.count, s.nbytes, s.epoch, s.at]) + "\n"
            for s in self.segments[begin:stop]
        )

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.segments)

    def committed_count(self) -> int:
        """How many segments, from the first, are committed (end at or before ``committed``)."""
        return bisect.bisect_right(self.segments, self.committed, key=lambda s: s.end)

    def count_before(self, offset: int) -> int:
        """How many segments, from the first, end at or before ``offset``."""
        return bisect.bisect_right(self.segments, offset, key=lambda s: s.end)

    def state(self) -> PartitionState:
        return PartitionState(self.start, self.end, self.retired, self.committed)


def versioned(doc: dict) -> dict:
    """``doc`` with this release's format version, as every JSON file of a spool carries it."""
    return {VERSION_KEY: FORMAT_VERSION, **doc}


def checked_version(doc: dict, where: str) -> dict:
    """``doc`` read from ``where``, without its version; SpoolError if another release wrote it
    in a layout this one does not read."""
    version = doc.pop(VERSION_KEY, FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise SpoolError(
            f"{where} has spool format version {version!r}; this release of "
            f"spark_zmq reads version {FORMAT_VERSION}. Run the release that wrote "
            f"it, or give the query a new spoolPath (and checkpoint)"
        )
    return doc


def folder_name(key: str) -> str:
    """The name of the folder (or file) that stands for ``key`` in a spool: one path component
    that is never ``.`` or ``..``, whatever a peer announced as the key.

    Keys come from discovery, so from peers: the key quoted (no ``/`` survives quoting), and
    where that is empty, ``.``, ``..`` or longer than MAX_NAME_BYTES (most file systems refuse
    names over 255 bytes), a readable start of it, ``+`` (which quoting never leaves) and a
    digest of the key; such a folder keeps the key in its KEY file (``partition_keys``).
    """
    quoted = urllib.parse.quote(key, safe="", errors="surrogatepass")
    if quoted not in ("", ".", "..") and len(quoted) <= MAX_NAME_BYTES:
        return quoted  # quoted text is ASCII: its length is its size in bytes
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{quoted[:HASHED_PREFIX].lstrip('.')}{HASHED_MARK}{digest}"


def partition_dir(root: str, key: str) -> str:
    return os.path.join(root, folder_name(key))


def make_partition_dir(root: str, key: str) -> str:
    """The partition's folder, made if it does not exist, with the key beside it where the
    folder's name does not give it back (``folder_name``)."""
    folder = partition_dir(root, key)
    os.makedirs(folder, exist_ok=True)
    if HASHED_MARK in os.path.basename(folder) and not os.path.exists(
        os.path.join(folder, KEY_NAME)
    ):
        write_atomically(os.path.join(folder, KEY_NAME), key.encode("utf-8", "surrogatepass"))
    return folder


def partition_keys(root: str) -> list[str]:
    """Keys of every partition the spool folder holds."""
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    keys = []
    for name in names:
        folder = os.path.join(root, name)
        if os.path.isdir(folder) and epochs(folder):
            key = _key_of(folder, name)
            if key is not None:
                keys.append(key)
    return keys


def _key_of(folder: str, name: str) -> str | None:
    """The key a partition folder stands for (None: a digest folder that lost its KEY)."""
    if HASHED_MARK not in name:
        return urllib.parse.unquote(name, errors="surrogatepass")
    try:
        with open(os.path.join(folder, KEY_NAME), "rb") as f:
            return f.read().decode("utf-8", "surrogatepass")
    except OSError:
        return None


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


def epoch_name(epoch: int) -> str:
    return f"e{epoch:08d}"


class EpochFile(NamedTuple):
    text: str
    sealed: bool  # found in the sealed folder
    path: str  # where it was read (for messages)


def read_in_epoch(folder: str, epoch: int, name: str) -> EpochFile | None:
    """A file of an epoch folder, found whether or not it has been sealed meanwhile (a holder
    seals by renaming its folder); None if it has no such file."""
    base = os.path.join(folder, epoch_name(epoch))
    for path, sealed in (
        (os.path.join(base, name), False),
        (os.path.join(base + SEALED, name), True),
    ):
        try:
            with open(path, encoding="utf-8") as f:
                return EpochFile(f.read(), sealed, path)
        except FileNotFoundError:
            continue
    return None


def load_index(root: str, key: str, history: bool = True) -> PartitionIndex | None:
    """The partition's index: the one of the highest epoch that has written one. Without
    ``history``, only the segments index.json lists (all those not wholly committed): enough
    for its offsets, and cheap however much retention keeps."""
    folder = partition_dir(root, key)
    for epoch, _ in reversed(epochs(folder)):
        found = read_in_epoch(folder, epoch, INDEX_NAME)
        if found is not None:
            older = None
            if history:  # written before the index that names it: complete for this index
                kept = read_in_epoch(folder, epoch, HISTORY_NAME)
                older = kept.text if kept is not None else ""
            return PartitionIndex.from_json(found.text, found.path, older)
    return None


def load_indexes(root: str, history: bool = True) -> dict[str, PartitionIndex]:
    """The index of every partition in the spool folder ``root`` that has one."""
    indexes = {key: load_index(root, key, history) for key in partition_keys(root)}
    return {key: index for key, index in indexes.items() if index is not None}


def _committed_before(text: str, start: int, listed: int) -> tuple[int, list[Segment]]:
    """The history's segments that cover [start, listed) without a hole, and where they start
    (``start`` unless lines are missing: what they named counts as deleted). Lines that do not
    parse (a line cut short by a crash) and segments outside the range are passed over."""
    by_end: dict[int, Segment] = {}
    for line in text.splitlines():
        try:
            segment = Segment(*json.loads(line))
        except (ValueError, TypeError):
            continue
        if segment.first >= start and segment.end <= listed:
            by_end[segment.end] = segment
    chain: list[Segment] = []
    at = listed
    while at > start and at in by_end:
        chain.append(by_end[at])
        at = chain[-1].first
    chain.reverse()
    return at, chain


def segment_paths(root: str, key: str, segment: Segment) -> tuple[str, str]:
    """Where a segment's file is: in its epoch folder, or in that folder once sealed."""
    base = os.path.join(partition_dir(root, key), epoch_name(segment.epoch))
    return os.path.join(base, segment.file_name), os.path.join(base + SEALED, segment.file_name)


def write_atomically(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        remove_quietly(tmp)
        raise


def os_cause(exc: OSError) -> str:
    """``No space left on device`` rather than pyarrow's ``Error writing bytes to file. Detail:
    [errno 28] No space left on device``."""
    number = exc.errno
    if number is None:
        match = re.search(r"\[errno (\d+)\]", str(exc))
        number = int(match.group(1)) if match else None
    return os.strerror(number) if number else str(exc)


def remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


class JsonState:
    """One JSON document in a spool folder, replaced atomically on every save."""

    def __init__(self, path: str) -> None:
        self.path = path

    def load(self) -> dict | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise SpoolError(
                f"{self.path} is not valid JSON ({exc}); remove it to start over"
            ) from None
        return checked_version(doc, self.path)

    def save(self, data: dict) -> None:
        text = json.dumps(versioned(data), indent=1, sort_keys=True)
        write_atomically(self.path, text.encode())
