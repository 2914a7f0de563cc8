"""The reader's discovery: which publishers to read, and which of their events.

A publisher is read when it is in the query's session (and, with ``compatibleOnly``, its
vocabulary shares an event with ``events``), when the ``publishers`` option names it, or when
the management port was told to subscribe to it. The management port can also take events or
whole publishers away. Each publisher's effective subscription becomes its endpoint's zmq
subscriptions plus metadata (``events``, ``excluded``, ``names``) that decoding uses.

The reader announces itself as the seed's subscriber (``_zeroeq_sub._tcp``, a UUID instance
name, TXT ``vocabulary``, ``vocabulary_request``, ``session``, ``user``, ``application`` and
``management``, the management port's address) on each link it browses, with that link's
addresses, and serves its vocabulary there (``subscriber``).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import zmq

from spark_zmq.log import logger
from spark_zmq.protocols.contract import Discovery, Endpoint, EndpointListener, StateStore
from spark_zmq.protocols.zeroeq.announce import PublisherRecord, Responders, make_zeroconf
from spark_zmq.protocols.zeroeq.lookups import RecordLookups
from spark_zmq.protocols.zeroeq.management import ManagementPort
from spark_zmq.protocols.zeroeq.reqrep import RequestError
from spark_zmq.protocols.zeroeq.selection import Known, Selection, describe
from spark_zmq.protocols.zeroeq.subscriber import SubscriberRecord
from spark_zmq.protocols.zeroeq.vocabulary import request_vocabulary
from spark_zmq.protocols.zeroeq.wire import PUBLISHER_SERVICE, in_session, tcp_endpoint
from spark_zmq.security import NO_CURVE, Curve

if TYPE_CHECKING:
    from zeroconf import ServiceBrowser, ServiceStateChange

    from spark_zmq.protocols.zeroeq.mdns import ZeroEQZeroconf

#: seconds to wait for a publisher's vocabulary reply (a reader's, and the CLI's): a peer that
#: does not answer costs only its event names
VOCABULARY_TIMEOUT = 1.0
#: seconds to wait for one ZeroConf record's details once its name is known
RECORD_TIMEOUT = 3.0
#: faulty records remembered (to log each once); beyond it the oldest is forgotten (and would
#: be logged again if it came back)
MAX_FAULTY_RECORDS = 4096


class ZeroEQDiscovery(Discovery):
    """Publishers of a session via ZeroConf, fixed publishers, and management overrides."""

    def __init__(
        self,
        *,
        session: str,
        events: dict[bytes, str | None],
        interfaces: tuple[str, ...] | None,
        static: tuple[tuple[str, int], ...],
        compatible_only: bool,
        management_bind: str | None,
        application: str,
        state: StateStore,
        curve: Curve = NO_CURVE,
    ) -> None:
        self.curve = curve
        self.session = session
        self.events = events  # empty: every event
        self.interfaces = interfaces
        self.static = static
        self.compatible_only = compatible_only
        self.management_bind = management_bind
        self.application = application
        self.state = state
        self.selection = Selection(session, events, compatible_only)
        self.instance_name = str(uuid.uuid4())
        self._known: dict[str, Known] = {}
        self._joined: dict[str, Endpoint] = {}
        self._passed_over: set[str] = set()  # publishers not read, logged once each
        self.records = RecordReader(curve, self._known_changed, session)
        self._lock = threading.RLock()
        self._listener: EndpointListener | None = None
        self._zeroconf: ZeroEQZeroconf | None = None
        self._responders: Responders | None = None
        self._browser: ServiceBrowser | None = None
        self.subscriber: SubscriberRecord | None = None
        self.management: ManagementPort | None = None

    # -- lifetime ------------------------------------------------------------------------------

    def start(self, listener: EndpointListener) -> None:
        self._listener = listener
        if self.management_bind:
            self.management = ManagementPort(
                self.management_bind, self.state, self._refresh, self.describe, curve=self.curve
            )
            logger.info("zeroeq: management port at %s", self.management.address)
        for host, port in self.static:
            self._known[f"{host}:{port}"] = Known(None, {}, static=True)
        for key in set(self._known) | self._overridden():
            self._refresh(key)
        if self.static:
            return
        from zeroconf import ServiceBrowser

        self._zeroconf = zeroconf = make_zeroconf(self.interfaces)
        # browsing one link: its responder announces too; several: one responder per link
        self._responders = responders = (
            Responders.borrowing(zeroconf) if zeroconf.link else Responders.on(self.interfaces)
        )
        self.subscriber = SubscriberRecord(
            responders,
            instance_name=self.instance_name,
            events=self.events,
            session=self.session,
            application=self.application,
            management=self.management.address if self.management else None,
            curve=self.curve,
        )
        self._browser = ServiceBrowser(
            zeroconf, PUBLISHER_SERVICE, handlers=[self.records.on_change]
        )
        where = ", ".join(self.interfaces) if self.interfaces else "all interfaces"
        shown = repr(self.session) if self.session else "any session (empty session)"
        logger.info("zeroeq: browsing %s on %s for session %s", PUBLISHER_SERVICE, where, shown)

    def close(self) -> None:
        if self._browser is not None:
            self._browser.cancel()
            self._browser = None
        self.records.close()
        if self.subscriber is not None:
            self.subscriber.close()
            self.subscriber = None
        if self._responders is not None:
            self._responders.close()
            self._responders = None
        if self._zeroconf is not None:
            self._zeroconf.close()
            self._zeroconf = None
        if self.management is not None:
            self.management.close()

    # -- what to read --------------------------------------------------------------------------

    def _known_changed(self, key: str, known: Known | None) -> None:
        """What is known of publisher ``key`` changed (``RecordReader``)."""
        with self._lock:
            if known is None:
                self._known.pop(key, None)
            else:
                self._known[key] = known
        self._refresh(key)

    def _overridden(self) -> set[str]:
        return self.management.overrides.publishers() if self.management else set()

    def _refresh(self, key: str) -> None:
        """Work out what to read of publisher ``key`` and tell the listener if it changed."""
        with self._lock:
            endpoint = self._endpoint(key)
            if endpoint is None:
                self._log_passed_over(key)
            if endpoint == self._joined.get(key):
                return
            if self._listener is None:  # closed meanwhile
                return
            if endpoint is None:
                self._joined.pop(key, None)
                self._listener.endpoint_left(key)
                return
            if key not in self._joined:
                self._log_joined(key)
                self._passed_over.discard(key)
            self._joined[key] = endpoint
            if self.subscriber is not None and endpoint.metadata.get("events"):
                for hex_id in endpoint.metadata["events"].split(";"):
                    self.subscriber.vocabulary.register(bytes.fromhex(hex_id))
            self._listener.endpoint_joined(endpoint)

    def _log_passed_over(self, key: str) -> None:
        """One line per publisher that discovery finds but does not read (and why)."""
        known = self._known.get(key)
        if known is None or known.record is None or key in self._passed_over:
            return
        self._passed_over.add(key)
        why = self.selection.why_not_read(known)
        logger.info("zeroeq: publisher %s is not read: %s", key, why)

    def _log_joined(self, key: str) -> None:
        known = self._known.get(key)
        if known is not None and known.record is not None and not self.selection.automatic(known):
            logger.info(
                "zeroeq: publisher %s (session %r) is read by a management request",
                key,
                known.record.session,
            )

    def _endpoint(self, key: str) -> Endpoint | None:
        overrides = self.management.overrides if self.management else None
        return self.selection.endpoint(key, self._known.get(key), overrides)

    def describe(self) -> list[dict]:
        """The current subscriptions, for the management port's List request."""
        with self._lock:
            joined = dict(self._joined)
        return [
            describe(key, endpoint, self.selection.origin(self._known.get(key)))
            for key, endpoint in sorted(joined.items())
        ]


