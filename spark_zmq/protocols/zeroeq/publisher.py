"""A ZeroEQ publisher: the shipped 0.9 library's wire format plus the seed's vocabulary.

It binds an XPUB and announces ``_zeroeq_pub._tcp`` with instance name ``host:port`` and the
shipped TXT keys (``Type``, ``Instance``, ``User``, ``Application``, ``Session`` when not empty)
plus the seed's ``vocabulary`` and ``vocabulary_request``. Through XPUB it sees every
(un)subscription (``XPUB_VERBOSER``), so it can tell how many subscribers an event has; 0.9
subscribers all subscribe to ``zeroeq::Meerkat``. Used by the stream writer, the demo peers,
the CLI and the tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (zeroconf is the zeroeq extra)
    from zeroconf import Zeroconf

import getpass
import os
import socket
import sys
import time
import uuid

import zmq

from spark_zmq.errors import PeerTimeout
from spark_zmq.protocols.xpub import SendTimeout, Subscriptions
from spark_zmq.protocols.zeroeq.announce import Announcement, make_zeroconf
from spark_zmq.protocols.zeroeq.vocabulary import Vocabulary
from spark_zmq.protocols.zeroeq.wire import (
    MEERKAT,
    PUBLISHER_SERVICE,
    default_session,
    event_id,
    zmq_host,
)
from spark_zmq.security import NO_CURVE, Curve
from spark_zmq.units import milliseconds


class Publisher:
    """One XPUB, its announcement and its vocabulary.

    ``send_hwm`` 0 (the shipped library's) queues without bound; with ``nodrop`` a full queue
    blocks ``publish`` (back-pressure) for up to ``send_timeout`` seconds, then raises
    ``SendTimeout``, instead of zmq dropping the message for the slow subscriber.
    ``registered`` events are in the vocabulary from the start; published events join it.
    """

    def __init__(
        self,
        session: str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        application: str | None = None,
        send_hwm: int = 0,
        nodrop: bool = False,
        send_timeout: float | None = None,
        zeroconf: Zeroconf | None = None,
        interfaces: tuple[str, ...] | None = ("127.0.0.1",),
        announce: bool = True,
        vocabulary: bool = True,
        registered: dict[bytes, str | None] | None = None,
        context: zmq.Context | None = None,
        curve: Curve = NO_CURVE,
    ) -> None:
        self.session = default_session() if session is None else session
        self.socket = curve.as_server((context or zmq.Context.instance()).socket(zmq.XPUB))
        self.socket.setsockopt(zmq.SNDHWM, send_hwm)
        self.socket.setsockopt(zmq.XPUB_VERBOSER, 1)
        self.socket.setsockopt(zmq.LINGER, 1000)
        if nodrop:
            self.socket.setsockopt(zmq.XPUB_NODROP, 1)
        if send_timeout is not None:
            self.socket.setsockopt(zmq.SNDTIMEO, int(send_timeout * 1000))
        self.send_timeout = send_timeout
        bind_host = "*" if host in ("", "*", "0.0.0.0") else host
        try:
            if port:
                self.socket.bind(f"tcp://{zmq_host(bind_host)}:{port}")
            else:
                port = self.socket.bind_to_random_port(f"tcp://{zmq_host(bind_host)}")
        except zmq.ZMQError as exc:
            self.socket.close(0)
            raise OSError(
                f"zeroeq publisher: cannot bind tcp://{bind_host}:{port}: {exc}"
            ) from None
        announced_host = socket.gethostname() if bind_host == "*" else host
        self.port = port
        #: the host subscribers are told to connect to (the instance name's, and the vocabulary
        #: server's): the bound address, or the host name when bound to every interface
        self.announced_host = announced_host
        self.instance_name = f"{announced_host}:{port}"
        self.address = f"tcp://{zmq_host(announced_host)}:{port}"
        self.instance_id = "{:x}:{:x}".format(*divmod(uuid.uuid4().int, 1 << 64))
        self.application = application or os.path.basename(sys.argv[0] or "python")
        self._subscriptions = Subscriptions()
        self.vocabulary = None
        self._announcement = None
        if vocabulary:
            self.vocabulary = Vocabulary(
                "publisher",
                f"tcp://{zmq_host(bind_host)}:*",
                on_change=self._announce_vocabulary,
                curve=curve,
            )
            for wire, name in (registered or {}).items():
                self.vocabulary.register(wire, name)
        self._owns_zeroconf = zeroconf is None and announce
        self._zeroconf = make_zeroconf(interfaces) if self._owns_zeroconf else zeroconf
        if announce and self._zeroconf is not None:  # (never None when announcing)
            self._announcement = Announcement(
                self._zeroconf,
                PUBLISHER_SERVICE,
                self.instance_name,
                announced_host,
                port,
                self.txt(),
            )

    @property
    def subscribers(self) -> int:
        return self._subscriptions.exactly(event_id(MEERKAT))

    def txt(self) -> dict[str, str]:
        keys = {
            "Type": "ZeroEQ",
            "Instance": self.instance_id,
            "User": getpass.getuser(),
            "Application": self.application,
        }
        if self.session:
            keys["Session"] = self.session
        if self.vocabulary is not None:
            keys["vocabulary"] = self.vocabulary.txt_value()
            # the announced host, not the bound one: bound to every interface, the server's
            # own address is tcp://0.0.0.0:PORT, which no subscriber can connect to
            port = self.vocabulary.address.rsplit(":", 1)[1]
            keys["vocabulary_request"] = f"tcp://{zmq_host(self.announced_host)}:{port}"
        return keys

    def _announce_vocabulary(self) -> None:
        if self._announcement is not None:
            self._announcement.update(self.txt())

    def register(self, event: str | bytes, name: str | None = None) -> bytes:
        """Add an event to the vocabulary; its wire id."""
        wire = event if isinstance(event, bytes) else event_id(event)
        if self.vocabulary is not None:
            self.vocabulary.register(wire, name if isinstance(event, bytes) else event)
        return wire

    def publish(self, event: str | bytes, payload: bytes = b"") -> None:
        """Send one event: a name or 16 wire bytes; an empty payload sends a single frame."""
        wire = event if isinstance(event, bytes) else event_id(event)
        if self.vocabulary is not None and wire not in self.vocabulary:
            self.register(event)
        self.send_frames([wire, payload] if payload else [wire])

    def send_frames(self, frames: list[bytes]) -> None:
        """Send frames as they are (also malformed ones, for tests)."""
        try:
            self.socket.send_multipart(frames, copy=sum(map(len, frames)) < 65536)
        except zmq.Again:
            raise self.timeout_error() from None

    def timeout_error(self) -> SendTimeout:
        """What a send raises when back-pressure outlasted the send timeout."""
        return SendTimeout(
            f"zeroeq publisher {self.instance_name}: a send stayed blocked for "
            f"{self.send_timeout} s: a subscriber is not taking messages (back-pressure)"
        )

    def count_subscribers(self, event: str | bytes | None = None) -> int:
        """Subscriptions matching ``event`` (its id or a prefix of it); without ``event``,
        subscribers subscribed to Meerkat (0.9 subscribers all are)."""
        self._subscriptions.take(self.socket)
        if event is None:
            return self.subscribers
        return self._subscriptions.matching(event if isinstance(event, bytes) else event_id(event))

    def wait_for_subscribers(
        self, count: int = 1, timeout: float = 30.0, event: str | bytes | None = None
    ) -> None:
        """Block until ``count_subscribers(event)`` reaches ``count``; TimeoutError if not."""
        deadline = time.monotonic() + timeout
        while self.count_subscribers(event) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                what = "Meerkat" if event is None else f"event {event!r}"
                raise PeerTimeout(
                    f"zeroeq publisher {self.instance_name}: "
                    f"{self.count_subscribers(event)} of {count} subscribers to "
                    f"{what} after {timeout} s"
                )
            self.socket.poll(milliseconds(min(remaining, 0.1)))

    def close(self) -> None:
        if self._announcement is not None:
            self._announcement.close()
            self._announcement = None
        if self._owns_zeroconf and self._zeroconf is not None:
            self._zeroconf.close()
            self._zeroconf = None
        if self.vocabulary is not None:
            self.vocabulary.close()
        self.socket.close()
