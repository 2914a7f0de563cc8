"""Capture's receive loop in two forms: the compiled core and the Python loop it falls back to.

Both do the same thing for ``loop.Capture``: poll the mailbox, the data sockets and their
monitors; take whatever arrives into the connections' buffers; and report what needs Python
(``wait``). The compiled core (``native``, Cython) does it in C without the GIL, and keeps
receiving until something needs Python or the time to wake comes; the Python loop does one poll
round per call. Everything else (discovery, episodes, the spool) stays in Python.

Which one runs: ``SPARK_ZMQ_CAPTURE_CORE`` = ``auto`` (the default: the compiled core when it
loads, else the Python loop, said once per process in the log), ``native`` (the compiled core or
an error) or ``python``.
"""

from __future__ import annotations

import errno
import functools
import os
import sys
import time
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, cast

import zmq
import zmq.backend

from spark_zmq.capture.buffer import BURST, MAX_SEGMENT_BYTES, MAX_SEGMENT_ROWS, Buffer
from spark_zmq.errors import CaptureError
from spark_zmq.log import logger
from spark_zmq.mailbox import Mailbox
from spark_zmq.units import milliseconds

if TYPE_CHECKING:
    from spark_zmq.capture.buffer import MessageBuffer
    from spark_zmq.capture.connections import Connection
    from spark_zmq.capture.refusals import Refusals

CORE_VARIABLE = "SPARK_ZMQ_CAPTURE_CORE"
CORES = ("auto", "native", "python")
#: the Python loop: a poll round with fewer messages than this is followed by a pause of
#: COALESCE_SECONDS
COALESCE_BELOW = 64
COALESCE_SECONDS = 0.001
#: the compiled core: the longest pause after a round that emptied the queues it read, so that
#: the next round takes a batch (``native.Poller``: shorter for a fast peer or a small receive
#: queue, ended by a mailbox command). At 50,000 msg/s in 1 ms bursts, 4 ms rather than a
#: 1 ms pause after thin rounds took capture's CPU per message from about 1.5 to 1.15 us
#: (benchmarks/capture_cpu.py)
LONGEST_PAUSE_SECONDS = 0.004
#: what ``wait`` reports: the mailbox has commands; a monitor has an event; a buffer must be
#: written; a receive queue was found full (a push-back episode, see ``pushback``); a receive
#: failed (the buffer's ``take_error`` says how; the other connections went on)
MAILBOX, MONITOR, FULL, QUEUE_FULL, FAILED = (
    "mailbox",
    "monitor",
    "full",
    "queue full",
    "receive failed",
)

Event = tuple[str, "Connection | None"]


class Core(Protocol):
    name: str

    def new_buffer(self, full_run: int, refusals: Refusals) -> MessageBuffer: ...
    def watch(self, conn: Connection) -> None: ...
    def unwatch(self, conn: Connection) -> None: ...
    def wait(self, seconds: float) -> list[Event]: ...
    def receive(self, conn: Connection) -> None:
        """One burst from ``conn``'s socket; a failure does not raise: the buffer keeps it
        (``take_error``)."""
        ...

    def close(self) -> None: ...


class PythonCore:
    """The receive loop in Python (pyzmq's Poller and ``recv_multipart``): the fallback. Its
    connections' buffers are ``Buffer``s (``new_buffer``)."""

    name = "python"

    def __init__(self, mailbox: Mailbox) -> None:
        self._mailbox = mailbox
        self._poller = zmq.Poller()
        self._by_socket: dict[zmq.Socket, Connection] = {}
        self._by_monitor: dict[zmq.Socket, Connection] = {}
        self._poller.register(mailbox, zmq.POLLIN)

    def new_buffer(self, full_run: int, refusals: Refusals) -> MessageBuffer:
        return Buffer(full_run=full_run, refusals=refusals)

    def watch(self, conn: Connection) -> None:
        self._by_socket[conn.socket] = conn
        self._by_monitor[conn.monitor] = conn
        self._poller.register(conn.socket, zmq.POLLIN)
        self._poller.register(conn.monitor, zmq.POLLIN)

    def unwatch(self, conn: Connection) -> None:
        for sock in (conn.socket, conn.monitor):
            self._poller.unregister(sock)
        self._by_socket.pop(conn.socket, None)
        self._by_monitor.pop(conn.monitor, None)

    def wait(self, seconds: float) -> list[Event]:
        """One poll round: bursts from the sockets that are ready, then what needs Python."""
        events: list[Event] = []
        received = 0
        for item, _ in self._poller.poll(milliseconds(seconds)):
            if item in self._by_socket:
                conn = self._by_socket[item]
                buffer = cast(Buffer, conn.buffer)
                count, queue_full = buffer.receive_burst(conn.socket)
                received += count
                if buffer.error:
                    events.append((FAILED, conn))
                if buffer.full:
                    events.append((FULL, conn))
                if queue_full:
                    events.append((QUEUE_FULL, conn))
            elif item == self._mailbox.fileno():
                events.append((MAILBOX, None))
            elif item in self._by_monitor:
                events.append((MONITOR, self._by_monitor[item]))
        if not events and 0 < received < COALESCE_BELOW:
            # A thin round: let a batch build up in zmq's queue rather than pay a poll round
            # per message (10+ us of CPU each at moderate rates).
            time.sleep(COALESCE_SECONDS)
        return events

    def receive(self, conn: Connection) -> None:
        cast(Buffer, conn.buffer).receive_burst(conn.socket)

    def close(self) -> None:
        self._poller.unregister(self._mailbox)


