"""Child processes of the benchmarks: each reports through a pipe, and errors reach the parent."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
from collections.abc import Callable
from typing import Any


class Child:
    """A spawned process and the parent's end of a duplex pipe: the child reports through it,
    and the parent may release the child through it (children that wait for that read it)."""

    def __init__(self, context: Any, target: Callable[..., None], *args: Any) -> None:
        self.conn, child_end = context.Pipe(duplex=True)
        self.process = context.Process(target=target, args=(*args, child_end), daemon=True)
        self.process.start()
        child_end.close()

    def expect(self, kind: str, timeout: float) -> Any:
        """The next report, which must be ``kind``; a child's error or silence raises."""
        try:
            if not self.conn.poll(timeout):
                raise TimeoutError(f"{self.process.name}: no {kind!r} within {timeout:.0f} s")
            got, value = self.conn.recv()
        except EOFError:
            raise RuntimeError(
                f"{self.process.name} exited ({self.process.exitcode}) before reporting {kind!r}"
            ) from None
        if got != kind:
            raise RuntimeError(f"{self.process.name}: {value}")
        return value

    def stop(self, timeout: float = 10.0) -> None:
        """Release the child, wait for a clean exit, then terminate, then kill: never leave a
        child behind."""
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(("release", None))
        self.process.join(timeout)
        for end in (self.process.terminate, self.process.kill):
            if not self.process.is_alive():
                break
            end()
            self.process.join(5.0)
        self.conn.close()


def report_errors(conn: multiprocessing.connection.Connection, body: Callable[[], None]) -> None:
    """Run a child's body; send any exception to the parent instead of dying silently."""
    try:
        body()
    except BaseException as exc:  # the parent shows it with the results
        with contextlib.suppress(Exception):
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        conn.close()


def reap_children() -> None:
    """Terminate any child still running: only a run that was interrupted leaves one."""
    for child in multiprocessing.active_children():
        child.terminate()
        child.join(5.0)
