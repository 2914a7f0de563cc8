"""Commands from any thread to a thread that owns zmq sockets.

A zmq socket belongs to one thread, so other threads cannot touch it: they post a command
instead, and the owner's poll loop picks it up. The queue holds the commands; a pipe whose read
end the loop polls beside its sockets wakes it (a pipe rather than an inproc socket, because
writing to it is safe from any thread and from signal handlers).
"""

from __future__ import annotations

import os
import queue
from typing import Any


class Mailbox:
    """A command queue with a pipe that wakes the owning thread's poll loop."""

    def __init__(self) -> None:
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)

    def fileno(self) -> int:
        """The file descriptor the owner's ``zmq.Poller`` watches (its ``poll`` reports this
        number, not the Mailbox)."""
        return self._read

    def post(self, command: Any) -> None:
        self._commands.put(command)
        self.wake()

    def wake(self) -> None:
        """Make the owner's poll return, with or without a command."""
        try:
            os.write(self._write, b"x")
        except OSError:  # closed, or the pipe is full: the owner wakes either way
            pass

    def take(self) -> list:
        """Every command posted so far (called by the owner when its poll reports the pipe)."""
        try:
            while os.read(self._read, 4096):
                pass
        except BlockingIOError:
            pass
        commands = []
        while True:
            try:
                commands.append(self._commands.get_nowait())
            except queue.Empty:
                return commands

    @property
    def closed(self) -> bool:
        return self._write < 0

    def close(self) -> None:
        if self._write >= 0:
            os.close(self._read)
            os.close(self._write)
            self._read = self._write = -1
