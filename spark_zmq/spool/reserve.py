"""Room kept back on the spool's storage for the gap rows that report drops.

On a full storage, capture drops new messages (``onSpoolWriteError=drop``) and reports them
with a gap row. That row is also what lets Spark go on: Spark commits a micro-batch's offsets
only when it plans the next micro-batch, which takes a new offset, and retention frees only
committed segments. If not even a gap row could be written, what Spark has read would stay
uncommitted and the storage full for good. So the writer keeps a file of ``RESERVE_BYTES`` at
the spool's root, deletes it to make room for a gap row when a write fails, and makes it again
once a write succeeds.

Several writers of one spool (holders on one host) share the file: whichever needs it first
deletes it, and whichever writes next makes it again.
"""

from __future__ import annotations

import os
import time

from spark_zmq.spool.layout import write_atomically

#: the reserve's name at the spool's root
RESERVE_NAME = "reserve"
#: its size: room for a few gap rows (a segment of one row and a new index.json each, a few
#: KiB on disk) until Spark's next commit frees what fills the storage
RESERVE_BYTES = 64 * 1024
#: how often a writer tries to make a missing reserve again (each try writes it whole)
RETRY_SECONDS = 10.0


class Reserve:
    """The reserve file of the spool at ``root``."""

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, RESERVE_NAME)
        self._kept = os.path.exists(self.path)
        self._next_try = 0.0

    def keep(self) -> None:
        """Make the reserve if this writer has not seen it there; a storage that cannot take
        it yet is tried again at a call ``RETRY_SECONDS`` later (writes succeed on a disk with
        a little room, so this is not tried at every flush)."""
        if self._kept or time.monotonic() < self._next_try:
            return
        self._next_try = time.monotonic() + RETRY_SECONDS
        try:  # written, not sparse: the room is taken now
            write_atomically(self.path, bytes(RESERVE_BYTES), durable=True)
        except OSError:
            return
        self._kept = True

    def release(self) -> bool:
        """Delete the reserve to make room; whether there was one to delete."""
        self._kept, self._next_try = False, 0.0
        try:
            os.remove(self.path)
        except FileNotFoundError:
            return False
        return True
