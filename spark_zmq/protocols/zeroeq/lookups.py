"""Record lookups off ZeroConf's browser thread: many at once, one at a time per record.

The browser calls its handlers on one thread, one change after the other. Reading a publisher's
record means asking for it (up to 3 s when its owner is silent) and asking the publisher for its
vocabulary (up to 1 s): done on that thread, one silent record held back every record behind it,
and a session of hundreds of publishers was found one lookup at a time. ``RecordLookups`` runs
them on a pool instead, so a slow or silent record delays only itself.

Invariant: the changes of one record name are handled one at a time, in the order the browser
reported them, and a change that comes while one of its name runs replaces any change of that
name still waiting (only the newest matters: a record added then removed is handled as removed,
never re-added by a lookup that finished late). So the pending work is at most one change per
name, whatever a peer announces.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from spark_zmq.log import logger

#: lookups that run at once (each mostly waits on the network)
LOOKUP_THREADS = 16


class RecordLookups:
    """Runs each record name's changes on a pool of ``threads``, in order per name (module
    doc). ``close`` drops what waits and lets running lookups end on their own."""

    def __init__(self, threads: int = LOOKUP_THREADS) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="spark_zmq zeroeq lookup")
        self._lock = threading.Lock()
        #: names with a change running -> the change waiting after it (None: none waits)
        self._running: dict[str, Callable[[], None] | None] = {}
        self._closed = False

    def submit(self, name: str, change: Callable[[], None]) -> None:
        """Handle ``change`` of record ``name`` on the pool, after its name's running one."""
        with self._lock:
            if self._closed:
                return
            if name in self._running:
                self._running[name] = change  # the newest waits; an older waiting one is moot
                return
            self._running[name] = None
        self._pool.submit(self._run, name, change)

    def _run(self, name: str, change: Callable[[], None]) -> None:
        """``change``, then whatever came for ``name`` meanwhile, until nothing waits. A change
        handles its own errors (``RecordReader``); one that raises anyway is logged, and the
        name's next change still runs."""
        while True:
            try:
                change()
            except Exception:
                logger.exception("zeroeq: handling publisher record %r failed", name)
            with self._lock:
                waiting = None if self._closed else self._running.get(name)
                if waiting is None:
                    self._running.pop(name, None)
                    return
                self._running[name] = None
            change = waiting

    def idle(self) -> bool:
        """Whether no lookup runs or waits."""
        with self._lock:
            return not self._running

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
