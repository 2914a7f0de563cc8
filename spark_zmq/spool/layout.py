"""Durability: an append-only, segmented log per partition, re-readable by offset range.

Layout of a spool folder::

    LOCK                         held (flock) by a capture on the driver (capture=driver)
    discovery.json ...           small JSON documents of the driver (see ``state``)
    alive.json                   capture on the driver: when it was last known alive, and the
                                 gap rows it still owes (``downtime``); about once a second
    reserve                      room kept back for the gap rows of drops on a full storage
                                 (``reserve``)
    spool.json                   the folder's identity, which a query's offsets carry
                                 (``identity``)
    assignment.json commits.json @executors/ @holders/
                                 capture=executors: the driver's documents, the executors
                                 noted by tasks, the capture processes' logs (``contract``)
    @capture/                    capture=executors: one record per capture process, its
                                 heartbeat and the partitions it holds (``processes``)
    @readers/                    a capture service's spool: one document per reader name
                                 (option spoolReader), what its query committed (``readers``)
    @flushes/                    a flush file while it is written, until the segments link
                                 it (``segments``)
    <quoted partition key>/      (``folder_name``: never a path of its own, never too long)
        KEY                      the key, where the folder's name is a digest of it
        e00000003.sealed/        an earlier holder's folder: index.json, lease.json, segments
        e00000004/               the current holder's folder
            index.json           the segments not committed; replaced atomically at every
                                 change but appends and commits
            appended.00000007.jsonl   the segments appended and the commits made since
                                 index.json (which names it) was written, a JSON line each;
                                 made empty before that index, deleted once a newer one
                                 names another
            history.jsonl        committed segments that index.json no longer lists
            lease.json           its holder, written when it claimed the partition
            00000000000000000000.arrow   a segment, named by its first offset: a hard link to
                                 the flush file that holds its rows among those of the other
                                 partitions of that flush (``segments``)

Offsets are per-partition sequence numbers: a message's offset never changes, so a micro-batch
replayed after a failure reads the same rows. A segment records the endpoint it came from and that
endpoint's metadata (schema metadata), so rows decode the same way whenever they are read.
``truncate(end)`` marks what Spark committed (``committed`` in the index); committed segments
are kept for replay, batch reads and backfills until retention deletes them (``Retention``: by
age, by bytes, and first whenever a write needs room at the spool's bound). A segment that is not
committed is never deleted.

An append costs the same however many segments are not committed yet: it links its segment
and writes one line; a commit's line goes in the same write as the partition's next segment
line, or after capture's flush if none comes (``Spool.truncate``). index.json, which lists them
all, is written when something else changes (retention, a claim) or once the appended file
holds ``files.LINES_BEFORE_SAVE`` lines, not at every flush or commit.

This module: the folders and files; ``index``: what index.json and the history file hold.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import urllib.parse
from collections.abc import Iterator
from typing import NamedTuple

import pyarrow as pa

from spark_zmq.errors import SpoolError
from spark_zmq.spool.index import PartitionIndex, Segment, checked_version, versioned

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
#: what a frame and a row of SPOOL_SCHEMA take as arrays besides the frames' bytes: an int32
#: frame offset; an int32 row offset and an int64 receive time (what a capture buffer counts
#: against its bound, ``native`` too; what a flush file's parts are weighed by)
FRAME_OVERHEAD = 4
ROW_OVERHEAD = 12
INDEX_NAME = "index.json"
#: committed segments an index no longer lists, one JSON line each (``PartitionIndex``)
HISTORY_NAME = "history.jsonl"
#: how many times a reader reads index.json again when the appended-segments file it names was
#: deleted meanwhile (a newer index names another) before it takes what it read
INDEX_READS = 20
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
#: the folder of a spool where flush files are written (``segments``): a holder's until its
#: segments link it, an exclusive writer's for as long as a segment names it by number
#: (``flush_path``); "@" is quoted in partition folder names: no clash
FLUSHES = "@flushes"
#: a numbered flush file's name: its number, then this
FLUSH_SUFFIX = ".arrow"
_EPOCH_DIR = re.compile(r"e(\d{8,})(\.sealed)?")


class LeaseLost(SpoolError):
    """Another writer claimed the partition: this one may not write to it any more.

    ``key`` names the partition, so that a process that holds many (a capture process on an
    executor) lets go of that one and captures on for the others."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class SpoolWriteError(SpoolError):
    """The spool's storage refused a write (full, read-only, I/O error). Nothing already in the
    spool is changed by the failed write: segments and indexes are replaced atomically."""


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


