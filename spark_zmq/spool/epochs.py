"""Epochs: how a spool folder has one writer per partition, and one query per folder.

**One writer per partition, fenced by epochs.** A writer (a capture on the driver, or a holder
process on an executor) owns a partition by *claiming* the next epoch: ``mkdir e<n+1>``, which
exactly one claimant wins, also on a shared filesystem. It then *seals* the folders of earlier
epochs by renaming them to ``e<n>.sealed``, reads the sealed index (final from then on) and goes
on from its end. Every write of a holder goes through a path inside its own epoch folder, so once
that folder is sealed the writes fail (``LeaseLost``): a holder that was paused and resumed after
a takeover cannot append, even if it never noticed it lost the lease. A holder that stops cleanly
seals its own folder, which marks the partition free.

With capture on the driver, one process writes every partition of the folder, and a lock file
(``LOCK``, flock) keeps a second query's capture off it. The LOCK's document says who holds it:
pid, host, since, whether it is stopping, and its ``role``: ``query`` (a query's capture on the
driver) or ``service`` (``spark-zmq capture``, which a query with ``capture=service`` reads).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import time
from typing import IO, Any

from spark_zmq.spool.layout import (
    LOCK_NAME,
    SEALED,
    LeaseLost,
    SpoolError,
    epoch_name,
    epochs,
    make_partition_dir,
)
from spark_zmq.spool.leases import Lease, lease_of

#: the LOCK's ``role`` of a query's capture on the driver, and of a capture service
QUERY, SERVICE = "query", "service"

#: seconds a query waits for a live holder of the spool's LOCK to say it is stopping before it
#: fails (a query restarted in the same session starts while its previous run stops)
STOPPING_GRACE = 3.0


def lock_folder(root: str, wait: float, role: str = QUERY) -> IO[str]:
    """Exclusive use of the folder, as ``role`` (written in the LOCK).

    A holder that is stopping (it says so in the LOCK: ``mark_stopping``) is waited for, up to
    ``wait`` seconds: a query restarted in the same session may start before the process of
    its previous run has written what it received and let go. A holder that is not stopping is
    another live query: SpoolError after ``STOPPING_GRACE`` seconds, naming the spool and the
    holder's process, host and start time. A capture service that holds the folder is never
    waited for: a query's capture cannot share its spool (SpoolError at once, saying to read
    it with ``capture=service``).
    """
    lock = open(os.path.join(root, LOCK_NAME), "a+")
    started = time.monotonic()
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                lock.close()
                raise
            lock.seek(0)
            holder = _holder(lock.read())
            if holder.get("role") == SERVICE and not holder.get("stopping"):
                lock.close()
                raise SpoolError(
                    f"spool folder {root} is filled by a capture service "
                    f"({holder_text(holder)}): a query reads it with option "
                    f"capture=service; a query's capture or another service needs a spool "
                    f"folder of its own"
                ) from None
            waited = time.monotonic() - started
            if waited > wait or (waited > STOPPING_GRACE and not holder.get("stopping")):
                lock.close()
                raise SpoolError(
                    f"spool folder {root} is in use by another running query "
                    f"({holder_text(holder)}); give each query its own option spoolPath"
                ) from None
            time.sleep(0.2)
    _write_holder(lock, stopping=False, role=role)
    return lock


def mark_stopping(lock: IO[str]) -> None:
    """Say in the LOCK that its holder is stopping (a query that wants the folder waits)."""
    _write_holder(lock, stopping=True)


def folder_holder(root: str) -> dict[str, Any] | None:
    """Who holds the folder's LOCK now (its document: pid, host, since, stopping, role), or
    None when nobody does. Read-only: creates nothing, and holds the lock (shared) only for
    the instant of the test, so a holder starting meanwhile retries and gets it."""
    try:
        lock = open(os.path.join(root, LOCK_NAME))
    except FileNotFoundError:
        return None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            return _holder(lock.read())
        fcntl.flock(lock, fcntl.LOCK_UN)
        return None


def _write_holder(lock: IO[str], stopping: bool, role: str | None = None) -> None:
    """Write the holder's document; ``role`` None keeps the one written before (or query)."""
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc = {"pid": os.getpid(), "host": socket.gethostname(), "since": since}
    lock.seek(0)
    previous = _holder(lock.read())
    mine = previous.get("pid") == os.getpid()
    if "since" in previous and mine:
        doc["since"] = previous["since"]
    doc["role"] = role or (previous.get("role") if mine else None) or QUERY
    lock.seek(0)
    lock.truncate()
    lock.write(json.dumps({**doc, "stopping": stopping}))
    lock.flush()


def _holder(text: str) -> dict[str, Any]:
    """What the LOCK's holder wrote there; a holder that wrote nothing readable (yet, or an
    older release: only its pid) counts as stopping, so it is waited for as before."""
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return {"pid": text.strip() or "(unknown)", "stopping": True}
    return doc


def holder_text(holder: dict[str, Any]) -> str:
    """Who holds a spool's LOCK, for the error a second query gets and for log lines."""
    text = f"process {holder.get('pid')}"
    if "host" in holder:
        text += f" on host {holder['host']}, since {holder.get('since')}"
    return text + (", stopping" if holder.get("stopping") else "")


def claim_epoch(root: str, key: str, expect_epoch: int | None) -> tuple[int, Lease | None]:
    """Claim the partition's next epoch: (the epoch claimed, the previous holder's lease if
    there was one). ``expect_epoch``: claim only if the highest epoch is still that one (0:
    never claimed); LeaseLost otherwise, or when another claimant won the same epoch."""
    folder = make_partition_dir(root, key)
    claimed = epochs(folder)
    current = claimed[-1][0] if claimed else 0
    if expect_epoch is not None and current != expect_epoch:
        raise LeaseLost(f"partition {key!r} is held by epoch {current}, not {expect_epoch}", key)
    mine = current + 1
    try:
        os.mkdir(os.path.join(folder, epoch_name(mine)))
    except FileExistsError:
        raise LeaseLost(
            f"partition {key!r}: epoch {mine} was claimed by another holder first", key
        ) from None
    for epoch, sealed in claimed:
        if not sealed:
            seal(folder, epoch)
    return mine, lease_of(folder, current, True) if claimed else None


def seal(folder: str, epoch: int) -> None:
    """Mark an epoch's folder final (its writer may no longer write into it)."""
    base = os.path.join(folder, epoch_name(epoch))
    try:
        os.rename(base, base + SEALED)
    except FileNotFoundError:  # sealed by its holder meanwhile
        pass


def remove_unused_epochs(folder: str, used: set[int], current: int) -> None:
    """Sealed folders of epochs before ``current`` that hold no segment in ``used``."""
    for epoch, sealed in epochs(folder):
        if sealed and epoch not in used and epoch < current:
            shutil.rmtree(os.path.join(folder, epoch_name(epoch) + SEALED), ignore_errors=True)
