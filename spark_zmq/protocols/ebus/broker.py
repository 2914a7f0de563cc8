"""An EBUS broker: the broadcast relay and request routing (``routing``), on loopback by default.

Broadcasts: an XSUB bound on the pub port and an XPUB on the sub port. Publishers connect a PUB
to the pub port and subscribers a SUB to the sub port; the relay passes frames 0-1 of each
broadcast one way and subscriptions the other, as the reference broker does, and carries the
broker's own announcements on ``ebus/started``, ``ebus/shutdown`` and ``ebus/workers``.

With a ``Curve`` holding a secret key, every socket the broker binds is a CURVE server (with the
curve's allow-list of client keys, if any): publishers, subscribers, clients and workers must
then connect as CURVE clients with the broker's public key.
"""

from __future__ import annotations

import threading
import time
import uuid

import zmq

from spark_zmq.log import logger
from spark_zmq.protocols.ebus.routing import RequestRouter
from spark_zmq.protocols.ebus.wire import (
    BACKEND_PORT,
    FRONTEND_PORT,
    PUB_PORT,
    SHUTDOWN_CHANNEL,
    STARTED_CHANNEL,
    SUB_PORT,
    WORKERS_CHANNEL,
    pack,
)
from spark_zmq.security import NO_CURVE, Curve
from spark_zmq.units import milliseconds


class BroadcastRelay:
    """Relays broadcasts between ``tcp://host:pub_port`` and ``tcp://host:sub_port``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        pub_port: int = PUB_PORT,
        sub_port: int = SUB_PORT,
        context: zmq.Context | None = None,
        curve: Curve = NO_CURVE,
    ) -> None:
        self._context = context or zmq.Context.instance()
        self._xsub = self._context.socket(zmq.XSUB)
        self._xpub = self._context.socket(zmq.XPUB)
        for sock in (self._xsub, self._xpub):
            sock.setsockopt(zmq.LINGER, 0)
            curve.as_server(sock)
        try:
            self.pub_port = _bind(self._xsub, host, pub_port)
            self.sub_port = _bind(self._xpub, host, sub_port)
        except zmq.ZMQError as exc:
            self._xsub.close(0)
            self._xpub.close(0)
            raise OSError(
                f"ebus broker: cannot bind its broadcast ports on {host}: {exc}"
            ) from None
        self.host = host
        # commands to the relay thread (announce, stop), which alone uses the relay's sockets
        self._stop_r, self._stop_w = self._context.socket(zmq.PAIR), self._context.socket(zmq.PAIR)
        self._command_lock = threading.Lock()  # announce and close come from any thread
        # a fresh name, not id(self): a closed relay's name is released by ZeroMQ's reaper
        # some time after close, and a new broker may get the old id
        commands = f"inproc://ebus-relay-{uuid.uuid4().hex}"
        self._stop_r.bind(commands)
        self._stop_w.connect(commands)
        self._thread = threading.Thread(target=self._run, name="spark_zmq ebus relay", daemon=True)
        self._thread.start()
        logger.info(
            "ebus broker: broadcasts from tcp://%s:%d relayed to tcp://%s:%d",
            host,
            self.pub_port,
            host,
            self.sub_port,
        )

    def _run(self) -> None:
        poller = zmq.Poller()
        for sock in (self._xsub, self._xpub, self._stop_r):
            poller.register(sock, zmq.POLLIN)
        try:
            while True:
                ready = dict(poller.poll())
                if self._stop_r in ready:
                    command = self._stop_r.recv_multipart()
                    if command[0] != b"announce":
                        return
                    self._xpub.send_multipart(command[1:])
                if self._xsub in ready:
                    frames = self._xsub.recv_multipart()
                    self._xpub.send_multipart(frames[:2])  # frames 0-1 only, as the broker
                if self._xpub in ready:
                    self._xsub.send(self._xpub.recv())  # (un)subscriptions upstream
        finally:
            for sock in (self._xsub, self._xpub, self._stop_r):
                sock.close(0)

    def announce(self, channel: str, message: str, **fields: object) -> None:
        """Send the broker's own broadcast ``{ebusmessage: message, **fields}`` on ``channel``
        (one of ``ebus/started``, ``ebus/shutdown``, ``ebus/workers``)."""
        with self._command_lock:
            self._stop_w.send_multipart(
                [b"announce", channel.encode(), pack({"ebusmessage": message, **fields})]
            )

    def close(self) -> None:
        with self._command_lock:
            self._stop_w.send(b"stop")
        self._thread.join(2)
        self._stop_w.close(0)


def _bind(sock: zmq.Socket, host: str, port: int) -> int:
    if port:
        sock.bind(f"tcp://{host}:{port}")
        return port
    return sock.bind_to_random_port(f"tcp://{host}")


class Broker:
    """An EBUS broker: the broadcast relay, and request routing between clients (frontend) and
    workers (backend). Binds to ``host`` (loopback unless told otherwise); port 0 picks any."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        frontend_port: int = FRONTEND_PORT,
        backend_port: int = BACKEND_PORT,
        pub_port: int = PUB_PORT,
        sub_port: int = SUB_PORT,
        context: zmq.Context | None = None,
        curve: Curve = NO_CURVE,
    ) -> None:
        self._context = context or zmq.Context.instance()
        self.relay = BroadcastRelay(host, pub_port, sub_port, self._context, curve)
        self._frontend = self._context.socket(zmq.ROUTER)
        self._backend = self._context.socket(zmq.ROUTER)
        for sock in (self._frontend, self._backend):
            sock.setsockopt(zmq.LINGER, 0)
            curve.as_server(sock)
            sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        try:
            self.frontend_port = _bind(self._frontend, host, frontend_port)
            self.backend_port = _bind(self._backend, host, backend_port)
        except zmq.ZMQError as exc:
            self.relay.close()
            for sock in (self._frontend, self._backend):
                sock.close(0)
            raise OSError(
                f"ebus broker: cannot bind its frontend/backend on {host}: {exc}"
            ) from None
        self.host = host
        self.pub_port, self.sub_port = self.relay.pub_port, self.relay.sub_port
        self._router = RequestRouter(self._frontend, self._backend, self._announce_workers)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spark_zmq ebus broker", daemon=True)
        self._thread.start()
        self.relay.announce(STARTED_CHANNEL, "broker starting")
        logger.info(
            "ebus broker: frontend tcp://%s:%d, backend tcp://%s:%d%s",
            host,
            self.frontend_port,
            host,
            self.backend_port,
            ", CURVE" if curve.serves else "",
        )

    def _announce_workers(self, services: list[str]) -> None:
        self.relay.announce(WORKERS_CHANNEL, "active workers", workers=services)

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._frontend, zmq.POLLIN)
        poller.register(self._backend, zmq.POLLIN)
        try:
            while not self._stopping.is_set():
                due = self._router.tick()
                for sock, _ in poller.poll(milliseconds(min(due - time.monotonic(), 0.1))):
                    frames = sock.recv_multipart()
                    if sock is self._frontend:
                        self._router.from_client(frames)
                    else:
                        self._router.from_worker(frames)
        finally:
            for sock in (self._frontend, self._backend):
                sock.close(0)

    def close(self) -> None:
        """Stop routing, announce the shutdown on ``ebus/shutdown``, close. Idempotent."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._thread.join(2)
        self.relay.announce(SHUTDOWN_CHANNEL, "broker stopping")
        self.relay.close()