class PartitionFolder(NamedTuple):
    """A partition's folder as one listing of it found it."""

    key: str
    path: str
    epochs: list[tuple[int, bool]]  # (epoch, sealed), oldest first (``epochs``)


def partition_folders(root: str) -> list[PartitionFolder]:
    """Every partition folder the spool folder holds, with its epochs: one listing of each (a
    planner asks at every micro-batch, of every partition)."""
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        folder = os.path.join(root, name)
        held = epochs(folder)  # a file, not a folder, has none
        if held:
            key = _key_of(folder, name)
            if key is not None:
                found.append(PartitionFolder(key, folder, held))
    return found


def partition_keys(root: str) -> list[str]:
    """Keys of every partition the spool folder holds."""
    return [partition.key for partition in partition_folders(root)]


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
    except (FileNotFoundError, NotADirectoryError):
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


def appended_name(number: int) -> str:
    """The name of an epoch's ``number``-th appended-segments file (``PartitionIndex.appended``)."""
    return f"appended.{number:08d}.jsonl"


def load_index(root: str, key: str, history: bool = True) -> PartitionIndex | None:
    """The partition's index: the one of the highest epoch that has written one, with the
    segments appended since. Without ``history``, only the segments not wholly committed:
    enough for its offsets, and cheap however much retention keeps."""
    folder = partition_dir(root, key)
    for epoch, _ in reversed(epochs(folder)):
        index = _load_epoch_index(folder, epoch, history)
        if index is not None:
            return index
    return None


def _load_epoch_index(folder: str, epoch: int, history: bool) -> PartitionIndex | None:
    """The index of one epoch folder, or None if it has not written one.

    The appended-segments file an index names exists from before that index is written until a
    newer index is: when it is gone, index.json is read again (INDEX_READS times at most)."""
    index = None
    for _ in range(INDEX_READS):
        found = read_in_epoch(folder, epoch, INDEX_NAME)
        if found is None:
            return None
        older = None
        if history:  # written before the index that names it: complete for this index
            kept = read_in_epoch(folder, epoch, HISTORY_NAME)
            older = kept.text if kept is not None else ""
        index = PartitionIndex.from_json(found.text, found.path, older)
        if not index.appended:  # an index of format version 1
            return index
        appended = read_in_epoch(folder, epoch, index.appended)
        if appended is not None:
            index.add_appended(appended.text)
            return index
    return index  # what index.json listed when it was last read


def load_indexes(root: str, history: bool = True) -> dict[str, PartitionIndex]:
    """The index of every partition in the spool folder ``root`` that has one."""
    indexes = {key: load_index(root, key, history) for key in partition_keys(root)}
    return {key: index for key, index in indexes.items() if index is not None}


def flush_path(root: str, number: int) -> str:
    """Where the flush file ``number`` (``Segment.flush``) is."""
    return f"{root}{os.sep}{FLUSHES}{os.sep}{number:020d}{FLUSH_SUFFIX}"


def flush_number(name: str) -> int | None:
    """The number of a numbered flush file's name (``flush_path``); None for any other name (a
    holder's flush file, a file being written)."""
    stem = name[: -len(FLUSH_SUFFIX)] if name.endswith(FLUSH_SUFFIX) else ""
    return int(stem) if stem.isdigit() and len(stem) == 20 else None


def segment_paths(root: str, key: str, segment: Segment, folder: str = "") -> tuple[str, ...]:
    """Where a segment's file is: the flush file it names by number, or its file in its epoch
    folder, or in that folder once sealed (``folder``: the partition's, if known)."""
    if segment.flush:
        return (flush_path(root, segment.flush),)
    base = os.path.join(folder or partition_dir(root, key), epoch_name(segment.epoch))
    return os.path.join(base, segment.file_name), os.path.join(base + SEALED, segment.file_name)


def write_atomically(path: str, data: bytes, durable: bool = False, mode: int = 0o666) -> None:
    """``data`` at ``path``, whole or not at all; ``durable``: on disk before it is named;
    ``mode``: the file's permissions (less the umask) from its creation on, so that a secret
    is never readable by others, not even for a moment."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as f:
            if mode != 0o666:  # a leftover file of that name kept its own permissions
                os.fchmod(f.fileno(), mode)
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
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


def json_documents(folder: str) -> Iterator[dict]:
    """The JSON documents (``*.json``) of ``folder``, in name order; one that cannot be read
    (damaged, or half written on a file system that shows that) is passed over."""
    try:
        names = sorted(name for name in os.listdir(folder) if name.endswith(".json"))
    except FileNotFoundError:
        return
    for name in names:
        try:
            doc = JsonState(os.path.join(folder, name)).load()
        except SpoolError:
            continue
        if doc:
            yield doc
