"""The files that the query's placement, the holders on executors and the read tasks share in a
spool folder, besides the partitions' segments, indexes and leases (``layout``, ``leases``).

- ``assignment.json``: written by the driver (``capture=executors``), renewed every second: the
  spool's id, a beat that moves while the query lives, and the live endpoints by partition.
  Holders follow it; claim tasks check with its spool id that their executor sees the spool.
- ``commits.json``: what Spark committed, {partition: end offset}. Only queries write it; the
  process that writes a partition (a holder, a capture service) records it in the partition's
  index and lets go of what is below it.
- ``@executors/``: one document per executor that ran a task (``register_executor``), so that
  claim tasks spread partitions over the executors alive (``live_executors``).
- ``@holders/``: one log per partition, that its holders write (``holder_log``).

Nothing here imports pyspark: a capture service and the holder processes use it too.
"""

from __future__ import annotations

import os
import time

from spark_zmq.spool.layout import JsonState, SpoolError, folder_name

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
    """Note in the spool that an executor is alive (every task does, at most once a second
    per process), or that it is gone (its holders see its JVM end): claim tasks spread
    partitions over the executors seen alive."""
    now = time.time()
    if not gone and now - _registered.get((root, executor), 0.0) < 1.0:
        return
    _registered[(root, executor)] = now
    folder = os.path.join(root, EXECUTORS)
    os.makedirs(folder, exist_ok=True)
    JsonState(os.path.join(folder, folder_name(executor) + ".json")).save(
        {"executor": executor, "at": now, "gone": gone}
    )


_registered: dict[tuple[str, str], float] = {}


def live_executors(root: str, window: float) -> set[str]:
    """Executors that ran a task within ``window`` seconds and are not known to be gone."""
    folder = os.path.join(root, EXECUTORS)
    found = set()
    now = time.time()
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        try:
            doc = JsonState(os.path.join(folder, name)).load()
        except SpoolError:
            continue
        if doc and not doc["gone"] and now - doc["at"] < window:
            found.add(doc["executor"])
    return found


def holder_log(spool_path: str, key: str) -> str:
    """Where a partition's holders write their log (stderr): ``@holders/<partition>.log`` in
    the spool. An executor's own log goes away with the executor; the spool stays."""
    folder = os.path.join(spool_path, HOLDER_LOGS)
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, folder_name(key) + ".log")