class NativeCore:
    """The compiled core (``native.Poller``): polls and receives in C without the GIL, and
    returns only when something needs Python or the time to wake has come."""

    name = "native"

    def __init__(self, mailbox: Mailbox) -> None:
        self._native = native_module()
        self._poller = self._native.Poller(mailbox.fileno(), LONGEST_PAUSE_SECONDS)
        self._watched: dict[int, Connection] = {}  # by id: a Connection is not hashable

    def new_buffer(self, full_run: int, refusals: Refusals) -> MessageBuffer:
        buffer: MessageBuffer = self._native.NativeBuffer(
            MAX_SEGMENT_ROWS, MAX_SEGMENT_BYTES, BURST, full_run, refusals
        )
        return buffer

    def watch(self, conn: Connection) -> None:
        self._watched[id(conn)] = conn
        self._update()

    def unwatch(self, conn: Connection) -> None:
        self._watched.pop(id(conn), None)
        self._update()

    def _update(self) -> None:
        self._poller.set_watched(
            [
                (conn, conn.socket.underlying, conn.buffer, conn.monitor.underlying)
                for conn in self._watched.values()
            ]
        )

    def wait(self, seconds: float) -> list[Event]:
        events: list[Event] = self._poller.wait(seconds)
        return events

    def receive(self, conn: Connection) -> None:
        self._native.receive(conn.buffer, conn.socket.underlying)

    def close(self) -> None:
        self._watched.clear()
        self._update()


def make_core(mailbox: Mailbox, choice: str | None = None) -> Core:
    """The core that ``choice`` (else ``SPARK_ZMQ_CAPTURE_CORE``, else ``auto``) asks for."""
    wanted = core_choice(choice)
    if wanted == "python":
        return PythonCore(mailbox)
    if wanted == "native":
        return NativeCore(mailbox)
    try:
        return NativeCore(mailbox)
    except ImportError as exc:
        _log_fallback(str(exc))
        return PythonCore(mailbox)


def core_choice(choice: str | None = None) -> str:
    wanted = (choice or os.environ.get(CORE_VARIABLE) or "auto").strip().lower()
    if wanted not in CORES:
        raise CaptureError(
            f"{CORE_VARIABLE}={wanted!r} is not one of {', '.join(CORES)} (auto: the compiled "
            f"capture core when it loads, else the Python loop)"
        )
    return wanted


@functools.cache
def _log_fallback(reason: str) -> None:
    logger.warning(
        "capture runs its Python receive loop: the compiled core is not available (%s). "
        "Set %s=python to choose it and silence this line, or reinstall spark_zmq with a "
        "C compiler at hand",
        reason,
        CORE_VARIABLE,
    )


def native_module() -> ModuleType:
    """``spark_zmq.capture.native``, bound to the libzmq pyzmq uses (ImportError, with the
    reason, if it cannot be)."""
    module, reason = _load_native()
    if module is None:
        raise ImportError(reason)
    return module


@functools.cache
def _load_native() -> tuple[ModuleType | None, str]:
    """Import and bind the compiled core once per process: (module, "") or (None, why not)."""
    try:
        from spark_zmq.capture import native
    except ImportError as exc:
        return None, f"spark_zmq.capture.native does not import: {exc}"
    if zmq.zmq_version_info() < (4, 1):
        return None, f"libzmq {zmq.zmq_version()} is older than 4.1"
    backend = sys.modules.get(zmq.backend.Socket.__module__)
    extension = getattr(backend, "__file__", None) or ""
    if not extension.endswith(".so"):
        return None, f"pyzmq's backend {backend!r} is not a compiled extension"
    constants: dict[str, int] = {
        "DONTWAIT": zmq.DONTWAIT,
        "SNDMORE": zmq.SNDMORE,
        "POLLIN": zmq.POLLIN,
        "ETERM": zmq.ETERM,
        "EAGAIN": zmq.EAGAIN,
        "EINTR": errno.EINTR,
    }
    try:
        library = native.bind(extension, constants)
    except ImportError as exc:
        return None, str(exc)
    logger.debug("compiled capture core bound to %s (through %s)", library, extension)
    return native, ""


def native_status() -> str:
    """One line: the compiled core and the libzmq it calls, or why it is not available."""
    module, reason = _load_native()
    if module is None:
        return f"not available: {reason}"
    return f"available, calling {module.library_path()}"
