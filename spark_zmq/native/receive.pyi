"""Types of capture's compiled receive side (``receive.pyx``; ``NativeBuffer`` is
``buffer.pyx``'s, found here too)."""

from typing import Any

from spark_zmq.native.buffer import NativeBuffer as NativeBuffer

MAX_WAIT_SECONDS: float
MAILBOX: str
MONITOR: str
FULL: str
QUEUE_FULL: str
FAILED: str

def receive(buffer: NativeBuffer, socket: int) -> tuple[int, bool]: ...

class Poller:
    def __init__(self, mailbox: int, longest_pause_seconds: float) -> None: ...
    def set_watched(self, entries: list[tuple[Any, int, NativeBuffer, int]]) -> None: ...
    def set_longest_pause(self, seconds: float) -> None: ...
    def wait(self, seconds: float) -> list[tuple[str, Any]]: ...
    def statistics(self) -> dict[str, float]: ...
