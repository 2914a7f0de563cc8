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

Hostile or broken peers cost one log line per episode, never one per message or per retry:

- a peer that accepts the connection but never completes the ZMTP handshake (stalled, not a zmq
  peer, or refusing our CURVE keys) is retried by zmq every ``HANDSHAKE_SECONDS``; the failure
  is logged once until a handshake succeeds, and an attempt that never got through is not a
  gap (nothing could have been received on it);
- a peer that sends faster than capture takes meets zmq's receive queue, bounded at
  ``receive_hwm`` messages: beyond it zmq stops reading the connection, TCP pushes back, and
  the peer's own send queue fills (a PUB then drops, an XPUB with NODROP waits). Capture's
  memory stays bounded. Capture sees it happen when it reads ``receive_hwm`` messages of an
  endpoint without once finding its queue empty: the queue was full. That is logged once per
  episode, and once more when the queue has not been full for ``PUSH_BACK_SECONDS``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import zmq
from zmq.utils.monitor import recv_monitor_message

from spark_zmq.capture.mailbox import Mailbox
from spark_zmq.log import logger
from spark_zmq.protocols.base import Endpoint
from spark_zmq.security import NO_CURVE, Curve
from spark_zmq.spool.layout import SPOOL_SCHEMA, LeaseLost, SpoolWriteError
from spark_zmq.spool.writer import Spool

#: a partition's buffer is written to the spool when it holds this many messages
MAX_SEGMENT_ROWS = 65536
#: ... or this many bytes of frames (what bounds capture's memory with large messages)
MAX_SEGMENT_BYTES = 32 << 20
#: messages taken from one socket before the loop looks at the others (fewer when their bytes
#: reach MAX_SEGMENT_BYTES first: a burst of large messages is bounded by bytes, not count)
BURST = 1024
_MONITORED = (
    zmq.EVENT_CONNECTED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_CONNECT_DELAYED
    | zmq.EVENT_CONNECT_RETRIED
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
#: seconds after a drop by which zmq shows a reconnect attempt unless it gave the connection up
RECONNECT_CHECK = 0.5
#: a poll round with fewer messages than this is followed by a pause of COALESCE_SECONDS
COALESCE_BELOW = 64
COALESCE_SECONDS = 0.001
#: seconds an endpoint that discovery reports gone is still read, for what it sent before going
LEAVE_GRACE = 2.0
#: seconds still read after the peer of a leaving endpoint closed its connection
LEAVE_SETTLE = 0.05
#: seconds a peer has to complete the ZMTP (and CURVE) handshake before zmq retries it
HANDSHAKE_SECONDS = 10
#: seconds without a full receive queue that end an endpoint's push-back episode
PUSH_BACK_SECONDS = 2.0
#: with no receive bound, a backlog this long (messages) is reported as growing
UNBOUNDED_BACKLOG = 100_000
_HANDSHAKE_FAILURES = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: (
        f"did not complete the zmq handshake within {HANDSHAKE_SECONDS} s (a stalled peer, or "
        f"not a zmq peer)"
    ),
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: (
        "broke the zmq handshake protocol (not a zmq peer, or a socket type that does not fit)"
    ),
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: (
        "refused our CURVE handshake (check curveServerKey, and that the peer allows our key)"
    ),
}


def utc_text(ns: int) -> str:
    """A time in ns since the epoch as ISO 8601 UTC with milliseconds, as gap rows show it."""
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns / 1e9))
        + f".{ns // 1_000_000 % 1000:03d}Z"
    )


