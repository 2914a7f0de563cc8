"""Capture: owns the zmq sockets, receives continuously and appends raw frames to the spool.

One thread runs a poll loop over one socket per endpoint. Receiving is the job of a core
(``receiving``): the compiled one receives in C without the GIL, straight into Arrow-ready arrays,
and comes back to this loop only when something needs Python; the Python one (the fallback) does
one ``recv_multipart`` and two list appends per message. Turning a buffer into Arrow and writing
a spool segment happens once per flush (every ``flush_interval`` seconds, every 65536 messages
or 32 MiB of a partition, and whenever the reader asks via ``sync``). Decoding happens later, on
executors.

Discovery calls ``endpoint_joined``/``endpoint_left`` from its own threads; those calls are queued
and applied by the capture thread, because zmq sockets belong to one thread (``membership`` says
what joining and leaving do). Other threads ask for a flush through ``sync`` (see ``sync``).

Gaps are never silent: a connection that zmq drops and re-establishes (a frame over
``max_message_bytes`` makes zmq drop it; so does a protocol error or a publisher restart),
messages refused for their size (over ``max_message_bytes`` or ``max_message_parts`` in all),
a receive that fails, and messages dropped at the spool's bound are written into the partition
as fault rows and logged.

Hostile or broken peers cost one log line per episode, never one per message or per retry, and
only their own connection: each kind has a module of its own: ``health`` (handshakes, drops,
reconnects), ``pushback`` (a peer faster than capture), ``refusals`` (messages over the bounds
of one message, failed receives), ``drops`` (messages the spool cannot take), and ``buffer``
(what a partition holds between flushes, bounded in bytes).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any

from spark_zmq.capture import receiving
from spark_zmq.capture.connections import Connection
from spark_zmq.capture.membership import Membership
from spark_zmq.capture.priority import PriorityOutcome, protect_capture, restore_main_thread
from spark_zmq.capture.refusals import DEFAULT_MAX_MESSAGE_PARTS, Refusals
from spark_zmq.capture.sockets import Sockets
from spark_zmq.capture.spooling import SegmentWriter
from spark_zmq.capture.stats import DISCOVERY_EVENTS, CaptureCounts, CaptureStats
from spark_zmq.capture.sync import FlushRequests
from spark_zmq.capture.upkeep import ConnectionUpkeep
from spark_zmq.errors import CaptureError, CaptureTimeout
from spark_zmq.log import logger
from spark_zmq.mailbox import Mailbox
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.security import NO_CURVE, Curve
from spark_zmq.spool.downtime import Downtime
from spark_zmq.spool.layout import LeaseLost
from spark_zmq.spool.writer import Spool

if TYPE_CHECKING:
    from spark_zmq.stream_settings import CaptureSettings

#: a clean stop goes on receiving until no socket has had a message for STOP_QUIET_SECONDS, for
#: at most STOP_LINGER_SECONDS: what the peers sent before the stop that zmq had not yet handed
#: over (still in its I/O thread or in the kernel, seen to take 20 ms and more on a loaded
#: machine) is captured, not dropped with the socket; a restart dates its gap row from the stop
STOP_QUIET_SECONDS = 0.1
STOP_LINGER_SECONDS = 0.5


#: ``flushIntervalMs=auto``: a flush writes a segment (a hard link and an index line) for every
#: endpoint with messages, so with many endpoints capture flushes less often: every
#: AUTO_FLUSH_SECONDS, or AUTO_FLUSH_PER_ENDPOINT_SECONDS an endpoint when that is longer, at
#: most AUTO_FLUSH_MOST_SECONDS (what a killed capture loses, marked by a gap row). With 300
#: publishers at 10 msg/s each, flushes every 500 ms rather than 100 took capture's CPU from
#: 0.12 to 0.05 ms a message and the micro-batch from 0.72 to 0.42 s (many_publishers.py)
AUTO_FLUSH_SECONDS = 0.1
AUTO_FLUSH_PER_ENDPOINT_SECONDS = 0.002
AUTO_FLUSH_MOST_SECONDS = 1.0


def auto_flush_interval(endpoints: int) -> float:
    """The flush interval of ``flushIntervalMs=auto`` with ``endpoints`` captured."""
    return min(
        AUTO_FLUSH_MOST_SECONDS,
        max(AUTO_FLUSH_SECONDS, endpoints * AUTO_FLUSH_PER_ENDPOINT_SECONDS),
    )


class Capture:
    """Receives from every endpoint discovery reports and appends to ``spool``."""

    def __init__(
        self,
        spool: Spool,
        *,
        max_message_bytes: int,
        flush_interval: float | None,
        name: str = "capture",
        drop_on_write_error: bool = False,
        curve: Curve = NO_CURVE,
        receive_hwm: int = 0,
        core: str | None = None,
        max_message_parts: int = DEFAULT_MAX_MESSAGE_PARTS,
        downtime: Downtime | None = None,
        nice: int | None = None,
        own_process: bool = False,
    ) -> None:
        """``core``: "native", "python" or "auto" (the default, or SPARK_ZMQ_CAPTURE_CORE):
        which receive loop runs (see ``receiving``). ``max_message_bytes`` (all frames) and
        ``max_message_parts`` bound one message: a larger one is refused (``refusals``).
        ``downtime``: the partitions not captured while capture was not running, each owed a
        gap row when its endpoint is read again, and the alive record this capture keeps
        (``spool.downtime``). ``nice``: the nice value of capture's thread and its zmq I/O
        thread (``priority``; None: as the process runs); ``own_process``: this process is
        capture's (``of``), and its main thread gets ``nice`` too."""
        self.spool = spool
        self.max_message_bytes = max_message_bytes
        self.flush_interval = flush_interval
        self.name = name
        self._mailbox = Mailbox()  # join/leave from discovery; wake-ups for sync/close
        self._core = receiving.make_core(self._mailbox, core)
        self.stats = CaptureStats()
        #: CURVE client settings of every socket capture opens; receive_hwm: messages zmq
        #: queues per endpoint before it pushes back on the peer (0: no bound)
        sockets = Sockets(
            name,
            self._core,
            curve=curve,
            receive_hwm=receive_hwm,
            max_message_bytes=max_message_bytes,
            max_message_parts=max_message_parts,
            thread_prefix=self.stats.thread_prefix,
        )
        self._loop = CaptureThread(
            name,
            spool,
            self._mailbox,
            self._core,
            sockets,
            flush_interval=flush_interval,
            drop_on_write_error=drop_on_write_error,
            downtime=downtime,
            nice=nice,
            own_process=own_process,
            stats=self.stats,
        )
        self._thread = threading.Thread(
            target=self._loop.run, name=f"spark_zmq {name}", daemon=True
        )
        # The last flush may run during interpreter shutdown (atexit after SIGTERM), when
        # pyarrow can no longer import its lazily loaded parts: load them now.
        warm = self._core.new_buffer(
            1, Refusals(name, "", "", max_message_bytes, max_message_parts)
        )
        warm.add_fault("")
        warm.table()

    @classmethod
    def of(
        cls,
        spool: Spool,
        settings: CaptureSettings,
        name: str,
        downtime: Downtime | None = None,
    ) -> Capture:
        """A capture configured from the query's options (``CaptureSettings``), in a process
        of its own: the query's source process, a holder, or the capture service."""
        return cls(
            spool,
            max_message_bytes=settings.max_message_bytes,
            flush_interval=settings.flush_interval,
            name=name,
            drop_on_write_error=settings.drop_on_write_error,
            curve=settings.curve_keys(),
            receive_hwm=settings.receive_hwm,
            core=settings.core,
            max_message_parts=settings.max_message_parts,
            downtime=downtime,
            nice=settings.nice,
            own_process=True,
        )

    @property
    def core(self) -> str:
        """Which receive loop runs: "native" (the compiled core) or "python"."""
        return self._core.name

    # -- called from other threads -------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def endpoint_joined(self, endpoint: Endpoint) -> None:
        self._command(("join", endpoint))

    def endpoint_left(self, key: str) -> None:
        self._command(("leave", key))

    def endpoint_dropped(self, key: str, why: str) -> None:
        """Stop reading ``key`` at once and write nothing more of it: its partition is another
        process's now (``why`` says so in the log line)."""
        self._command(("drop", (key, why)))

    def received(self) -> dict[str, int]:
        """Messages received per partition since start (read without locking: a statistic)."""
        return {key: conn.received for key, conn in self._loop.members.items()}

    def counts(self) -> CaptureCounts:
        """What capture counted, for a scrape of its metrics (read without locking: a scrape
        may see a flush half counted)."""
        members = self._loop.members
        connections = [conn for _, conn in members.items()]
        live = sum(1 for conn in connections if conn.health.up)
        return CaptureCounts(
            received={conn.endpoint.key: conn.received for conn in connections},
            written_bytes={conn.endpoint.key: conn.written_bytes for conn in connections},
            last_message_at={
                conn.endpoint.key: conn.last_message_at
                for conn in connections
                if conn.last_message_at
            },
            live=live,
            connecting=len(connections) - live,
            refused=members.refused,
            discovery_events={event: members.events[event] for event in DISCOVERY_EVENTS},
            flushes=self.stats.flushes.histogram(),
            cpu_seconds=self.stats.cpu_seconds(),
        )

    def handshake_failures(self) -> dict[str, int]:
        """Failed handshakes per partition since its last success (a statistic)."""
        return {k: c.health.handshake_failures for k, c in self._loop.members.items()}

    def sync(self, timeout: float = 10.0) -> None:
        """Return once everything received before this call is in the spool."""
        ticket = self._loop.flushes.ask()
        self._mailbox.wake()
        done = self._loop.flushes.wait(ticket, timeout, self._thread.is_alive)
        self._raise_if_failed()
        if not done:
            raise CaptureTimeout(f"{self.name}: capture did not flush within {timeout} s")

    def waive_downtime(self, timeout: float = 10.0) -> set[str]:
        """Owe no gap row for the time before this capture started: a new query reads from its
        capture's start, so what an earlier run missed is not its loss. Returns the partitions
        whose row was written already (``Downtime.waive``)."""
        waived: Future[set[str]] = Future()
        self._command(("waive", waived))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                return waived.result(timeout=0.1)
            except FutureTimeout:
                self._raise_if_failed()
        raise CaptureTimeout(f"{self.name}: capture did not answer within {timeout} s")

    def close(self, timeout: float = 10.0) -> None:
        """Stop receiving, write what was received, close sockets. Idempotent."""
        if self._mailbox.closed:
            return
        self._loop.stopping = True
        self._mailbox.wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self._mailbox.close()

    def _command(self, command: tuple[str, Any]) -> None:
        self._mailbox.post(command)

    def check(self) -> None:
        """Raise the error that stopped capture, if any."""
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        failure = self._loop.failure
        if failure is not None:
            raise CaptureError(f"{self.name}: capture failed: {failure}") from failure


