"""Capture: owns the zmq sockets, receives continuously and appends raw frames to the spool.

One thread runs a poll loop over one socket per endpoint. Per message it does only
``recv_multipart`` and two list appends; turning the frames into Arrow and writing a spool
segment happens once per flush (every ``flush_interval`` seconds, every 65536 messages or 32 MiB
of a partition, and whenever the reader asks via ``sync``). Decoding happens later, on executors.

Discovery calls ``endpoint_joined``/``endpoint_left`` from its own threads; those calls are queued
and applied by the capture thread, because zmq sockets belong to one thread. An endpoint that
leaves is still read until its peer closes the connection (or for ``LEAVE_GRACE`` seconds):
discovery often reports a peer gone before the last messages it sent have arrived.

Gaps are never silent: a connection that zmq drops and re-establishes (a message over
``max_message_bytes`` makes zmq drop it; so does a protocol error or a publisher restart) and
messages dropped at the spool's bound are written into the partition as fault rows and logged.

Hostile or broken peers cost one log line per episode, never one per message or per retry; each
kind has a module of its own: ``health`` (handshakes, drops, reconnects), ``pushback`` (a peer
faster than capture), ``drops`` (messages the spool cannot take), and ``buffer`` (what a
partition holds between flushes, bounded in bytes).
"""

from __future__ import annotations

import threading
import time

import zmq
from zmq.utils.monitor import recv_monitor_message

from spark_zmq.capture.buffer import Buffer
from spark_zmq.capture.connections import Connection, Sockets
from spark_zmq.capture.pushback import PUSH_BACK_SECONDS
from spark_zmq.capture.spooling import SegmentWriter
from spark_zmq.errors import CaptureError, CaptureTimeout
from spark_zmq.log import logger
from spark_zmq.mailbox import Mailbox
from spark_zmq.protocols.base import Endpoint
from spark_zmq.security import NO_CURVE, Curve
from spark_zmq.spool.layout import LeaseLost
from spark_zmq.spool.writer import Spool

#: a poll round with fewer messages than this is followed by a pause of COALESCE_SECONDS
COALESCE_BELOW = 64
COALESCE_SECONDS = 0.001
#: seconds an endpoint that discovery reports gone is still read, for what it sent before going
LEAVE_GRACE = 2.0
#: seconds still read after the peer of a leaving endpoint closed its connection
LEAVE_SETTLE = 0.05


