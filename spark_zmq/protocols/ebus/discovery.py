"""``channels=services``: one channel per service registered at the broker, followed live.

At start and every ``REFRESH_SECONDS`` the broker is asked SERVICES on its frontend, through one
long-lived ``Client`` (heartbeats; a new identity after a silence or a DISCONNECT); between
asks, the broker's announcements on channel ``ebus/workers`` (``{ebusmessage: "active
workers", workers: [...]}``, read on the sub port) carry the new list at once. A service that
appears joins as a partition reading the channel of its name; one that is gone leaves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import zmq

from spark_zmq.log import logger
from spark_zmq.protocols.base import Discovery, Endpoint, EndpointListener
from spark_zmq.protocols.ebus.client import BrokerError, Client
from spark_zmq.protocols.ebus.wire import WORKERS_CHANNEL, PayloadError, unpack
from spark_zmq.security import NO_CURVE, Curve

REFRESH_SECONDS = 10.0


class ServiceChannels(Discovery):
    """Discovery of the channels named after the broker's registered services."""

    def __init__(
        self,
        frontend: str,
        sub: str,
        endpoint_of: Callable[[str], Endpoint],
        curve: Curve = NO_CURVE,
        *,
        max_bytes: int,
    ) -> None:
        self.max_bytes = max_bytes  # maxMessageBytes: what a packed answer may inflate to
        self.frontend = frontend
        self.curve = curve
        self.sub = sub
        self.endpoint_of = endpoint_of
        self._services: set[str] = set()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._unanswered = False

    def start(self, listener: EndpointListener) -> None:
        self._listener = listener
        self._thread = threading.Thread(
            target=self._run, name="spark_zmq ebus services", daemon=True
        )
        self._thread.start()
        logger.info("ebus: reading a channel per service registered at %s", self.frontend)

    def _run(self) -> None:
        sock = self.curve.as_client(zmq.Context.instance().socket(zmq.SUB))
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, WORKERS_CHANNEL.encode())
        sock.connect(self.sub)
        client = Client(self.frontend, curve=self.curve)
        try:
            while not self._stopping.is_set():
                self._ask(client)
                self._follow_announcements(sock, REFRESH_SECONDS)
        finally:
            client.close()
            sock.close(0)

    def _ask(self, client: Client) -> None:
        try:
            services = client.ask("SERVICES", max_bytes=self.max_bytes)
        except BrokerError as exc:
            if not self._unanswered:
                logger.warning("ebus: %s; retrying", exc)
            self._unanswered = True
            return
        if self._unanswered:
            logger.info("ebus: the broker at %s answers again", self.frontend)
        self._unanswered = False
        self._update(services)

    def _follow_announcements(self, sock: zmq.Socket, seconds: float) -> None:
        """Apply ``ebus/workers`` announcements for ``seconds`` (or until closed)."""
        for _ in range(int(seconds * 10)):
            if self._stopping.is_set():
                return
            if not sock.poll(100):
                continue
            frames = sock.recv_multipart()
            if len(frames) != 2 or frames[0] != WORKERS_CHANNEL.encode():
                continue
            try:
                message = unpack(frames[1], self.max_bytes)
            except PayloadError:
                continue
            if isinstance(message, dict) and "workers" in message:
                self._update(message["workers"] or [])

    def _update(self, services) -> None:
        if not isinstance(services, list):
            logger.warning("ebus: ignoring a service list that is not a list: %r", services)
            return
        now = {s for s in services if isinstance(s, str) and s}
        for service in sorted(now - self._services):
            self._listener.endpoint_joined(self.endpoint_of(service))
        for service in sorted(self._services - now):
            self._listener.endpoint_left(self.endpoint_of(service).key)
        self._services = now

    def close(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(3)
