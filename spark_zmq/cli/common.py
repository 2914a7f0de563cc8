"""What every tool of the command line shares."""

from __future__ import annotations

from spark_zmq.errors import SparkZmqError


class CommandError(SparkZmqError):
    """A failure the user can act on: one line on stderr and exit ``status`` instead of a
    traceback (2 for a usage error found after parsing, 1 for anything else)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status
