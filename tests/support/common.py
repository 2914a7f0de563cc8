"""Waiting for a condition, a discovery state store in memory, the checkout's root."""

from __future__ import annotations

import json
import time
from pathlib import Path

#: the checkout (notebooks/, tests/peers/ are found from here)
ROOT = Path(__file__).resolve().parents[2]


class MemoryState:
    """A discovery state store in memory; saved data goes through JSON as in the spool."""

    def __init__(self) -> None:
        self.saved = None

    def load(self):
        return self.saved

    def save(self, data):
        self.saved = json.loads(json.dumps(data))


def wait_until(predicate, timeout=60.0, interval=0.2, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
