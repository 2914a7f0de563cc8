"""The seed's subscriber record: what a reader announces of itself over ZeroConf
(``_zeroeq_sub._tcp``), and the vocabulary server that record names.

Its TXT holds the session, the user, the application, the events the reader wants (ids, and
their names through the vocabulary server) and, when there is one, the management port. It is
announced on the browsed interface when there is one, else on loopback.
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING

from spark_zmq.protocols.zeroeq.announce import Announcement
from spark_zmq.protocols.zeroeq.vocabulary import Vocabulary
from spark_zmq.protocols.zeroeq.wire import SUBSCRIBER_SERVICE, zmq_host
from spark_zmq.security import NO_CURVE, Curve

if TYPE_CHECKING:
    from spark_zmq.protocols.zeroeq.mdns import ZeroEQZeroconf


class SubscriberRecord:
    """A reader's subscriber record, kept current as its vocabulary changes."""

    def __init__(
        self,
        zeroconf: ZeroEQZeroconf,
        *,
        instance_name: str,
        interfaces: tuple[str, ...] | None,
        events: dict[bytes, str | None],
        session: str,
        application: str,
        management: str | None,
        curve: Curve = NO_CURVE,
    ) -> None:
        self.session = session
        self.application = application
        self.management = management
        host = interfaces[0] if interfaces and len(interfaces) == 1 else "127.0.0.1"
        try:
            vocabulary = Vocabulary("subscriber", f"tcp://{zmq_host(host)}:*", curve=curve)
        except ValueError:
            vocabulary = Vocabulary("subscriber", "tcp://127.0.0.1:*", curve=curve)
        self.vocabulary = vocabulary
        for wire, name in events.items():
            vocabulary.register(wire, name)
        vocabulary.on_change = self.update
        self._announcement: Announcement | None = Announcement(
            zeroconf,
            SUBSCRIBER_SERVICE,
            instance_name,
            host,
            int(vocabulary.address.rsplit(":", 1)[1]),
            self._txt(),
        )

    def _txt(self) -> dict[str, str]:
        txt = {
            "Type": "ZeroEQ",
            "vocabulary": self.vocabulary.txt_value(),
            "vocabulary_request": self.vocabulary.address,
            "user": getpass.getuser(),
            "application": self.application,
        }
        if self.session:
            txt["session"] = self.session
        if self.management is not None:
            txt["management"] = self.management
        return txt

    def update(self) -> None:
        """Announce the record again (the vocabulary changed)."""
        if self._announcement is not None:
            self._announcement.update(self._txt())

    def close(self) -> None:
        """Withdraw the record and stop the vocabulary server."""
        if self._announcement is not None:
            self._announcement.close()
            self._announcement = None
        self.vocabulary.close()
