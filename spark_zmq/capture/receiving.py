"""Capture's receive loop in two forms (cores): the compiled one and the Python loop it falls
back to.

Both do the same thing for ``loop.Capture``: poll the mailbox, the data sockets and their
monitors; take whatever arrives into the connections' buffers; and report what needs Python
(``wait``). The compiled core (``spark_zmq.native.receive``, Cython) does it in C without the
GIL, and keeps receiving until something needs Python or the time to wake comes; the Python loop
does one poll round per call. Everything else (discovery, episodes, the spool) stays in Python.
Which one runs is ``spark_zmq.native``'s choice (``RECEIVE``: the option ``captureCore``, else
``SPARK_ZMQ_CAPTURE_CORE``, else ``auto``).
"""

from __future__ import annotations

import select
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, cast

import zmq

from spark_zmq.capture.buffer import BURST, MAX_SEGMENT_BYTES, MAX_SEGMENT_ROWS, Buffer
from spark_zmq.mailbox import Mailbox
from spark_zmq.native import RECEIVE, choose
from spark_zmq.units import milliseconds

if TYPE_CHECKING:
    from spark_zmq.capture.buffer import MessageBuffer
    from spark_zmq.capture.connections import Connection
    from spark_zmq.capture.refusals import Refusals

#: the Python loop: a poll round with fewer messages than this is followed by a pause of
#: COALESCE_SECONDS
COALESCE_BELOW = 64
COALESCE_SECONDS = 0.001
#: the compiled core: the longest pause after a round that emptied the queues it read, so that
#: the next round takes a batch (``receive.Poller``: shorter for a fast peer or a small receive
#: queue, ended by a mailbox command). At 50,000 msg/s in 1 ms bursts, 4 ms rather than a
#: 1 ms pause after thin rounds took capture's CPU per message from about 1.5 to 1.15 us
#: (benchmarks/capture_cpu.py)
LONGEST_PAUSE_SECONDS = 0.004
#: ... and with many endpoints, this much more a watched endpoint, up to MOST_PAUSE_SECONDS.
#: Chosen when every round asked every socket for its events (zmq_poll); the compiled core's
#: rounds now ask only the sockets signalled or called since (``receive.Poller``), so a
#: shorter pause may cost no more, which is not measured yet. In a one-off run with zmq_poll
#: (capture alone, 300 and 1,000 loopback publishers sending 3,000 msg/s in all) capture took
#: 0.31 and 0.54 of a core with 4-ms pauses, 0.21 and 0.27 with 50 ms (the rest is the spool's
#: writes; many_publishers.py measures the whole). The pause still ends
#: at once for a command, and sooner for a fast peer (see above); what it delays is received
#: at the next round, well before the next flush
PAUSE_PER_ENDPOINT_SECONDS = 0.00005
MOST_PAUSE_SECONDS = 0.05
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


def longest_pause(endpoints: int, shortest: float) -> float:
    """The longest pause after a round for a core that watches ``endpoints`` (``shortest``:
    the core's own, for a few endpoints)."""
    return min(MOST_PAUSE_SECONDS, max(shortest, endpoints * PAUSE_PER_ENDPOINT_SECONDS))


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

    def touched(self, conn: Connection) -> None:
        """Python called ``conn``'s sockets itself (``wait`` asks them again)."""
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
        self._pause = COALESCE_SECONDS

    def new_buffer(self, full_run: int, refusals: Refusals) -> MessageBuffer:
        return Buffer(full_run=full_run, refusals=refusals)

    def watch(self, conn: Connection) -> None:
        self._by_socket[conn.socket] = conn
        self._by_monitor[conn.monitor] = conn
        self._poller.register(conn.socket, zmq.POLLIN)
        self._poller.register(conn.monitor, zmq.POLLIN)
        self._pause = longest_pause(len(self._by_socket), COALESCE_SECONDS)

    def unwatch(self, conn: Connection) -> None:
        for sock in (conn.socket, conn.monitor):
            self._poller.unregister(sock)
        self._by_socket.pop(conn.socket, None)
        self._by_monitor.pop(conn.monitor, None)
        self._pause = longest_pause(len(self._by_socket), COALESCE_SECONDS)

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
            # per message (10+ us of CPU each at moderate rates); a command ends the pause.
            select.select([self._mailbox.fileno()], [], [], min(self._pause, max(seconds, 0.0)))
        return events

    def receive(self, conn: Connection) -> None:
        cast(Buffer, conn.buffer).receive_burst(conn.socket)

    def touched(self, conn: Connection) -> None:
        """Nothing to do: each round asks every socket (``zmq_poll``)."""

    def close(self) -> None:
        self._poller.unregister(self._mailbox)


class NativeCore:
    """The compiled core (``receive.Poller``): polls and receives in C without the GIL, and
    returns only when something needs Python or the time to wake has come."""

    name = "native"

    def __init__(self, mailbox: Mailbox, native: ModuleType) -> None:
        """``native``: ``spark_zmq.native.receive``, bound (``spark_zmq.native.choose``)."""
        self._native = native
        self._poller = self._native.Poller(mailbox.fileno(), LONGEST_PAUSE_SECONDS)
        self._watched: dict[int, Connection] = {}  # by id: a Connection is not hashable
        #: what is watched changed since the poller was given it (``_update`` before a wait)
        self._changed = False

    def new_buffer(self, full_run: int, refusals: Refusals) -> MessageBuffer:
        buffer: MessageBuffer = self._native.NativeBuffer(
            MAX_SEGMENT_ROWS, MAX_SEGMENT_BYTES, BURST, full_run, refusals
        )
        return buffer

    def watch(self, conn: Connection) -> None:
        self._watched[id(conn)] = conn
        self._changed = True

    def unwatch(self, conn: Connection) -> None:
        if self._watched.pop(id(conn), None) is not None:
            self._changed = True

    def _update(self) -> None:
        """Give the poller what is watched now. It rebuilds its arrays and epoll set, which
        costs every watched socket; so it is done once before the next ``wait``, not at each
        change: endpoints that join together (a session found at once), or capture stopping
        and unwatching every one, cost one rebuild, not one per endpoint (1,000 endpoints
        stopping took about 6 s of CPU). The poller's old entries are not used in between:
        ``receive`` and the sockets' closing do not go through it, and the rebuild does not
        touch the sockets it drops."""
        self._changed = False
        self._poller.set_longest_pause(longest_pause(len(self._watched), LONGEST_PAUSE_SECONDS))
        self._poller.set_watched(
            [
                (conn, conn.socket.underlying, conn.buffer, conn.monitor.underlying)
                for conn in self._watched.values()
            ]
        )

    def wait(self, seconds: float) -> list[Event]:
        if self._changed:
            self._update()
        events: list[Event] = self._poller.wait(seconds)
        return events

    def receive(self, conn: Connection) -> None:
        self._native.receive(conn.buffer, conn.socket.underlying)
        self.touched(conn)

    def touched(self, conn: Connection) -> None:
        """Python called ``conn``'s sockets: the poller asks them at its next wait (its
        rounds ask only what libzmq signalled, and a call may take a signal's cause)."""
        self._poller.touch(conn)

    def close(self) -> None:
        self._watched.clear()
        self._update()


def make_core(mailbox: Mailbox, choice: str | None = None) -> Core:
    """The core that ``choice`` (else ``SPARK_ZMQ_CAPTURE_CORE``, else ``auto``) asks for
    (``spark_zmq.native.choose``)."""
    native = choose(RECEIVE, choice)
    return PythonCore(mailbox) if native is None else NativeCore(mailbox, native)
