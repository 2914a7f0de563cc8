"""The capture processes of a spool (``capture=executors``): one record per process in
``@capture/``, written by the process at every tick of its loop. The record is its heartbeat,
and says what it holds, so that the driver and the other capture processes learn who is alive
and who holds what from a handful of small files, not from a file per partition:

- ``process``, ``executor``, ``host``, ``role``: who it is (host/pid, as in leases), the JVM it
  serves (host/pid), the host it runs on (``host_identity``: who can reach an endpoint only its
  own host reaches, ``placement.executors.reach``) and whether an executor's task or the driver
  started it (``EXECUTOR``, ``DRIVER``);
- ``beat``: a counter it moves at every tick. Others time it with their own monotonic clocks: a
  process whose beat has not moved for ``leaseTimeout`` is gone, and its partitions are taken
  over. No clock of another host is trusted for that;
- ``partitions``: {partition: epoch} it holds. Each partition's epoch folder still fences its
  writes (``spool.epochs``): a record says who holds what, the epoch says who may write;
- ``flushed_at``: everything it received before this wall-clock time is in the spool (the
  start of its last complete flush): the start of the gap row of a partition taken over from it;
- ``gone``: it ended, and let go of every partition; ``failure``: why capture failed, which the
  driver fails the query with.

A record of a process that ended is kept (a newer holder dates its gap from it) until it is an
hour old (``remove_old_records``).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict, dataclass, field

from spark_zmq.spool.layout import (
    JsonState,
    folder_name,
    json_documents,
    remove_quietly,
)

#: the folder of the records ("@" is quoted in partition folder names: no clash)
PROCESSES = "@capture"
#: who started a capture process: a task on an executor, or the driver (on its own host, for
#: the endpoints that only that host reaches)
EXECUTOR, DRIVER = "executor", "driver"
#: seconds a record is kept after its process last wrote it
KEEP_SECONDS = 3600.0


@dataclass(frozen=True)
class ProcessRecord:
    """What a capture process writes into its record (see the module doc)."""

    process: str
    executor: str
    host: str
    role: str
    started: float
    beat: int
    at: float  # wall-clock time of this beat (for people, and to remove old records)
    flushed_at: float
    partitions: dict[str, int] = field(default_factory=dict)
    gone: bool = False
    failure: str = ""
    #: where it serves its metrics and probes (``http://host:port``; "": nowhere)
    metrics: str = ""

    @property
    def signal(self) -> tuple[int, bool, str]:
        """What moves while the process lives (watchers time its changes)."""
        return self.beat, self.gone, self.failure

    def serves(self, executor: str, role: str) -> bool:
        return self.executor == executor and self.role == role

    @classmethod
    def from_json(cls, doc: dict) -> ProcessRecord:
        return cls(**{**doc, "partitions": dict(doc.get("partitions", {}))})


def host_identity() -> str:
    """This host as capture tells hosts apart: its name and its network namespace (another
    machine has another name; a container, or an emulated host, a loopback of its own)."""
    try:
        namespace = os.readlink("/proc/self/ns/net")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()} {namespace}".strip()


def records_folder(root: str) -> str:
    return os.path.join(root, PROCESSES)


def _record_state(root: str, process: str) -> JsonState:
    return JsonState(os.path.join(records_folder(root), folder_name(process) + ".json"))


def save_record(root: str, record: ProcessRecord) -> None:
    """Write the record of ``record.process`` (OSError if the spool cannot take it)."""
    os.makedirs(records_folder(root), exist_ok=True)
    _record_state(root, record.process).save(asdict(record))


def load_records(root: str) -> dict[str, ProcessRecord]:
    """Every record in the spool, by process; one that cannot be read (being replaced on a
    filesystem that shows it half-written, or damaged) is passed over."""
    found = {}
    for doc in json_documents(records_folder(root)):
        try:
            record = ProcessRecord.from_json(doc)
        except (TypeError, ValueError):
            continue
        found[record.process] = record
    return found


def serving(root: str, executor: str, role: str, lease_timeout: float) -> ProcessRecord | None:
    """The record of a capture process that serves ``executor`` in ``role`` and wrote it
    within ``lease_timeout`` (by this host's clock: the caller runs on that executor's host,
    the clock that wrote it), if any: then no other is started there."""
    now = time.time()
    for record in load_records(root).values():
        if record.serves(executor, role) and not record.gone and now - record.at < lease_timeout:
            return record
    return None


def remove_old_records(root: str, keep: float = KEEP_SECONDS) -> None:
    """Remove the records last written more than ``keep`` seconds ago (by wall clock: an old
    record removed early only makes the gap of a partition it held start earlier)."""
    now = time.time()
    for process, record in load_records(root).items():
        if now - record.at > keep:
            remove_quietly(_record_state(root, process).path)
