"""Waiting for a condition, a discovery state store in memory, the checkout's root."""

from __future__ import annotations

import json
import time
from pathlib import Path

import zmq

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


def bound_xpubs(context: zmq.Context, count: int) -> tuple[list[zmq.Socket], list[str]]:
    """``count`` wire-level publishers: XPUB sockets of ``context`` bound to free loopback
    ports (linger 0), and their ``host:port`` keys, in the same order."""
    sockets = []
    for _ in range(count):
        socket = context.socket(zmq.XPUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.bind("tcp://127.0.0.1:*")
        sockets.append(socket)
    keys = [s.getsockopt_string(zmq.LAST_ENDPOINT).removeprefix("tcp://") for s in sockets]
    return sockets, keys
