"""What every tool of the command line shares."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from spark_zmq.errors import SparkZmqError


class CommandError(SparkZmqError):
    """A failure the user can act on: one line on stderr and exit ``status`` instead of a
    traceback (2 for a usage error found after parsing, 1 for anything else)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def aligned(head: Sequence[str], lines: Iterable[Sequence[str]]) -> str:
    """Plain columns aligned under ``head``: readable in a terminal, easy to grep or cut."""
    cells = [list(head), *(list(line) for line in lines)]
    widths = [max(len(cell) for cell in column) for column in zip(*cells)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in cells
    )


class MemoryState:
    """Discovery's durable state, kept in memory: a tool leaves nothing behind."""

    def __init__(self) -> None:
        self.data: dict | None = None

    def load(self) -> dict | None:
        return self.data

    def save(self, data: dict) -> None:
        self.data = data
