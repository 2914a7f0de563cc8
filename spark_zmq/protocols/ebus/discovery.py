"""``channels=services``: one channel per service registered at the broker, followed live.

The broker's SERVICES answer, asked on its frontend through one long-lived ``Client``
(heartbeats; a new identity after a silence or a DISCONNECT), is the one word on which services
there are: a service that appears in it joins as a partition reading the channel of its name;
one that is gone from it leaves. It is asked at start and every ``REFRESH_SECONDS``.

Announcements on channel ``ebus/workers`` (``{ebusmessage: "active workers", workers: [...]}``,
read on the sub port) only make it ask sooner. They come through the broker's XPUB, which
relays whatever any publisher connected to the broker's XSUB sends, so anyone can forge one: an
announcement never joins or retires a partition itself. One that lists other services than
those read triggers an immediate SERVICES ask, at most one every ``ANNOUNCED_ASK_SECONDS``
(however many arrive), and the answer decides. Every message from the broker (an announcement,
an answer) is bounded by ``MAX_MESSAGE_BYTES``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import zmq

from spark_zmq.log import logger
from spark_zmq.protocols.contract import Discovery, Endpoint, EndpointListener
from spark_zmq.protocols.ebus.client import BrokerError, Client
from spark_zmq.protocols.ebus.wire import WORKERS_CHANNEL, PayloadError, unpack
from spark_zmq.security import NO_CURVE, Curve
from spark_zmq.units import milliseconds

#: how often the broker is asked SERVICES when no announcement prompts it
REFRESH_SECONDS = 10.0
#: the shortest time between two asks prompted by announcements: forged announcements, however
#: many, cost the broker at most one question this often
ANNOUNCED_ASK_SECONDS = 1.0
#: the largest message discovery takes from the broker (1 MiB): a SERVICES answer or an
#: ``ebus/workers`` announcement is a list of service names, some 30 bytes each, so 1 MiB holds
#: tens of thousands; anything larger drops the connection unread (zmq's MAXMSGSIZE) instead
#: of being held by the driver
MAX_MESSAGE_BYTES = 1 << 20
#: the most announcements read in one go, so that a flood of them cannot keep discovery from
#: asking the broker
ANNOUNCEMENTS_AT_ONCE = 1000


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
        #: the kinds of malformed announcement logged so far (each once)
        self._garbled: set[str] = set()
        #: the services of the last announcement that prompted an ask, until the answer
        self._announced: set[str] | None = None
        #: an announcement that the broker contradicted was logged (until one it confirms)
        self._contradicted = False

    def start(self, listener: EndpointListener) -> None:
        self._listener = listener
        self._thread = threading.Thread(
            target=self._run, name="spark_zmq ebus services", daemon=True
        )
        self._thread.start()
        logger.info("ebus: reading a channel per service registered at %s", self.frontend)

    def _run(self) -> None:
        announcements = AnnouncementSocket(self.sub, self.curve)
        client = Client(self.frontend, curve=self.curve, max_message_bytes=MAX_MESSAGE_BYTES)
        try:
            self._follow(client, announcements)
        finally:
            client.close()
            announcements.close()

    def _follow(self, client: Client, announcements: AnnouncementSocket) -> None:
        """Ask now and every REFRESH_SECONDS; sooner (but not within ANNOUNCED_ASK_SECONDS of
        the last ask) when an announcement lists other services than those read."""
        asked_at = float("-inf")
        ask_at = time.monotonic()
        while not self._stopping.is_set():
            if time.monotonic() >= ask_at:
                self._ask(client)
                asked_at = time.monotonic()
                ask_at = asked_at + REFRESH_SECONDS
            sock = announcements.live()
            if self._follow_announcements(sock, min(0.1, max(0.0, ask_at - time.monotonic()))):
                ask_at = min(ask_at, asked_at + ANNOUNCED_ASK_SECONDS)

    def _ask(self, client: Client) -> None:
        try:
            services = client.ask("SERVICES", max_bytes=self.max_bytes)
        except BrokerError as exc:
            if not self._unanswered:
                logger.warning("ebus: %s; retrying", exc)
            self._unanswered = True
            return
        if not isinstance(services, list):
            if not self._unanswered:
                logger.warning(
                    "ebus: the broker at %s answered SERVICES with %s, not a list of "
                    "service names; retrying",
                    self.frontend,
                    type(services).__name__,
                )
            self._unanswered = True
            return
        if self._unanswered:
            logger.info("ebus: the broker at %s answers again", self.frontend)
        self._unanswered = False
        self._update(services)

    def _follow_announcements(self, sock: zmq.Socket, seconds: float) -> bool:
        """Read the ``ebus/workers`` announcements that arrive within ``seconds`` (at most
        ANNOUNCEMENTS_AT_ONCE); True if one lists other services than those read."""
        deadline = time.monotonic() + seconds
        differs = False
        for _ in range(ANNOUNCEMENTS_AT_ONCE):
            wait = 0.0 if differs else max(0.0, deadline - time.monotonic())
            if not sock.poll(milliseconds(wait)):
                break
            frames = sock.recv_multipart()
            if len(frames) != 2 or frames[0] != WORKERS_CHANNEL.encode():
                continue
            try:
                message = unpack(frames[1], self.max_bytes)
            except PayloadError:
                self._refuse_announcement("it is not a packed value (zlib(BSON({l: ...})))")
                continue
            workers = message.get("workers") if isinstance(message, dict) else None
            if not isinstance(workers, list):
                self._refuse_announcement("it has no list 'workers'")
                continue
            announced = {s for s in workers if isinstance(s, str) and s}
            if announced != self._services:
                self._announced = announced
                differs = True
        return differs

    def _refuse_announcement(self, why: str) -> None:
        """One line per kind of malformed announcement (anyone can publish one, as often as
        they like)."""
        if why not in self._garbled:
            self._garbled.add(why)
            logger.warning(
                "ebus: ignoring a malformed %s announcement on %s: %s; the broker's SERVICES "
                "answers still tell which services there are (further ones like it are not "
                "logged)",
                WORKERS_CHANNEL,
                self.sub,
                why,
            )

    def _update(self, services: list) -> None:
        """Apply the broker's SERVICES answer: joins and leaves."""
        now = {s for s in services if isinstance(s, str) and s}
        self._check_announced(now)
        for service in sorted(now - self._services):
            self._listener.endpoint_joined(self.endpoint_of(service))
        for service in sorted(self._services - now):
            self._listener.endpoint_left(self.endpoint_of(service).key)
        self._services = now

    def _check_announced(self, answered: set[str]) -> None:
        """Log (once a run) an announcement that the broker's answer does not bear out: a
        forged one, or one that a later change overtook."""
        announced, self._announced = self._announced, None
        if announced is None:
            return
        if announced == answered:
            self._contradicted = False
        elif not self._contradicted:
            self._contradicted = True
            logger.warning(
                "ebus: an %s announcement on %s listed %d services, the broker at %s "
                "answers %d; the broker's answer stands (the announcement is forged, or was "
                "overtaken by a change; further ones are not logged until one is borne out)",
                WORKERS_CHANNEL,
                self.sub,
                len(announced),
                self.frontend,
                len(answered),
            )

    def close(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(3)


class AnnouncementSocket:
    """Discovery's SUB of ``ebus/workers`` on the broker's sub port, bounded by
    MAX_MESSAGE_BYTES, and opened anew when its connection drops.

    zmq drops the connection on a message over the bound and, since that is a protocol error,
    does not reconnect by itself; anyone who can publish to the broker could so cut discovery
    off from every later announcement. A monitor sees the drop, and ``live`` reopens."""

    def __init__(self, address: str, curve: Curve) -> None:
        self.address = address
        self.curve = curve
        self.drops = 0
        self._sock, self._monitor = self._open()

    def _open(self) -> tuple[zmq.Socket, zmq.Socket]:
        sock = self.curve.as_client(zmq.Context.instance().socket(zmq.SUB))
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        sock.setsockopt(zmq.SUBSCRIBE, WORKERS_CHANNEL.encode())
        monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        sock.connect(self.address)
        return sock, monitor

    def live(self) -> zmq.Socket:
        """The SUB, opened anew if its connection dropped since the last call."""
        if not self._monitor.poll(0):
            return self._sock
        self.drops += 1
        log = logger.warning if self.drops == 1 else logger.debug
        log(
            "ebus: the connection of discovery's %s subscriber to %s dropped (a message over "
            "%d bytes, which is refused, or the broker went away); opening it anew (drop %d)",
            WORKERS_CHANNEL,
            self.address,
            MAX_MESSAGE_BYTES,
            self.drops,
        )
        self.close()
        self._sock, self._monitor = self._open()
        return self._sock

    def close(self) -> None:
        self._sock.disable_monitor()
        self._monitor.close(0)
        self._sock.close(0)
