"""The zmq side of capture: opens and closes one socket and one monitor per endpoint, which
the receive core (``receiving``: compiled or Python) watches, in a context sized for many
endpoints (``limits``).

zmq sockets belong to one thread: only the capture thread calls these. Other threads reach it
through the mailbox, which the core watches too.
"""

from __future__ import annotations

import zmq

from spark_zmq.capture.connections import Connection
from spark_zmq.capture.drops import DropEpisode
from spark_zmq.capture.health import HANDSHAKE_SECONDS, MONITORED, Health
from spark_zmq.capture.limits import capture_context
from spark_zmq.capture.pushback import PushBack
from spark_zmq.capture.receiving import Core
from spark_zmq.capture.refusals import ReceiveFailures, Refusals
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.security import Curve


class Sockets:
    """Opens and closes the sockets of the connections (CURVE, bounds, subscriptions), and has
    ``core`` watch them while they are open. ``max_message_bytes`` and ``max_message_parts``
    bound one message (``refusals``); zmq is given the first as ZMQ_MAXMSGSIZE too, which
    catches a single frame over it before it is queued."""

    def __init__(
        self,
        name: str,
        core: Core,
        *,
        curve: Curve,
        receive_hwm: int,
        max_message_bytes: int,
        max_message_parts: int,
        thread_prefix: int = 0,
    ) -> None:
        """``thread_prefix``: the name prefix of the threads of capture's zmq context
        (``stats.CaptureStats``)."""
        self.name = name
        self.thread_prefix = thread_prefix
        self.curve = curve
        self.receive_hwm = receive_hwm
        self.max_message_bytes = max_message_bytes
        self.max_message_parts = max_message_parts
        #: capture's own context, made by the capture thread when it opens its first socket,
        #: so that zmq's I/O thread inherits that thread's priority (``priority``)
        self._context: zmq.Context | None = None
        self.core = core

    def connect(self, endpoint: Endpoint) -> Connection:
        """A new connection to ``endpoint``, polled from now on."""
        key, address = endpoint.key, endpoint.address
        load = PushBack(self.name, address, key, self.receive_hwm)
        refusals = Refusals(self.name, address, key, self.max_message_bytes, self.max_message_parts)
        conn = Connection(
            endpoint,
            *self._open(endpoint),
            health=Health(self.name, address, key),
            load=load,
            drops=DropEpisode(self.name, key),
            failures=ReceiveFailures(self.name, address, key),
            buffer=self.core.new_buffer(load.full_run, refusals),
        )
        self.core.watch(conn)
        return conn

    def reopen(self, conn: Connection) -> None:
        """New sockets for a connection zmq gave up, or whose receive failed (its buffer and
        episodes stay). If zmq refuses the new connection, the old sockets stay and the error
        goes to the caller."""
        sockets = self._open(conn.endpoint)
        self.close(conn)
        conn.socket, conn.monitor = sockets
        self.core.watch(conn)

    def close(self, conn: Connection) -> None:
        """Close the connection's sockets (its buffered messages stay)."""
        self.core.unwatch(conn)
        conn.socket.disable_monitor()
        conn.monitor.close(0)
        conn.socket.close(0)

    def shutdown(self) -> None:
        """Stop watching; end the context (every socket is closed by now: nothing lingers)."""
        self.core.close()
        if self._context is not None:
            self._context.destroy(linger=0)
            self._context = None

    def _own_context(self) -> zmq.Context:
        if self._context is None:
            self._context = capture_context(self.thread_prefix)
        return self._context

    def resubscribe(self, conn: Connection, old: tuple[bytes, ...], new: tuple[bytes, ...]) -> None:
        """Change a live SUB socket's subscriptions: no reconnect, nothing in flight lost."""
        sock = conn.socket
        if sock.type != zmq.SUB:
            return
        for prefix in set(new) - set(old):
            sock.setsockopt(zmq.SUBSCRIBE, prefix)
        for prefix in set(old) - set(new):
            sock.setsockopt(zmq.UNSUBSCRIBE, prefix)
        self.core.touched(conn)

    def _open(self, endpoint: Endpoint) -> tuple[zmq.Socket, zmq.Socket]:
        # inproc:// reaches only sockets of the same context: the process's shared one
        shared = endpoint.address.startswith("inproc://")
        context = zmq.Context.instance() if shared else self._own_context()
        sock = self.curve.as_client(context.socket(endpoint.socket_type))
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, self.receive_hwm)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_SECONDS * 1000)
        if endpoint.socket_type == zmq.SUB:
            for prefix in endpoint.subscriptions:
                sock.setsockopt(zmq.SUBSCRIBE, prefix)
        try:
            monitor = sock.get_monitor_socket(MONITORED)
        except Exception:
            sock.close(0)
            raise
        try:
            sock.connect(endpoint.address)
        except Exception:  # zmq refused the address (a name that does not resolve, ...)
            sock.disable_monitor()
            monitor.close(0)
            sock.close(0)
            raise
        return sock, monitor
