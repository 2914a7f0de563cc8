"""A writer's XPUB socket: connected to a broker (EBUS's pub port, gobyd's Router), or bound
for subscribers to connect to (yamz).

XPUB rather than PUB, for two things a PUB cannot do: ``XPUB_NODROP`` turns a full send queue
into back-pressure (a PUB drops silently), and the subscriptions (the subscribers' own, or those
a broker relays upstream) arrive here, so a writer can wait for subscribers. On the wire it is a
PUB.
"""

from __future__ import annotations

from collections import Counter

import zmq

from spark_zmq.errors import PeerTimeout
from spark_zmq.protocols.contract import SinkPublisher
from spark_zmq.security import NO_CURVE, Curve


class Subscriptions:
    """What an ``XPUB_VERBOSER`` socket reports: every subscription and unsubscription, counted
    per prefix, so a writer can tell how many subscribers an event or channel has."""

    def __init__(self) -> None:
        self._counts: Counter[bytes] = Counter()

    def take(self, sock: zmq.Socket) -> None:
        """Count the (un)subscription messages waiting on ``sock``."""
        while sock.poll(0):
            message = sock.recv()
            if message[:1] == b"\x01":
                self._counts[message[1:]] += 1
            elif message[:1] == b"\x00" and self._counts[message[1:]] > 0:
                self._counts[message[1:]] -= 1

    def exactly(self, prefix: bytes) -> int:
        """Subscriptions to exactly ``prefix``."""
        return self._counts[prefix]

    def matching(self, topic: bytes) -> int:
        """Subscriptions whose prefix matches ``topic``."""
        return sum(n for prefix, n in self._counts.items() if topic.startswith(prefix))


class SendTimeout(PeerTimeout):
    """A send stayed blocked by back-pressure for longer than the send timeout."""


class XPubSender(SinkPublisher):
    """An XPUB connected to ``address`` (or bound there, with ``bind``): sends with
    back-pressure, counts subscriptions."""

    def __init__(
        self,
        address: str,
        *,
        send_hwm: int,
        send_timeout: float | None,
        bind: bool = False,
        context: zmq.Context | None = None,
        curve: Curve = NO_CURVE,
    ) -> None:
        self.send_timeout = send_timeout
        self._subscriptions = Subscriptions()
        self.socket = (context or zmq.Context.instance()).socket(zmq.XPUB)
        (curve.as_server if bind else curve.as_client)(self.socket)
        self.socket.setsockopt(zmq.SNDHWM, send_hwm)
        self.socket.setsockopt(zmq.XPUB_NODROP, 1)
        self.socket.setsockopt(zmq.XPUB_VERBOSER, 1)
        self.socket.setsockopt(zmq.LINGER, 1000)
        if send_timeout:
            self.socket.setsockopt(zmq.SNDTIMEO, int(send_timeout * 1000))
        try:
            if bind:
                self.socket.bind(address)  # an ephemeral address becomes the concrete one
                address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
            else:
                self.socket.connect(address)
        except zmq.ZMQError as exc:
            self.socket.close(0)
            raise OSError(
                f"cannot {'bind' if bind else 'connect'} an XPUB at {address}: {exc}"
            ) from None
        self.name = self.address = address

    def send(self, frames: list[bytes]) -> None:
        try:
            self.socket.send_multipart(frames)
        except zmq.Again:
            raise self.timeout_error() from None

    def sending_socket(self) -> zmq.Socket:
        return self.socket

    def timeout_error(self) -> SendTimeout:
        return SendTimeout(
            f"send to {self.address} stayed blocked for {self.send_timeout} s: "
            f"the broker or a subscriber is not taking messages"
        )

    def subscribers(self, topic: bytes) -> int:
        self._subscriptions.take(self.socket)
        return self._subscriptions.matching(topic)

    def close(self) -> None:
        self.socket.close()
