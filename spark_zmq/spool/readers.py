"""The queries that read one capture service's spool, each under a name of its own (option
``spoolReader``), as Kafka's consumer groups: where each has committed, and which of them still
hold data.

- ``@readers/<name>.json``: written only by the query that reads under ``name`` (its driver,
  ``ReaderHandle``): what it committed ({partition: end}), when it last planned or committed
  (``at``, wall clock), and which run on which host and process writes it.
- The capture service reads them all (``held_ends``) and lets go of what every reader that
  holds data committed: per partition the least end among them. A partition that a reader has
  not committed yet is held from its first offset (the reader will read it from there).
- At the spool's bound, once nothing that every reader committed is left, what some reader
  committed (``read_ends``) is deleted before a new message is dropped: the readers behind get
  gap rows for it, the reader ahead loses nothing.
- A reader holds data until it has been silent (no plan, no commit) for ``timeout`` seconds
  (option ``spoolReaderTimeout``); then it stops holding (``ReaderCount`` logs it once). With no
  reader holding, nothing more is let go: what no reader committed stays.
- Two queries under one name would commit over each other: a query refuses to start under a
  name that a running query reads under (``ReaderHandle.open``). Taking a name is done under
  ``@readers/<name>.lock`` (flock), so two queries that start at once cannot both take it.

Nothing here imports pyspark: the capture service uses it too.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_zmq.log import logger
from spark_zmq.spool.contract import commits_state
from spark_zmq.spool.index import PartitionState
from spark_zmq.spool.layout import JsonState, SpoolError, folder_name, json_documents
from spark_zmq.units import utc_text

#: the folder of the readers' documents ("@" is quoted in partition folder names: no clash)
READERS = "@readers"
#: the name a query reads under when option spoolReader is not set
DEFAULT_READER = "default"
#: seconds between two writes of a reader's document that only say it is alive
BEAT_SECONDS = 30.0
#: seconds within which a document written on another host marks its reader as running
RUNNING_ELSEWHERE_SECONDS = 3 * BEAT_SECONDS
#: seconds a query waits for the query that reads under its name to stop before it fails
OPEN_WAIT = 10.0


@dataclass(frozen=True)
class ReaderRecord:
    """What a reader's document says (see the module doc)."""

    reader: str
    committed: dict[str, int] = field(default_factory=dict)
    at: float = 0.0  # wall-clock time it last planned or committed
    host: str = ""
    pid: int = 0
    run: str = ""
    stopped: bool = True  # its query stopped (or never ran)

    @classmethod
    def from_json(cls, doc: dict) -> ReaderRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        given = {k: v for k, v in doc.items() if k in names}
        committed = {str(k): int(v) for k, v in dict(given.pop("committed", {})).items()}
        return cls(**given, committed=committed)

    def lag(self, held: Mapping[str, PartitionState]) -> int:
        """Messages the spool holds (``held``: each partition's retained range) that this
        reader has not committed."""
        return sum(
            max(0, state.end - max(state.start, self.committed.get(key, 0)))
            for key, state in held.items()
        )

    def running_text(self) -> str:
        seen = _utc(self.at)
        return f"run {self.run} in process {self.pid} on host {self.host}, last seen {seen}"


def readers_folder(root: str) -> str:
    return os.path.join(root, READERS)


def reader_state(root: str, name: str) -> JsonState:
    return JsonState(os.path.join(readers_folder(root), folder_name(name) + ".json"))


def load_readers(root: str) -> dict[str, ReaderRecord]:
    """Every reader's document in the spool, by name; one that cannot be read (damaged, or half
    written on a file system that shows that) is passed over. A spool whose only query wrote
    ``commits.json`` (release 0.3) counts that as reader ``default``'s commits."""
    found = {}
    for doc in json_documents(readers_folder(root)):
        try:
            record = ReaderRecord.from_json(doc)
        except (TypeError, ValueError):
            continue
        found[record.reader] = record
    if DEFAULT_READER not in found:
        legacy = _legacy_commits(root)
        if legacy is not None:
            found[DEFAULT_READER] = legacy
    return found


def _legacy_commits(root: str) -> ReaderRecord | None:
    """The commits of a query of release 0.3 (``commits.json``) as reader ``default``'s."""
    state = commits_state(root)
    try:
        doc = state.load()
        at = os.path.getmtime(state.path)
    except (SpoolError, OSError):
        return None
    if not doc:
        return None
    committed = {k: v for k, v in doc.items() if isinstance(v, int) and not isinstance(v, bool)}
    return ReaderRecord(DEFAULT_READER, committed, at)