class RecordReader:
    """What the ZeroConf browser reports of publisher records, as what is known of each
    publisher: ``on_known(key, Known)`` for a record read (with its vocabulary), ``on_known(key,
    None)`` for one removed. Faults are logged once per record and reason (at most
    MAX_FAULTY_RECORDS remembered: peers choose the names). A vocabulary that a record of
    another session than ``session`` fails to give is logged at debug level only: such a
    publisher is read only if a management request asks for it, and its TXT ids then serve."""

    def __init__(
        self, curve: Curve, on_known: Callable[[str, Known | None], None], session: str
    ) -> None:
        self.curve = curve
        self.on_known = on_known
        self.session = session
        self.lookups = RecordLookups()
        #: record name -> the faults logged for it, with their levels (each logged once)
        self._faulty: dict[str, set[tuple[int, str]]] = {}
        self._faulty_lock = threading.Lock()

    def on_change(
        self,
        zeroconf: ZeroEQZeroconf,
        service_type: str,
        name: str,
        state_change: ServiceStateChange,
    ) -> None:
        """Runs on zeroconf's browser thread: hands the change to the lookups' pool and
        returns, so that no record's lookup holds back the others (``lookups``)."""
        self.lookups.submit(
            name, lambda: self._handle_safely(zeroconf, service_type, name, state_change)
        )

    def _handle_safely(
        self,
        zeroconf: ZeroEQZeroconf,
        service_type: str,
        name: str,
        state_change: ServiceStateChange,
    ) -> None:
        """Nothing a record holds may escape: a failure with one record is logged (once per
        record and reason) and the record skipped."""
        try:
            self._handle_change(zeroconf, service_type, name, state_change)
        except Exception as exc:  # whatever the record, the others are read on
            self._fault(name, f"could not be handled ({type(exc).__name__}: {exc}); ignored")

    def close(self) -> None:
        """Drop the lookups that wait; running ones end by themselves."""
        self.lookups.close()

    def _handle_change(
        self,
        zeroconf: ZeroEQZeroconf,
        service_type: str,
        name: str,
        state_change: ServiceStateChange,
    ) -> None:
        from zeroconf import ServiceStateChange

        key = name[: -len(PUBLISHER_SERVICE) - 1]
        if state_change is ServiceStateChange.Removed:
            with self._faulty_lock:
                self._faulty.pop(name, None)  # a record that comes back is a new episode
            self.on_known(key, None)
            return
        try:  # the name alone first: it must be host:port before we ask about it
            PublisherRecord.parse(name, {})
        except ValueError as exc:
            self._fault(name, f"the instance name is not host:port ({exc}); ignored")
            return
        zeroconf.keep_one_label(key)  # our questions about it name it as its owner does
        info = zeroconf.get_service_info(service_type, name, timeout=int(RECORD_TIMEOUT * 1000))
        if info is None:
            self._fault(name, "no answer when asked for its record; ignored")
            return
        record = PublisherRecord.parse(name, info.properties)
        vocabulary, fault = self._vocabulary_of(record)
        if fault:
            ours = in_session(record.session, self.session)
            self._fault(name, fault, logging.WARNING if ours else logging.DEBUG)
        else:
            with self._faulty_lock:  # a fault logged before is over: log it if it comes back
                self._faulty.pop(name, None)
        self.on_known(key, Known(record, vocabulary))

    def _fault(self, name: str, why: str, level: int = logging.WARNING) -> None:
        """One line per faulty record, reason and level, however often its publisher announces
        it (a record that moves into the reader's session logs at warning what it logged at
        debug)."""
        with self._faulty_lock:
            reasons = self._faulty.setdefault(name, set())
            new = (level, why) not in reasons
            reasons.add((level, why))
            while len(self._faulty) > MAX_FAULTY_RECORDS:  # peers choose the names: a bound
                del self._faulty[next(iter(self._faulty))]
        if new:
            logger.log(level, "zeroeq: publisher record %r: %s", name, why)

    def _vocabulary_of(self, record: PublisherRecord) -> tuple[dict[bytes, str | None], str | None]:
        """The publisher's vocabulary (asked for when it serves one, else its TXT ids), and why
        asking failed, if it did."""
        ids: dict[bytes, str | None] = dict.fromkeys(record.vocabulary)
        if not record.vocabulary_request:
            return ids, None
        try:
            address = tcp_endpoint(record.vocabulary_request)
        except ValueError as exc:
            return ids, (
                f"its vocabulary_request is not a tcp:// address a subscriber can connect to "
                f"({exc}); using the TXT record's event ids"
            )
        try:
            ids.update(request_vocabulary(address, VOCABULARY_TIMEOUT, self.curve))
        except (RequestError, ValueError, zmq.ZMQError) as exc:
            return ids, f"no vocabulary from {address} ({exc}); using the TXT record's event ids"
        return ids, None
