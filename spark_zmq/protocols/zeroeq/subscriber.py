"""The seed's subscriber record: what a reader announces of itself over ZeroConf
(``_zeroeq_sub._tcp``), and the vocabulary server that record names.

Its TXT holds the session, the user, the application, the events the reader wants (ids, and
their names through the vocabulary server) and, where a link reaches it, the management port.
It is announced on every link that discovery runs on (``discoveryInterfaces``), each link's
record with that link's addresses (``links``).
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING

from spark_zmq.log import logger
from spark_zmq.protocols.zeroeq.announce import Announcement, LinkRecord
from spark_zmq.protocols.zeroeq.links import Link, announced_host, bind_hosts, endpoint_on
from spark_zmq.protocols.zeroeq.vocabulary import Vocabulary
from spark_zmq.protocols.zeroeq.wire import SUBSCRIBER_SERVICE, parse_address, zmq_host
from spark_zmq.security import NO_CURVE, Curve

if TYPE_CHECKING:
    from spark_zmq.protocols.zeroeq.announce import Responders


class SubscriberRecord:
    """A reader's subscriber record on each link of ``responders``, kept current as its
    vocabulary changes.

    Invariant: every address a link's record names listens there. The vocabulary server binds
    at each address it is announced at (``links.bind_hosts``: the address of each link, and no
    other interface); a link's ``management`` is the management port (bound where
    ``managementUri`` says) as that link reaches it, and is left out where it does not: a
    loopback port, the default, is named on loopback only."""

    def __init__(
        self,
        responders: Responders,
        *,
        instance_name: str,
        events: dict[bytes, str | None],
        session: str,
        application: str,
        management: str | None,
        curve: Curve = NO_CURVE,
    ) -> None:
        self.instance_name = instance_name
        self.session = session
        self.application = application
        self.management = management
        self.links = responders.links
        hosts = bind_hosts(self.links)
        vocabulary = Vocabulary(
            "subscriber", [f"tcp://{zmq_host(host)}:*" for host in hosts], curve=curve
        )
        self.vocabulary = vocabulary
        self._vocabulary_at = dict(zip(hosts, vocabulary.addresses))
        for wire, name in events.items():
            vocabulary.register(wire, name)
        vocabulary.on_change = self.update
        self._announcement: Announcement | None = Announcement(
            responders, SUBSCRIBER_SERVICE, self._record
        )
        for link, record in self._announcement.records.items():
            logger.info(
                "zeroeq: subscriber record %s on %s: vocabulary_request %s, management %s",
                instance_name,
                link,
                record.txt["vocabulary_request"],
                record.txt.get("management", "not announced here"),
            )

    def vocabulary_request(self, link: Link) -> str | None:
        """The vocabulary server's address as ``link``'s record names it."""
        host = announced_host("*", link, self.links)
        return None if host is None else self._vocabulary_at.get(host)

    def _record(self, link: Link) -> LinkRecord | None:
        address = self.vocabulary_request(link)
        if address is None:
            return None
        txt = {
            "Type": "ZeroEQ",
            "vocabulary": self.vocabulary.txt_value(),
            "vocabulary_request": address,
            "user": getpass.getuser(),
            "application": self.application,
        }
        if self.session:
            txt["session"] = self.session
        if self.management is not None:
            management = endpoint_on(self.management, link, self.links)
            if management is not None:
                txt["management"] = management
        host, port = parse_address(address)
        return LinkRecord(self.instance_name, host, port, txt)

    def update(self) -> None:
        """Announce the records again (the vocabulary changed)."""
        if self._announcement is not None:
            self._announcement.update()

    def close(self) -> None:
        """Withdraw the records and stop the vocabulary server."""
        if self._announcement is not None:
            self._announcement.close()
            self._announcement = None
        self.vocabulary.close()