class ReaderHandle:
    """A query's side: its document under ``name``, which it alone writes while it runs."""

    def __init__(self, root: str, name: str) -> None:
        self.root, self.name = root, name
        self._state = reader_state(root, name)
        self._record = ReaderRecord(name)
        self._written_at = 0.0

    def open(self, wait: float = OPEN_WAIT) -> ReaderRecord:
        """Take the name for this run: SpoolError if a query reads under it that still runs
        after ``wait`` seconds (a query restarted at once may start before the process of its
        previous run has let go). Returns what earlier runs committed under it."""
        os.makedirs(readers_folder(self.root), exist_ok=True)
        with open(self._state.path.removesuffix(".json") + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # held for the check and the write, no longer
            deadline = time.monotonic() + wait
            earlier = load_readers(self.root).get(self.name)
            while earlier is not None and _running(earlier) and time.monotonic() < deadline:
                time.sleep(0.2)
                earlier = load_readers(self.root).get(self.name)
            if earlier is not None and _running(earlier):
                raise SpoolError(
                    f"spool {self.root} is read under reader name {self.name!r} by a running "
                    f"query ({earlier.running_text()}). Each query reading one spool needs a "
                    f"name of its own (option spoolReader): the spool keeps what each name has "
                    f"not committed, and two queries under one name would let go of each "
                    f"other's data"
                )
            self._record = ReaderRecord(
                self.name,
                dict(earlier.committed) if earlier else {},
                host=socket.gethostname(),
                pid=os.getpid(),
                run=uuid.uuid4().hex[:12],
                stopped=False,
            )
            self._write()
        return self._record

    @property
    def committed(self) -> dict[str, int]:
        return self._record.committed

    def commit(self, end: dict[str, int]) -> None:
        """Spark committed everything below ``end`` (positions only move forward)."""
        if not self._record.run:
            raise SpoolError(f"reader {self.name!r} of spool {self.root} commits before open")
        committed = dict(self._record.committed)
        for key, offset in end.items():
            committed[key] = max(offset, committed.get(key, 0))
        self._record = dataclasses.replace(self._record, committed=committed)
        self._write()

    def beat(self) -> None:
        """The query planned: say it is alive, at most every BEAT_SECONDS."""
        if self._record.run and time.time() - self._written_at >= BEAT_SECONDS:
            self._write()

    def close(self) -> None:
        """The query stops: the name is free (its commits keep holding data). Nothing, if it
        never took the name (it may be another query's)."""
        if not self._record.run or self._record.stopped:
            return
        self._record = dataclasses.replace(self._record, stopped=True)
        self._write()

    def _write(self) -> None:
        now = time.time()
        self._record = dataclasses.replace(self._record, at=now)
        os.makedirs(readers_folder(self.root), exist_ok=True)
        self._state.save(dataclasses.asdict(self._record))
        self._written_at = now


def _running(record: ReaderRecord) -> bool:
    """Whether the query that wrote ``record`` may still run: on this host, while its process
    lives; on another, while its document is recent."""
    if record.stopped or not record.run:
        return False
    if record.host == socket.gethostname():
        return _alive(record.pid)
    return time.time() - record.at < RUNNING_ELSEWHERE_SECONDS


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid > 0


class ReaderCount:
    """The capture service's side: which readers hold data, logging each that stops holding
    (silent over ``timeout`` seconds) once, and what every one of them committed."""

    def __init__(self, root: str, timeout: float) -> None:
        self.root, self.timeout = root, timeout
        self._expired: set[tuple[str, float]] = set()

    def holding(self) -> dict[str, ReaderRecord]:
        """The readers that hold data: every reader silent for less than ``timeout``."""
        now = time.time()
        holding = {}
        for name, record in load_readers(self.root).items():
            if now - record.at < self.timeout:
                holding[name] = record
            elif (name, record.at) not in self._expired:
                self._expired.add((name, record.at))
                logger.warning(
                    "spool %s: reader %r was last seen %s, over spoolReaderTimeout (%g s) "
                    "ago: it holds no data from now on (what it has not read may be deleted; "
                    "if it comes back it gets gap rows for that)",
                    self.root,
                    name,
                    _utc(record.at),
                    self.timeout,
                )
        return holding


def held_ends(readers: dict[str, ReaderRecord], keys: list[str]) -> dict[str, int]:
    """Per partition of ``keys``, what every reader of ``readers`` committed (the least of their
    ends; 0 where one has not committed the partition). Empty when no reader holds data."""
    if not readers:
        return {}
    return {key: min(r.committed.get(key, 0) for r in readers.values()) for key in keys}


def read_ends(readers: dict[str, ReaderRecord], keys: list[str]) -> dict[str, int]:
    """Per partition of ``keys``, what some reader of ``readers`` committed (the greatest of
    their ends): at the spool's bound, what lies between this and ``held_ends`` goes before a
    new message is dropped (``Spool.read_by_some``)."""
    return {key: max(r.committed.get(key, 0) for r in readers.values()) for key in keys}


def _utc(at: float) -> str:
    return utc_text(int(at * 1e9)) if at else "never"
