"""A ZeroEQ publisher: the shipped 0.9 library's wire format plus the seed's vocabulary.

It binds an XPUB and announces ``_zeroeq_pub._tcp`` with instance name ``host:port`` and the
shipped TXT keys (``Type``, ``Instance``, ``User``, ``Application``, ``Session`` when not empty)
plus the seed's ``vocabulary`` and ``vocabulary_request``, on each link of its interfaces with
that link's address in the name (``links``): bound to every interface, it is ``10.0.0.5:PORT``
on the link of 10.0.0.5 and ``10.1.0.5:PORT`` on that of 10.1.0.5, never a name that a
subscriber must resolve nor an address its link does not reach. Through XPUB it sees every
(un)subscription (``XPUB_VERBOSER``), so it can tell how many subscribers an event has; 0.9
subscribers all subscribe to ``zeroeq::Meerkat``. Used by the stream writer, the demo peers,
the CLI and the tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (zeroconf is the zeroeq extra)
    from spark_zmq.protocols.zeroeq.mdns import ZeroEQZeroconf

import getpass
import os
import sys
import time
import uuid

import zmq

from spark_zmq.errors import PeerTimeout
from spark_zmq.log import logger
from spark_zmq.protocols.xpub import SendTimeout, Subscriptions
from spark_zmq.protocols.zeroeq.announce import Announcement, LinkRecord, Responders
from spark_zmq.protocols.zeroeq.links import Link, announced_host, endpoint_on, links_of
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

    Announced on each link of ``interfaces`` (None: every interface) through a responder per
    link, or through ``zeroconf`` (one link's, from ``make_zeroconf``) alone. ``instance_name``
    is the name it goes by (the first link's other than loopback, else loopback's); every
    link's own is in ``instance_names``.

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
        zeroconf: ZeroEQZeroconf | None = None,
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
        #: the bound host as zmq reports it (0.0.0.0: every interface)
        bound = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self.bound_host = bound[len("tcp://") :].rpartition(":")[0].strip("[]")
        self.port = port
        self.instance_id = "{:x}:{:x}".format(*divmod(uuid.uuid4().int, 1 << 64))
        self.application = application or os.path.basename(sys.argv[0] or "python")
        self._subscriptions = Subscriptions()
        self.vocabulary: Vocabulary | None = None
        self._announcement: Announcement | None = None
        self._responders: Responders | None = None
        try:
            self._start(announce, zeroconf, interfaces, vocabulary, registered, bind_host, curve)
        except BaseException:
            self.close()
            raise

    def _start(
        self,
        announce: bool,
        zeroconf: ZeroEQZeroconf | None,
        interfaces: tuple[str, ...] | None,
        vocabulary: bool,
        registered: dict[bytes, str | None] | None,
        bind_host: str,
        curve: Curve,
    ) -> None:
        """The links, the vocabulary server and the announcement of a bound publisher."""
        if announce:
            self._responders = (
                Responders.borrowing(zeroconf)
                if zeroconf is not None
                else Responders.on(interfaces)
            )
        self.links = self._responders.links if self._responders else links_of(interfaces)
        #: the host subscribers are told to connect to: the instance name's, and the vocabulary
        #: server's
        self.announced_host = self._name_host()
        self.instance_name = f"{self.announced_host}:{self.port}"
        self.address = f"tcp://{zmq_host(self.announced_host)}:{self.port}"
        if vocabulary:
            self.vocabulary = Vocabulary(
                "publisher",
                f"tcp://{zmq_host(bind_host)}:*",
                on_change=self._announce_vocabulary,
                curve=curve,
            )
            for wire, name in (registered or {}).items():
                self.vocabulary.register(wire, name)
        if self._responders is not None:
            self._announcement = Announcement(self._responders, PUBLISHER_SERVICE, self._record)
            self._log_announced()

    def _name_host(self) -> str:
        """The host of the name this publisher goes by: where it is announced on its first
        link other than loopback, else on loopback, else (announced nowhere) its bound one."""
        hosts = [(link, announced_host(self.bound_host, link, self.links)) for link in self.links]
        for _, host in sorted(hosts, key=lambda pair: pair[0].loopback):
            if host is not None:
                return host
        return "127.0.0.1" if self.bound_host in ("0.0.0.0", "*", "") else self.bound_host

    @property
    def instance_names(self) -> dict[str, str]:
        """The instance name announced on each link, by interface name."""
        return {
            link.name: f"{host}:{self.port}"
            for link in self.links
            if (host := announced_host(self.bound_host, link, self.links)) is not None
        }

    def _record(self, link: Link) -> LinkRecord | None:
        host = announced_host(self.bound_host, link, self.links)
        if host is None:
            return None
        return LinkRecord(f"{host}:{self.port}", host, self.port, self.txt(link))

    def _log_announced(self) -> None:
        names = self.instance_names
        if names:
            logger.info(
                "zeroeq: publisher %s announced as %s",
                self.instance_name,
                ", ".join(f"{name} on {link}" for link, name in names.items()),
            )
            return
        logger.warning(
            "zeroeq: publisher bound to %s:%d is announced on no interface: none of %s "
            "reaches that address. Subscribers can still name it (option publishers); to "
            "announce it, set discoveryInterfaces to the interface of %s",
            self.bound_host,
            self.port,
            ", ".join(str(link) for link in self.links) or "no interface",
            self.bound_host,
        )

    @property
    def subscribers(self) -> int:
        return self._subscriptions.exactly(event_id(MEERKAT))

    def txt(self, link: Link | None = None) -> dict[str, str]:
        """The TXT keys of the record on ``link`` (None: with the name this publisher goes by,
        ``announced_host``)."""
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
            # as announced on the link, not as bound: bound to every interface, the server's
            # own address is tcp://0.0.0.0:PORT, which no subscriber can connect to
            port = self.vocabulary.address.rsplit(":", 1)[1]
            address = f"tcp://{zmq_host(self.announced_host)}:{port}"
            if link is not None:
                address = endpoint_on(self.vocabulary.address, link, self.links) or address
            keys["vocabulary_request"] = address
        return keys

    def _announce_vocabulary(self) -> None:
        if self._announcement is not None:
            self._announcement.update()

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
        if self._responders is not None:
            self._responders.close()
            self._responders = None
        if self.vocabulary is not None:
            self.vocabulary.close()
        self.socket.close()