class CaptureThread:
    """The capture thread's side of a ``Capture``: the poll loop, flushes, and the end.

    Only this thread touches the sockets; other threads reach it through ``mailbox`` (join and
    leave) and ``flushes`` (sync), and read ``failure`` and set ``stopping``.
    """

    def __init__(
        self,
        name: str,
        spool: Spool,
        mailbox: Mailbox,
        core: receiving.Core,
        sockets: Sockets,
        *,
        flush_interval: float | None,
        drop_on_write_error: bool,
        downtime: Downtime | None,
        nice: int | None,
        own_process: bool,
        stats: CaptureStats,
    ) -> None:
        self.name = name
        self.spool = spool
        self.stats = stats
        self.mailbox = mailbox
        self._core = core
        self._sockets = sockets
        self.flush_interval = flush_interval
        self._downtime = downtime
        self.nice = nice
        self.own_process = own_process
        self._priority: PriorityOutcome | None = None
        self._writer = SegmentWriter(spool, name, drop_on_write_error, downtime)
        self.members = Membership(name, spool, sockets, self._drain, downtime)
        self._upkeep = ConnectionUpkeep(name, sockets, self.members, sockets.max_message_bytes)
        self._unwritten = False  # the last messages of a connection could not be written
        self.stopping = False
        self._next_flush = 0.0  # (monotonic) when every connection is flushed next
        self.flushes = FlushRequests()
        self.failure: BaseException | None = None

    def run(self) -> None:
        self.stats.thread_id = threading.get_native_id()
        # before any socket: zmq's threads inherit it
        self._priority = protect_capture(self.name, self.nice, self.own_process)
        logger.info("%s: capture runs the %s receive loop", self.name, self._core.name)
        self._next_flush = time.monotonic() + self._flush_interval()
        try:
            while not self.stopping:
                try:
                    self._turn()
                except LeaseLost as exc:
                    self._let_go(exc)
        except LeaseLost as exc:  # a newer holder took over what this capture writes
            self.failure = exc
            logger.warning("%s: capture stopped: %s", self.name, exc)
        except BaseException as exc:  # surfaced to the reader through sync()
            self.failure = exc
            logger.exception("%s: capture stopped by an error", self.name)
        finally:
            self._shutdown()

    def _turn(self) -> None:
        """One turn of the poll loop: wait for messages or the next thing due, then do what is
        due (reopen connections, let leaving endpoints go, end push-back episodes, flush)."""
        recheck_at = self._upkeep.next_recheck()
        leave_at = self.members.next_leave()
        push_backs_at = self._upkeep.next_push_back_check()
        wake_at = min(self._next_flush, recheck_at, leave_at, push_backs_at)
        self._handle(self._core.wait(wake_at - time.monotonic()))
        if recheck_at <= time.monotonic():
            self._upkeep.reopen_abandoned()
        if leave_at <= time.monotonic():
            self.members.retire_left()
        if time.monotonic() >= self._upkeep.next_load_check:
            self._upkeep.end_push_backs()
        if time.monotonic() >= self._next_flush or self.flushes.pending:
            began, started = time.time(), time.perf_counter()
            self._flush_all()
            self.stats.flushes.observe(time.perf_counter() - started)
            if self._downtime is not None:
                self._downtime.alive(began)
            self._next_flush = time.monotonic() + self._flush_interval()

    def _flush_interval(self) -> float:
        """Seconds to the next flush: ``flush_interval``, or by the endpoints (None: auto)."""
        if self.flush_interval is not None:
            return self.flush_interval
        return auto_flush_interval(len(self.members))

    def _let_go(self, lost: LeaseLost) -> None:
        """A newer holder took over one partition read here (a capture process on an executor
        holds many): stop reading it, write nothing more of it, and capture on for the others.
        One that names no partition read here stops capture."""
        if lost.key is None or lost.key not in self.members:
            raise lost
        self.members.drop(lost.key, str(lost))

    def _handle(self, events: list[receiving.Event]) -> None:
        """What the core's ``wait`` reported."""
        for ready, conn in events:
            if ready == receiving.MAILBOX:
                self._apply_commands()
            elif conn is None:
                continue
            elif ready == receiving.FULL:
                self._writer.flush(conn)
            elif ready == receiving.QUEUE_FULL:
                conn.load.queue_full(conn.received)
            elif ready == receiving.FAILED:
                self._upkeep.on_receive_failure(conn, self.stopping)
            else:
                self._upkeep.on_monitor_event(conn)

    def _take_in_flight(self) -> None:
        """Receive on until the sockets are quiet (``STOP_QUIET_SECONDS``), or
        ``STOP_LINGER_SECONDS`` have passed."""
        deadline = time.monotonic() + STOP_LINGER_SECONDS
        received, quiet_since = self._received(), time.monotonic()
        while (now := time.monotonic()) < deadline and now - quiet_since < STOP_QUIET_SECONDS:
            try:
                self._handle(self._core.wait(min(deadline - now, STOP_QUIET_SECONDS)))
            except LeaseLost as exc:
                self._let_go(exc)
            if (count := self._received()) != received:
                received, quiet_since = count, time.monotonic()

    def _received(self) -> int:
        return sum(conn.received for conn in self.members)

    def _receive(self, conn: Connection) -> None:
        """Take one burst from ``conn``'s socket into its buffer, and write the buffer when it
        is full (see ``buffer``: it never holds more than MAX_SEGMENT_BYTES plus one message,
        so a flood of large messages costs at most that, plus zmq's queue)."""
        self._core.receive(conn)
        self._upkeep.on_receive_failure(conn, self.stopping)
        if conn.buffer.full:
            self._writer.flush(conn)

    def _apply_commands(self) -> None:
        for command, arg in self.mailbox.take():
            try:
                self._apply(command, arg)
            except LeaseLost as exc:  # (joining drains a connection it replaces)
                self._let_go(exc)

    def _apply(self, command: str, arg: Any) -> None:
        if command == "join":
            self.members.join(arg)
        elif command == "drop":
            self.members.drop(*arg)
        elif command == "waive":
            arg.set_result(self._waive())
        else:
            self.members.leave(arg)

    def _waive(self) -> set[str]:
        """See ``Capture.waive_downtime``; between flushes, so each owed row is written or not
        planned."""
        if self._downtime is None:
            return set()
        for conn in self.members:
            conn.down_since = None
        return self._downtime.waive()

    def _flush_all(self) -> None:
        tickets = self.flushes.start_flush()
        # what arrived since the last round, in one round of the sockets that are ready (not a
        # receive from each: a call each, which every idle endpoint would pay each flush)
        self._handle(self._core.wait(0))
        for lost in self._writer.flush_all(list(self.members)):
            self._let_go(lost)
        self.spool.write_commits()  # those that no segment line took along
        self.spool.expire()  # retention by age runs with nothing new written, too
        self.flushes.served(tickets)

    def _drain(self, conn: Connection) -> None:
        """What ``conn``'s socket holds now, and its buffer, into the spool."""
        self._receive(conn)
        self._writer.flush(conn)

    def _shutdown(self) -> None:
        """Take what is still on its way (``_take_in_flight``, unless capture failed), write
        what every connection received, close the sockets; then, if all of it is in the spool,
        say so in the alive record (the time a restart dates its gap rows from)."""
        began = time.time()
        if self.failure is None:
            try:
                self._take_in_flight()
            except LeaseLost as exc:
                self.failure = exc
            except Exception as exc:  # what was received still gets written below
                self.failure = exc
                logger.exception("%s: capture failed while stopping", self.name)
        fenced = isinstance(self.failure, LeaseLost)  # nothing more may be written
        read = list(self.members)
        self.members.close_all(None if fenced else self._write_last)
        self._sockets.shutdown()
        received = {conn.endpoint.key: conn.received for conn in read}
        logger.info("%s: capture stopped; %s", self.name, _received_text(received))
        if self._downtime is not None and self.failure is None and not self._unwritten:
            self._downtime.alive(began, force=True)
        self.flushes.wake_all()
        restore_main_thread(self._priority)

    def _write_last(self, conn: Connection) -> None:
        if not self._writer.write_last(conn, self._receive):
            self._unwritten = True


#: endpoints named in the line that says what a capture received (the others are counted)
NAMED_IN_STOP_LINE = 5


def _received_text(received: dict[str, int]) -> str:
    """What the endpoints still read at the stop received since they joined, in one line:
    the total, and the endpoints that received most (``NAMED_IN_STOP_LINE``) with theirs."""
    if not received:
        return "no endpoint was read"
    most = sorted(received.items(), key=lambda item: (-item[1], item[0]))
    shown = ", ".join(f"{key} {count}" for key, count in most[:NAMED_IN_STOP_LINE])
    more = len(most) - NAMED_IN_STOP_LINE
    others = f" and {more} more" if more > 0 else ""
    endpoints = "1 endpoint" if len(received) == 1 else f"{len(received)} endpoints"
    return f"{sum(received.values())} messages received from {endpoints} ({shown}{others})"
