"""The zmq side of capture: one socket and one monitor per endpoint, and the poller over them.

zmq sockets belong to one thread: only the capture thread calls these. Other threads reach it
through the mailbox, which the poller watches too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import zmq

from spark_zmq.capture.buffer import Buffer
from spark_zmq.capture.drops import DropEpisode
from spark_zmq.capture.health import HANDSHAKE_SECONDS, MONITORED, Health
from spark_zmq.capture.pushback import PushBack
from spark_zmq.mailbox import Mailbox
from spark_zmq.protocols.base import Endpoint
from spark_zmq.security import Curve
from spark_zmq.units import milliseconds


@dataclass
class Connection:
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


class Sockets:
    """Opens, polls and closes the sockets of the connections (CURVE, bounds, subscriptions)."""

    def __init__(
        self,
        name: str,
        mailbox: Mailbox,
        *,
        curve: Curve,
        receive_hwm: int,
        max_message_bytes: int,
    ) -> None:
        self.name = name
        self.curve = curve
        self.receive_hwm = receive_hwm
        self.max_message_bytes = max_message_bytes
        self._context: zmq.Context = zmq.Context.instance()
        self._mailbox = mailbox
        self._poller = zmq.Poller()
        self._by_socket: dict[zmq.Socket, Connection] = {}
        self._by_monitor: dict[zmq.Socket, Connection] = {}
        self._poller.register(mailbox, zmq.POLLIN)

    def connect(self, endpoint: Endpoint) -> Connection:
        """A new connection to ``endpoint``, polled from now on."""
        key, address = endpoint.key, endpoint.address
        conn = Connection(
            endpoint,
            *self._open(endpoint),
            health=Health(self.name, address, key),
            load=PushBack(self.name, address, key, self.receive_hwm),
            drops=DropEpisode(self.name, key),
        )
        self._register(conn)
        return conn

    def reopen(self, conn: Connection) -> None:
        """New sockets for a connection zmq gave up (its buffer and episodes stay)."""
        self.close(conn)
        conn.socket, conn.monitor = self._open(conn.endpoint)
        self._register(conn)

    def close(self, conn: Connection) -> None:
        """Close the connection's sockets (its buffered messages stay)."""
        for sock in (conn.socket, conn.monitor):
            self._poller.unregister(sock)
        self._by_socket.pop(conn.socket, None)
        self._by_monitor.pop(conn.monitor, None)
        conn.socket.disable_monitor()
        conn.monitor.close(0)
        conn.socket.close(0)

    def poll(self, seconds: float) -> Iterator[tuple[str, Connection | None]]:
        """What is ready within ``seconds``: ("message", conn), ("monitor", conn) or
        ("mailbox", None)."""
        for item, _ in self._poller.poll(milliseconds(seconds)):
            if item in self._by_socket:
                yield "message", self._by_socket[item]
            elif item == self._mailbox.fileno():
                yield "mailbox", None
            elif item in self._by_monitor:
                yield "monitor", self._by_monitor[item]

    def shutdown(self) -> None:
        self._poller.unregister(self._mailbox)

    @staticmethod
    def resubscribe(sock: zmq.Socket, old: tuple[bytes, ...], new: tuple[bytes, ...]) -> None:
        """Change a live SUB socket's subscriptions: no reconnect, nothing in flight lost."""
        if sock.type != zmq.SUB:
            return
        for prefix in set(new) - set(old):
            sock.setsockopt(zmq.SUBSCRIBE, prefix)
        for prefix in set(old) - set(new):
            sock.setsockopt(zmq.UNSUBSCRIBE, prefix)

    def _open(self, endpoint: Endpoint) -> tuple[zmq.Socket, zmq.Socket]:
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

    def _register(self, conn: Connection) -> None:
        self._by_socket[conn.socket] = conn
        self._by_monitor[conn.monitor] = conn
        self._poller.register(conn.socket, zmq.POLLIN)
        self._poller.register(conn.monitor, zmq.POLLIN)
