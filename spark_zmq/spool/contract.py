"""The files that the query's placement, the holders on executors and the read tasks share in a
spool folder, besides the partitions' segments, indexes and leases (``layout``, ``leases``).

- ``assignment.json``: written by the driver (``capture=executors``), renewed every second: the
  spool's id, a beat that moves while the query lives, the driver's host (``driver_host``: who
  may capture the endpoints only that host reaches) and the live endpoints by partition.
  Capture processes follow it; claim tasks check with its spool id that their executor sees
  the spool.
- ``commits.json``: what Spark committed, {partition: end offset}. Only queries write it; the
  process that writes a partition (a capture process, a capture service) records it in the
  partition's index and lets go of what is below it.
- ``@executors/``: one document per executor that ran a task (``register_executor``), so that
  the driver starts a capture process on each executor alive (``live_executors``).
- ``@capture/``: one record per capture process, its heartbeat and what it holds
  (``spool.processes``).
- ``@holders/``: one log per executor and role, that its capture processes write
  (``holder_log``).

Nothing here imports pyspark: a capture service and the holder processes use it too.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from spark_zmq.spool.layout import JsonState, SpoolError, folder_name
from spark_zmq.spool.processes import host_identity

#: the driver's assignment document (``assignment.json``)
ASSIGNMENT = "assignment"
#: what Spark committed (``commits.json``)
COMMITS = "commits"
#: folder of the spool where tasks note which executors are alive
EXECUTORS = "@executors"  # "@" is quoted in partition folder names: no clash
#: folder of the spool where holders log
HOLDER_LOGS = "@holders"


def assignment_state(spool_path: str) -> JsonState:
    """The driver's assignment: {"spool_id", "beat", "format", "endpoints": {key: endpoint}}."""
    return JsonState(os.path.join(spool_path, f"{ASSIGNMENT}.json"))


def commits_state(spool_path: str) -> JsonState:
    """The spool's document of what Spark committed: {partition: end offset}."""
    return JsonState(os.path.join(spool_path, f"{COMMITS}.json"))


def register_executor(root: str, executor: str, gone: bool = False) -> None:
    """Note in the spool that an executor is alive, and on which host (every task does, at
    most once a second per process), or that it is gone (its capture process sees its JVM
    end): the driver starts a capture process on each executor seen alive, and the capture
    processes leave new partitions to one about to start there."""
    now = time.time()
    if not gone and now - _registered.get((root, executor), 0.0) < 1.0:
        return
    _registered[(root, executor)] = now
    folder = os.path.join(root, EXECUTORS)
    os.makedirs(folder, exist_ok=True)
    JsonState(os.path.join(folder, folder_name(executor) + ".json")).save(
        {"executor": executor, "at": now, "gone": gone, "host": host_identity()}
    )


_registered: dict[tuple[str, str], float] = {}


@dataclass(frozen=True)
class Registration:
    """An executor as the last task on it (or its capture process) noted it."""

    executor: str
    at: float  # wall-clock time, by the executor's host
    gone: bool
    host: str  # "" where written by release 0.2


def registrations(root: str) -> list[Registration]:
    """Every executor noted in the spool (a document that cannot be read is passed over)."""
    folder = os.path.join(root, EXECUTORS)
    found = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        try:
            doc = JsonState(os.path.join(folder, name)).load()
        except SpoolError:
            continue
        if doc:
            found.append(Registration(doc["executor"], doc["at"], doc["gone"], doc.get("host", "")))
    return found


def live_executors(root: str, window: float) -> set[str]:
    """Executors that ran a task within ``window`` seconds and are not known to be gone."""
    now = time.time()
    return {r.executor for r in registrations(root) if not r.gone and now - r.at < window}


def holder_log(spool_path: str, executor: str, role: str) -> str:
    """Where the capture processes of an executor in a role write their log (stderr):
    ``@holders/<executor>.<role>.log`` in the spool. An executor's own log goes away with the
    executor; the spool stays."""
    folder = os.path.join(spool_path, HOLDER_LOGS)
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{folder_name(executor)}.{role}.log")
