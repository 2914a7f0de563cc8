"""Flushes asked for by other threads (the reader's ``sync``) and served by the capture thread.

Two counters under one condition: a caller takes a ticket (``ask``) and waits until the capture
thread has flushed at least that many requests (``served``). A flush serves every request asked
before it started, so one flush answers any number of callers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class FlushRequests:
    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._asked = 0
        self._served = 0

    def ask(self) -> int:
        """A ticket: the request is served once a flush that started after this call ends."""
        with self._condition:
            self._asked += 1
            return self._asked

    def wait(self, ticket: int, timeout: float, serving: Callable[[], bool]) -> bool:
        """Wait until ``ticket`` is served (True) or ``serving()`` is False or time runs out."""
        with self._condition:
            return self._condition.wait_for(
                lambda: self._served >= ticket or not serving(), timeout
            )

    @property
    def pending(self) -> bool:
        return self._asked > self._served

    def start_flush(self) -> int:
        """Called by the flushing thread before it flushes: the requests this flush serves."""
        with self._condition:
            return self._asked

    def served(self, tickets: int) -> None:
        """Called after the flush that ``start_flush`` returned ``tickets`` for."""
        with self._condition:
            self._served = max(self._served, tickets)
            self._condition.notify_all()

    def wake_all(self) -> None:
        """Capture stopped: waiters re-check ``serving()``."""
        with self._condition:
            self._condition.notify_all()