class Capture:
    """Receives from every endpoint discovery reports and appends to ``spool``."""

    def __init__(
        self,
        spool: Spool,
        *,
        max_message_bytes: int,
        flush_interval: float,
        name: str = "capture",
        drop_on_write_error: bool = False,
        curve: Curve = NO_CURVE,
        receive_hwm: int = 0,
    ) -> None:
        self.spool = spool
        self.max_message_bytes = max_message_bytes
        self.flush_interval = flush_interval
        self.name = name
        self._mailbox = Mailbox()  # join/leave from discovery; wake-ups for sync/close
        #: CURVE client settings of every socket capture opens; receive_hwm: messages zmq
        #: queues per endpoint before it pushes back on the peer (0: no bound)
        self._sockets = Sockets(
            name,
            self._mailbox,
            curve=curve,
            receive_hwm=receive_hwm,
            max_message_bytes=max_message_bytes,
        )
        self._writer = SegmentWriter(spool, name, drop_on_write_error)
        self._connections: dict[str, Connection] = {}
        self._stopping = False
        self._sync_lock = threading.Condition()
        self._sync_asked = 0
        self._sync_done = 0
        self._failure: BaseException | None = None
        self._next_load_check = 0.0
        self._thread = threading.Thread(target=self._run, name=f"spark_zmq {name}", daemon=True)
        # The last flush may run during interpreter shutdown (atexit after SIGTERM), when
        # pyarrow can no longer import its lazily loaded parts: load them now.
        Buffer([[b""]], [0]).table()

    # -- called from other threads -------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def endpoint_joined(self, endpoint: Endpoint) -> None:
        self._command(("join", endpoint))

    def endpoint_left(self, key: str) -> None:
        self._command(("leave", key))

    def received(self) -> dict[str, int]:
        """Messages received per partition since start (read without locking: a statistic)."""
        return {key: conn.received for key, conn in list(self._connections.items())}

    def handshake_failures(self) -> dict[str, int]:
        """Failed handshakes per partition since its last success (a statistic)."""
        return {k: c.health.handshake_failures for k, c in list(self._connections.items())}

    def sync(self, timeout: float = 10.0) -> None:
        """Return once everything received before this call is in the spool."""
        with self._sync_lock:
            self._sync_asked += 1
            wanted = self._sync_asked
        self._mailbox.wake()
        with self._sync_lock:
            done = self._sync_lock.wait_for(
                lambda: self._sync_done >= wanted or not self._thread.is_alive(), timeout
            )
        self._raise_if_failed()
        if not done:
            raise CaptureTimeout(f"{self.name}: capture did not flush within {timeout} s")

    def close(self, timeout: float = 10.0) -> None:
        """Stop receiving, write what was received, close sockets. Idempotent."""
        if self._mailbox.closed:
            return
        self._stopping = True
        self._mailbox.wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self._mailbox.close()

    def _command(self, command: tuple) -> None:
        self._mailbox.post(command)

    def check(self) -> None:
        """Raise the error that stopped capture, if any."""
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise CaptureError(f"{self.name}: capture failed: {self._failure}") from self._failure

    # -- the capture thread --------------------------------------------------------------------

    def _run(self) -> None:
        next_flush = time.monotonic() + self.flush_interval
        try:
            while not self._stopping:
                recheck_at = self._next_recheck()
                leave_at = self._next_leave()
                wake_at = min(next_flush, recheck_at, leave_at)
                received = 0
                for ready, conn in self._sockets.poll(wake_at - time.monotonic()):
                    if ready == "mailbox":
                        self._apply_commands()
                    elif conn is not None and ready == "message":
                        received += self._receive(conn)
                    elif conn is not None:
                        self._on_monitor_event(conn)
                if recheck_at <= time.monotonic():
                    self._reopen_abandoned()
                if leave_at <= time.monotonic():
                    self._finish_leaving()
                if time.monotonic() >= self._next_load_check:
                    self._end_push_backs()
                if time.monotonic() >= next_flush or self._sync_pending():
                    self._flush_all()
                    next_flush = time.monotonic() + self.flush_interval
                elif 0 < received < COALESCE_BELOW:
                    # A thin round: let a batch build up in zmq's queue rather than pay a
                    # poll round per message (10+ us of CPU each at moderate rates).
                    time.sleep(COALESCE_SECONDS)
        except LeaseLost as exc:  # a newer holder took the partition over: stop writing
            self._failure = exc
            logger.warning("%s: capture stopped: %s", self.name, exc)
        except BaseException as exc:  # surfaced to the reader through sync()
            self._failure = exc
            logger.exception("%s: capture stopped by an error", self.name)
        finally:
            self._shutdown()

    def _receive(self, conn: Connection) -> int:
        """Take one burst from ``conn``'s socket into its buffer, and write the buffer when it
        is full (see ``buffer``: it never holds more than MAX_SEGMENT_BYTES plus one message,
        so a flood of large messages costs at most that, plus zmq's queue)."""
        count, emptied = conn.buffer.receive_burst(conn.socket)
        conn.received += count
        conn.load.after_burst(count, emptied, conn.received)
        if conn.buffer.full:
            self._flush(conn)
        return count

    def _end_push_backs(self) -> None:
        now = time.monotonic()
        self._next_load_check = now + PUSH_BACK_SECONDS / 4
        for conn in self._connections.values():
            conn.load.check(now, conn.received)

    def _on_monitor_event(self, conn: Connection) -> None:
        event = recv_monitor_message(conn.monitor)["event"]
        if event == zmq.EVENT_DISCONNECTED and conn.leave_by is not None:
            # the peer of a leaving endpoint closed the connection: what it sent has arrived
            conn.leave_by = min(conn.leave_by, time.monotonic() + LEAVE_SETTLE)
            return
        gap = conn.health.on_event(event)
        if gap is not None:
            conn.buffer.add_fault(gap)

    def _reopen_abandoned(self) -> None:
        """A connection zmq gave up (see ``health``) gets a new socket."""
        now = time.monotonic()
        for conn in list(self._connections.values()):
            if conn.health.abandoned(now, self.max_message_bytes):
                self._sockets.reopen(conn)

    def _next_recheck(self) -> float:
        times = [
            c.health.recheck_at
            for c in self._connections.values()
            if c.health.recheck_at is not None
        ]
        return min(times, default=float("inf"))

    def _next_leave(self) -> float:
        times = [c.leave_by for c in self._connections.values() if c.leave_by is not None]
        return min(times, default=float("inf"))

    def _apply_commands(self) -> None:
        for command, arg in self._mailbox.take():
            if command == "join":
                self._join(arg)
            else:
                self._leave(arg)

    def _join(self, endpoint: Endpoint) -> None:
        old = self._connections.get(endpoint.key)
        if old is not None and old.leave_by is not None:
            if old.endpoint == endpoint:  # back before it was let go
                old.leave_by = None
                logger.info("%s: endpoint %s is back", self.name, endpoint.key)
                return
            self._finish_leave(old)
            old = None
        if old is not None:
            if old.endpoint == endpoint:
                return
            if (
                old.endpoint.address == endpoint.address
                and old.endpoint.socket_type == endpoint.socket_type
            ):
                self._receive(old)
                self._flush(old)  # rows so far keep the metadata they arrived under
                self._sockets.resubscribe(
                    old.socket, old.endpoint.subscriptions, endpoint.subscriptions
                )
                old.endpoint = endpoint
                logger.info(
                    "%s: endpoint %s updated its metadata or subscriptions", self.name, endpoint.key
                )
                return
            self._finish_leave(old)
        self.spool.open_partition(endpoint.key)
        self._connections[endpoint.key] = self._sockets.connect(endpoint)
        logger.info("%s: endpoint joined: %s at %s", self.name, endpoint.key, endpoint.address)

    def _leave(self, key: str) -> None:
        """Discovery says the endpoint is gone: read on until its peer closes the connection."""
        conn = self._connections.get(key)
        if conn is None or conn.leave_by is not None:
            return
        settle = LEAVE_SETTLE if conn.health.disconnected_at is not None else LEAVE_GRACE
        conn.leave_by = time.monotonic() + settle
        conn.health.recheck_at = None
        logger.info(
            "%s: endpoint left: %s at %s; reading what it sent until it disconnects",
            self.name,
            key,
            conn.endpoint.address,
        )

    def _finish_leaving(self) -> None:
        now = time.monotonic()
        for conn in list(self._connections.values()):
            if conn.leave_by is not None and conn.leave_by <= now:
                self._finish_leave(conn)

    def _finish_leave(self, conn: Connection) -> None:
        key = conn.endpoint.key
        del self._connections[key]
        self._receive(conn)  # what already arrived is kept
        self._flush(conn)
        self._sockets.close(conn)
        self.spool.retire(key)
        logger.info("%s: partition %s retired after %d messages", self.name, key, conn.received)

    def _sync_pending(self) -> bool:
        return self._sync_asked > self._sync_done

    def _flush_all(self) -> None:
        with self._sync_lock:
            wanted = self._sync_asked
        for conn in self._connections.values():
            self._receive(conn)
            self._flush(conn)
        with self._sync_lock:
            self._sync_done = max(self._sync_done, wanted)
            self._sync_lock.notify_all()

    def _flush(self, conn: Connection) -> None:
        self._writer.flush(conn)

    def _shutdown(self) -> None:
        fenced = isinstance(self._failure, LeaseLost)  # nothing more may be written
        for conn in list(self._connections.values()):
            if not fenced:
                self._writer.write_last(conn, self._receive)
            self._sockets.close(conn)
        self._connections.clear()
        self._sockets.shutdown()
        with self._sync_lock:
            self._sync_lock.notify_all()