@dataclass
class _Connection:
    """One endpoint's socket and the messages received since the last flush."""

    endpoint: Endpoint
    socket: zmq.Socket
    monitor: zmq.Socket
    frames: list = field(default_factory=list)
    times: list = field(default_factory=list)
    buffered_bytes: int = 0  # bytes of the frames in ``frames``
    faults: dict = field(default_factory=dict)  # buffer index -> fault text (rare)
    disconnected_at: int | None = None
    drop_cause: str | None = None
    recheck_at: float | None = None  # see Capture._reopen_abandoned
    dropped_since: int | None = None  # first time of the current drop episode
    dropping_because: str | None = None  # why: the spool's bound, or a write error
    dropped: int = 0
    received: int = 0  # messages received since capture started
    leave_by: float | None = None  # set when discovery reported it gone
    connected_once: bool = False  # the first connection was logged
    handshake_failures: int = 0  # failed attempts since the last success
    run: int = 0  # messages read since the queue was empty
    full_at: float = 0.0  # when the queue was last seen full
    pushed_back: tuple[float, int] | None = None  # an episode: (since, received then)

    def add_fault(self, text: str) -> None:
        self.faults[len(self.frames)] = text
        self.frames.append([])
        self.times.append(time.time_ns())


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
        self._context = zmq.Context.instance()
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
        #: a receive run this long (no empty queue meanwhile) filled zmq's queue
        self._full_run = receive_hwm or UNBOUNDED_BACKLOG
        self._next_load_check = 0.0
        self._thread = threading.Thread(target=self._run, name=f"spark_zmq {name}", daemon=True)
        # The last flush may run during interpreter shutdown (atexit after SIGTERM), when
        # pyarrow can no longer import its lazily loaded parts: load them now.
        spool_table([[b""]], [0], {})

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
            raise TimeoutError(f"{self.name}: capture did not flush within {timeout} s")

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
            raise RuntimeError(f"{self.name}: capture failed: {self._failure}") from self._failure

    # -- the capture thread --------------------------------------------------------------------

    def _run(self) -> None:
        self._poller.register(self._mailbox, zmq.POLLIN)
        next_flush = time.monotonic() + self.flush_interval
        try:
            while not self._stopping:
                recheck_at = self._next_recheck()
                leave_at = self._next_leave()
                wake_at = min(next_flush, recheck_at, leave_at)
                timeout_ms = max(0.0, (wake_at - time.monotonic()) * 1000)
                received = 0
                for item, _ in self._poller.poll(timeout_ms):
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
        is full. Invariant: the buffer never holds more than MAX_SEGMENT_BYTES plus one
        message (the burst stops at the bound), so a flood of large messages costs at most
        that, plus zmq's queue (receiveHighWaterMark messages), whatever the message size."""
        recv = conn.socket.recv_multipart
        frames, times, now = conn.frames, conn.times, time.time_ns
        before, empty = len(frames), False
        buffered = conn.buffered_bytes
        try:
            for _ in range(BURST):
                message = recv(zmq.NOBLOCK)
                frames.append(message)
                times.append(now())
                buffered += sum(map(len, message))
                if buffered >= MAX_SEGMENT_BYTES:
                    break
        except zmq.Again:
            empty = True
        count = len(frames) - before
        conn.received += count
        conn.run += count
        if conn.run >= self._full_run:
            self._queue_full(conn)
        if empty:
            conn.run = 0
        conn.buffered_bytes = buffered
        if len(frames) >= MAX_SEGMENT_ROWS or buffered >= MAX_SEGMENT_BYTES:
            self._flush(conn)
        return count

    def _queue_full(self, conn: _Connection) -> None:
        """zmq's queue of ``conn`` was full: the peer is being pushed back (logged once)."""
        conn.full_at = time.monotonic()
        if conn.pushed_back is not None:
            return
        conn.pushed_back = (conn.full_at, conn.received)
        bound = (
            f"zmq queues at most receiveHighWaterMark={self.receive_hwm} messages, then "
            f"pushes back on the peer, which drops what its own send queue cannot hold (a "
            f"PUB) or waits (an XPUB with NODROP): messages may be lost at the peer, where "
            f"capture cannot count them"
            if self.receive_hwm
            else f"receiveHighWaterMark=0 (no bound): over {UNBOUNDED_BACKLOG} messages wait in "
            f"memory"
        )
        logger.warning(
            "%s: %s (partition %s) sends faster than capture takes: its receive queue is full; %s",
            self.name,
            conn.endpoint.address,
            conn.endpoint.key,
            bound,
        )

    def _end_push_backs(self) -> None:
        now = time.monotonic()
        self._next_load_check = now + PUSH_BACK_SECONDS / 4
        for conn in self._connections.values():
            if conn.pushed_back is not None and now - conn.full_at >= PUSH_BACK_SECONDS:
                since, received = conn.pushed_back
                conn.pushed_back = None
                logger.info(
                    "%s: capture keeps up with %s (partition %s) again, after %.1f s of "
                    "a full receive queue (%d messages received meanwhile)",
                    self.name,
                    conn.endpoint.address,
                    conn.endpoint.key,
                    conn.full_at - since,
                    conn.received - received,
                )

    def _on_monitor_event(self, conn: _Connection) -> None:
        event = recv_monitor_message(conn.monitor)["event"]
        address, key = conn.endpoint.address, conn.endpoint.key
        if event in _HANDSHAKE_FAILURES:
            conn.handshake_failures += 1
            if conn.handshake_failures == 1:
                logger.warning(
                    "%s: %s (partition %s) %s; zmq keeps retrying, logged again only "
                    "once a handshake succeeds",
                    self.name,
                    address,
                    key,
                    _HANDSHAKE_FAILURES[event],
                )
        elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            if conn.handshake_failures:
                logger.info(
                    "%s: handshake with %s (partition %s) succeeded after %d failed attempts",
                    self.name,
                    address,
                    key,
                    conn.handshake_failures,
                )
            conn.handshake_failures = 0
        elif event == zmq.EVENT_DISCONNECTED and conn.leave_by is not None:
            conn.leave_by = min(conn.leave_by, time.monotonic() + LEAVE_SETTLE)
        elif event == zmq.EVENT_DISCONNECTED and conn.handshake_failures:
            # an attempt that never got through: nothing was received, so no gap; if zmq does
            # not retry by itself, the socket is reopened
            conn.recheck_at = time.monotonic() + RECONNECT_CHECK
        elif event == zmq.EVENT_DISCONNECTED:
            conn.disconnected_at = time.time_ns()
            conn.recheck_at = time.monotonic() + RECONNECT_CHECK
            logger.info("%s: lost connection to %s (partition %s)", self.name, address, key)
        elif event in (zmq.EVENT_CONNECT_DELAYED, zmq.EVENT_CONNECT_RETRIED):
            conn.recheck_at = None  # zmq is reconnecting by itself
        elif event == zmq.EVENT_CONNECTED:
            conn.recheck_at = None
            if conn.disconnected_at is None:
                if not conn.connected_once:
                    conn.connected_once = True
                    logger.info("%s: connected to %s (partition %s)", self.name, address, key)
                return
            since, conn.disconnected_at = conn.disconnected_at, None
            cause = conn.drop_cause or (
                "the connection was lost (a publisher restart or a network fault)"
            )
            conn.drop_cause = None
            conn.add_fault(
                f"gap: the connection to {address} was dropped at {utc_text(since)} "
                f"and re-established; what was published meanwhile is lost. Cause: "
                f"{cause}"
            )
            logger.warning(
                "%s: reconnected to %s (partition %s) after a drop; gap recorded",
                self.name,
                address,
                key,
            )

    def _reopen_abandoned(self) -> None:
        """zmq does not reconnect after a protocol error, such as a message over
        ZMQ_MAXMSGSIZE: it reports DISCONNECTED and nothing more. A connection with no
        reconnect attempt soon after its drop gets a new socket."""
        now = time.monotonic()
        for conn in list(self._connections.values()):
            if conn.recheck_at is None or conn.recheck_at > now:
                continue
            if conn.disconnected_at is not None:  # a connection that was up: a gap
                conn.drop_cause = (
                    f"zmq closed the connection on a protocol error, such as a "
                    f"message over maxMessageBytes ({self.max_message_bytes} "
                    f"bytes)"
                )
                logger.warning(
                    "%s: zmq gave up the connection to %s (partition %s) after a "
                    "protocol error, such as a message over maxMessageBytes; "
                    "reconnecting",
                    self.name,
                    conn.endpoint.address,
                    conn.endpoint.key,
                )
            self._unregister(conn)
            conn.socket, conn.monitor = self._open_socket(conn.endpoint)
            conn.recheck_at = None
            self._register(conn)

    def _next_recheck(self) -> float:
        times = [c.recheck_at for c in self._connections.values() if c.recheck_at is not None]
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
        conn = _Connection(endpoint, *self._open_socket(endpoint))
        self._connections[endpoint.key] = conn
        self._register(conn)
        logger.info("%s: endpoint joined: %s at %s", self.name, endpoint.key, endpoint.address)

    def _open_socket(self, endpoint: Endpoint) -> tuple[zmq.Socket, zmq.Socket]:
        sock = self.curve.as_client(self._context.socket(endpoint.socket_type))
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, self.receive_hwm)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_SECONDS * 1000)
        if endpoint.socket_type == zmq.SUB:
            for prefix in endpoint.subscriptions:
                sock.setsockopt(zmq.SUBSCRIBE, prefix)
        monitor = sock.get_monitor_socket(_MONITORED)
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
        settle = LEAVE_SETTLE if conn.disconnected_at is not None else LEAVE_GRACE
        conn.leave_by = time.monotonic() + settle
        conn.recheck_at = None
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
        if not conn.frames:
            return
        frames, times, faults = conn.frames, conn.times, conn.faults
        conn.frames, conn.times, conn.faults, conn.buffered_bytes = [], [], {}, 0
        if not self.spool.has_room(conn.endpoint.key):
            self._drop(
                conn,
                frames,
                times,
                faults,
                f"the spool {self.spool.root} reached maxSpoolBytes ({self.spool.max_bytes} bytes)",
            )
            return
        try:
            if conn.dropped:
                self._end_drop_episode(conn, times[0])
            self.spool.append(
                conn.endpoint.key, conn.endpoint.source, spool_table(frames, times, faults)
            )
        except SpoolWriteError as exc:
            if not self.drop_on_write_error:
                raise SpoolWriteError(
                    f"{exc}. The spool holds everything written before; the {len(frames)} "
                    f"messages of this flush are lost. Free the storage, or set "
                    f"onSpoolWriteError=drop to drop and count messages while the spool cannot "
                    f"be written"
                ) from None
            self._drop(conn, frames, times, faults, f"the spool could not be written ({exc})")

    def _drop(self, conn: _Connection, frames: list, times: list, faults: dict, cause: str) -> None:
        """Drop new messages, count them, and keep capture's own fault rows if it can."""
        if conn.dropped_since is None:
            conn.dropped_since, conn.dropping_because = times[0], cause
            logger.warning(
                "%s: dropping new messages of partition %s until they can be written: %s",
                self.name,
                conn.endpoint.key,
                cause,
            )
        conn.dropped += len(frames) - len(faults)
        if faults:
            kept = sorted(faults)
            try:
                self.spool.append(
                    conn.endpoint.key,
                    conn.endpoint.source,
                    spool_table(
                        [[] for _ in kept],
                        [times[i] for i in kept],
                        {n: faults[i] for n, i in enumerate(kept)},
                    ),
                )
            except SpoolWriteError:
                pass  # lost within the episode that the gap row reports

    def _end_drop_episode(self, conn: _Connection, until: int) -> None:
        """Write the gap row of a drop episode (raises SpoolWriteError if it still cannot)."""
        text = (
            f"gap: {conn.dropped} messages dropped between {utc_text(conn.dropped_since)} "
            f"and {utc_text(until)} because {conn.dropping_because}"
        )
        self.spool.append(
            conn.endpoint.key,
            conn.endpoint.source,
            spool_table([[]], [until], {0: text}),
            dropped=conn.dropped,
        )
        logger.warning("%s: partition %s: %s", self.name, conn.endpoint.key, text)
        conn.dropped, conn.dropped_since, conn.dropping_because = 0, None, None

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
            if conn.dropped:
                self._end_drop_episode(conn, time.time_ns())
        except LeaseLost as exc:
            logger.warning(
                "%s: last messages of %s not written: %s", self.name, conn.endpoint.key, exc
            )
        except Exception:  # keep closing the others
            logger.exception(
                "%s: could not write the last messages of %s", self.name, conn.endpoint.key
            )


def spool_table(frames: list, times: list, faults: dict) -> pa.Table:
    """Rows in SPOOL_SCHEMA: each message's frames and receive time (ns), and fault texts by
    row index (a fault row has no frames)."""
    received = pa.array(np.asarray(times, dtype=np.int64) // 1000, type=pa.int64())
    if faults:
        fault_texts = [None] * len(frames)
        for index, text in faults.items():
            fault_texts[index] = text
        fault_column = pa.array(fault_texts, type=pa.string())
    else:
        fault_column = pa.nulls(len(frames), pa.string())
    return pa.Table.from_arrays(
        [
            received.cast(SPOOL_SCHEMA.field("received_at").type),
            pa.array(frames, type=SPOOL_SCHEMA.field("frames").type),
            fault_column,
        ],
        schema=SPOOL_SCHEMA,
    )
