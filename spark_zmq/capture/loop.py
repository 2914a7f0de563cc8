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
from dataclasses import dataclass, field

import zmq
from zmq.utils.monitor import recv_monitor_message

from spark_zmq.capture.buffer import Buffer
from spark_zmq.capture.drops import DropEpisode
from spark_zmq.capture.health import HANDSHAKE_SECONDS, MONITORED, Health
from spark_zmq.capture.mailbox import Mailbox
from spark_zmq.capture.pushback import PUSH_BACK_SECONDS, PushBack
from spark_zmq.errors import CaptureError, CaptureTimeout
from spark_zmq.log import logger
from spark_zmq.protocols.base import Endpoint
from spark_zmq.security import NO_CURVE, Curve
from spark_zmq.spool.layout import LeaseLost, SpoolWriteError
from spark_zmq.spool.writer import Spool
from spark_zmq.units import milliseconds

#: a poll round with fewer messages than this is followed by a pause of COALESCE_SECONDS
COALESCE_BELOW = 64
COALESCE_SECONDS = 0.001
#: seconds an endpoint that discovery reports gone is still read, for what it sent before going
LEAVE_GRACE = 2.0
#: seconds still read after the peer of a leaving endpoint closed its connection
LEAVE_SETTLE = 0.05


@dataclass
class _Connection:
    """One endpoint: its socket and monitor, what it sent since the last flush, and the state
    of each kind of episode it can be in."""

    endpoint: Endpoint
    socket: zmq.Socket
    monitor: zmq.Socket
    health: Health
    load: PushBack
    drops: DropEpisode
    buffer: Buffer = field(default_factory=Buffer)
    received: int = 0  # messages received since capture started
    leave_by: float | None = None  # set when discovery reported it gone


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
        self.curve = curve  # CURVE client settings of every socket capture opens
        self.max_message_bytes = max_message_bytes
        #: messages zmq queues per endpoint before it pushes back on the peer (0: no bound)
        self.receive_hwm = receive_hwm
        #: a spool that cannot be written: drop and count (True) or stop capture (False)
        self.drop_on_write_error = drop_on_write_error
        self.flush_interval = flush_interval
        self.name = name
        self._context: zmq.Context = zmq.Context.instance()
        self._mailbox = Mailbox()  # join/leave from discovery; wake-ups for sync/close
        self._connections: dict[str, _Connection] = {}
        self._by_socket: dict[zmq.Socket, _Connection] = {}
        self._by_monitor: dict[zmq.Socket, _Connection] = {}
        self._poller = zmq.Poller()
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
        self._poller.register(self._mailbox, zmq.POLLIN)
        next_flush = time.monotonic() + self.flush_interval
        try:
            while not self._stopping:
                recheck_at = self._next_recheck()
                leave_at = self._next_leave()
                wake_at = min(next_flush, recheck_at, leave_at)
                received = 0
                for item, _ in self._poller.poll(milliseconds(wake_at - time.monotonic())):
                    if item in self._by_socket:
                        received += self._receive(self._by_socket[item])
                    elif item == self._mailbox.fileno():
                        self._apply_commands()
                    elif item in self._by_monitor:
                        self._on_monitor_event(self._by_monitor[item])
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

    def _receive(self, conn: _Connection) -> int:
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

    def _on_monitor_event(self, conn: _Connection) -> None:
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
                self._unregister(conn)
                conn.socket, conn.monitor = self._open_socket(conn.endpoint)
                self._register(conn)

    def _next_recheck(self) -> float:
        times = [c.health.recheck_at for c in self._connections.values() if c.health.recheck_at]
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
                self._resubscribe(old.socket, old.endpoint.subscriptions, endpoint.subscriptions)
                old.endpoint = endpoint
                logger.info(
                    "%s: endpoint %s updated its metadata or subscriptions", self.name, endpoint.key
                )
                return
            self._finish_leave(old)
        self.spool.open_partition(endpoint.key)
        key, address = endpoint.key, endpoint.address
        conn = _Connection(
            endpoint,
            *self._open_socket(endpoint),
            health=Health(self.name, address, key),
            load=PushBack(self.name, address, key, self.receive_hwm),
            drops=DropEpisode(self.name, key),
        )
        self._connections[key] = conn
        self._register(conn)
        logger.info("%s: endpoint joined: %s at %s", self.name, key, address)

    def _open_socket(self, endpoint: Endpoint) -> tuple[zmq.Socket, zmq.Socket]:
        sock = self.curve.as_client(self._context.socket(endpoint.socket_type))
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, self.receive_hwm)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_SECONDS * 1000)
        if endpoint.socket_type == zmq.SUB:
            for prefix in endpoint.subscriptions:
                sock.setsockopt(zmq.SUBSCRIBE, prefix)
        monitor = sock.get_monitor_socket(MONITORED)
        sock.connect(endpoint.address)
        return sock, monitor

    @staticmethod
    def _resubscribe(sock: zmq.Socket, old: tuple[bytes, ...], new: tuple[bytes, ...]) -> None:
        """Change a live SUB socket's subscriptions: no reconnect, nothing in flight lost."""
        if sock.type != zmq.SUB:
            return
        for prefix in set(new) - set(old):
            sock.setsockopt(zmq.SUBSCRIBE, prefix)
        for prefix in set(old) - set(new):
            sock.setsockopt(zmq.UNSUBSCRIBE, prefix)

    def _register(self, conn: _Connection) -> None:
        self._by_socket[conn.socket] = conn
        self._by_monitor[conn.monitor] = conn
        self._poller.register(conn.socket, zmq.POLLIN)
        self._poller.register(conn.monitor, zmq.POLLIN)

    def _unregister(self, conn: _Connection) -> None:
        """Close the connection's sockets (its buffered messages stay)."""
        for sock in (conn.socket, conn.monitor):
            self._poller.unregister(sock)
        self._by_socket.pop(conn.socket, None)
        self._by_monitor.pop(conn.monitor, None)
        conn.socket.disable_monitor()
        conn.monitor.close(0)
        conn.socket.close(0)

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

    def _finish_leave(self, conn: _Connection) -> None:
        key = conn.endpoint.key
        del self._connections[key]
        self._receive(conn)  # what already arrived is kept
        self._flush(conn)
        self._unregister(conn)
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

    def _flush(self, conn: _Connection) -> None:
        if not len(conn.buffer):
            return
        taken = conn.buffer.take()
        key = conn.endpoint.key
        if not self.spool.has_room(key):
            bound = (
                f"the spool {self.spool.root} reached maxSpoolBytes ({self.spool.max_bytes} bytes)"
            )
            self._drop(conn, taken, bound)
            return
        try:
            if conn.drops:
                self._end_drop_episode(conn, taken.times[0])
            self.spool.append(key, conn.endpoint.source, taken.table())
        except SpoolWriteError as exc:
            if not self.drop_on_write_error:
                raise SpoolWriteError(
                    f"{exc}. The spool holds everything written before; the {len(taken)} "
                    f"messages of this flush are lost. Free the storage, or set "
                    f"onSpoolWriteError=drop to drop and count messages while the spool cannot "
                    f"be written"
                ) from None
            self._drop(conn, taken, f"the spool could not be written ({exc})")

    def _drop(self, conn: _Connection, taken: Buffer, cause: str) -> None:
        """Drop new messages, count them, and keep capture's own fault rows if it can."""
        conn.drops.drop(len(taken) - len(taken.faults), taken.times[0], cause)
        if not taken.faults:
            return
        kept = sorted(taken.faults)
        faults = Buffer(
            [[] for _ in kept],
            [taken.times[i] for i in kept],
            {n: taken.faults[i] for n, i in enumerate(kept)},
        )
        try:
            self.spool.append(conn.endpoint.key, conn.endpoint.source, faults.table())
        except SpoolWriteError:
            pass  # lost within the episode that the gap row reports

    def _end_drop_episode(self, conn: _Connection, until: int) -> None:
        """Write the gap row of a drop episode (raises SpoolWriteError if it still cannot)."""
        text = conn.drops.gap_text(until)
        gap = Buffer([[]], [until], {0: text})
        self.spool.append(
            conn.endpoint.key, conn.endpoint.source, gap.table(), dropped=conn.drops.count
        )
        conn.drops.ended(text)

    def _shutdown(self) -> None:
        fenced = isinstance(self._failure, LeaseLost)  # nothing more may be written
        for conn in list(self._connections.values()):
            if not fenced:
                self._write_last(conn)
            self._unregister(conn)
        self._connections.clear()
        self._poller.unregister(self._mailbox)
        with self._sync_lock:
            self._sync_lock.notify_all()

    def _write_last(self, conn: _Connection) -> None:
        try:
            self._receive(conn)
            self._flush(conn)
            if conn.drops:
                self._end_drop_episode(conn, time.time_ns())
        except LeaseLost as exc:
            logger.warning(
                "%s: last messages of %s not written: %s", self.name, conn.endpoint.key, exc
            )
        except Exception:  # keep closing the others
            logger.exception(
                "%s: could not write the last messages of %s", self.name, conn.endpoint.key
            )
