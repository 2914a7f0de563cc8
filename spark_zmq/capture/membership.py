"""Which endpoints capture reads: joins, metadata updates, and the grace of a leaving endpoint.

An endpoint is *joined* (read, its partition open), *leaving* (discovery reported it gone; still
read until its peer closes the connection or ``LEAVE_GRACE`` runs out, because discovery often
reports a peer gone before the last messages it sent have arrived) or *retired* (drained, its
socket closed, its partition retired in the spool). A leaving endpoint that joins again with the
same description is joined again without a new socket.

Only the capture thread calls these (zmq sockets belong to one thread).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator

from spark_zmq.capture.connections import Connection
from spark_zmq.capture.limits import no_room_for_endpoint
from spark_zmq.capture.sockets import Sockets
from spark_zmq.errors import brief
from spark_zmq.log import logger
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.protocols.refused import RefusedEndpoints
from spark_zmq.spool.downtime import Downtime
from spark_zmq.spool.layout import LeaseLost
from spark_zmq.spool.writer import Spool

#: seconds an endpoint that discovery reports gone is still read, for what it sent before going
LEAVE_GRACE = 2.0
#: seconds still read after the peer of a leaving endpoint closed its connection
LEAVE_SETTLE = 0.05
#: refused endpoints remembered, to log each once (maxEndpoints' default)
MAX_REFUSALS_REMEMBERED = 1000


class Membership:
    """The connections of the endpoints capture reads, keyed by partition.

    ``drain`` takes what a connection's socket holds into the spool; it runs before a
    connection's rows change metadata and before a connection is closed, so that nothing
    received is lost on either path.
    """

    def __init__(
        self,
        name: str,
        spool: Spool,
        sockets: Sockets,
        drain: Callable[[Connection], None],
        downtime: Downtime | None = None,
    ) -> None:
        self.name = name
        self._spool = spool
        #: partitions not captured while capture was not running: a connection opened for one
        #: owes its gap row (written with its first rows, ``spooling``)
        self._downtime = downtime
        self._sockets = sockets
        self._drain = drain
        self._connections: dict[str, Connection] = {}
        #: endpoints that could not be opened, each logged once (the driver's guard bounds
        #: what discovery reports, ``placement.guard``; this remembers at most as many)
        self._refused = RefusedEndpoints(name, MAX_REFUSALS_REMEMBERED)
        #: endpoints that joined (or came back), changed and left (``stats.DISCOVERY_EVENTS``)
        self.events: Counter[str] = Counter()

    def __iter__(self) -> Iterator[Connection]:
        return iter(list(self._connections.values()))

    def __contains__(self, key: object) -> bool:
        return key in self._connections

    def __len__(self) -> int:
        return len(self._connections)

    @property
    def refused(self) -> int:
        """Endpoints refused now (remembered: at most ``MAX_REFUSALS_REMEMBERED``)."""
        return len(self._refused)

    def items(self) -> list[tuple[str, Connection]]:
        """A copy, safe to read from another thread (for statistics)."""
        return list(self._connections.items())

    def join(self, endpoint: Endpoint) -> None:
        old = self._connections.get(endpoint.key)
        if old is not None and old.leave_by is not None:
            if old.endpoint == endpoint:  # back before it was let go
                old.leave_by = None
                self.events["joined"] += 1
                logger.info("%s: endpoint %s is back", self.name, endpoint.key)
                return
            self.retire(old)
            old = None
        if old is not None:
            if old.endpoint == endpoint:
                return
            if _same_socket(old.endpoint, endpoint):
                self._update(old, endpoint)
                return
            self.retire(old)
        self._open(endpoint)

    def _open(self, endpoint: Endpoint) -> None:
        """A new endpoint's partition and connection; one that cannot be opened is refused
        alone (one log line naming it and why), so that the others keep flowing. A partition
        this process does not hold (a newer holder took it over before it joined) is not
        read: another capture process writes it now."""
        problem = endpoint.problem() or no_room_for_endpoint()
        if problem is None:
            try:
                self._spool.open_partition(endpoint.key)
            except LeaseLost as exc:
                logger.warning("%s: endpoint %s is not read here: %s", self.name, endpoint.key, exc)
                return
            except Exception as exc:  # its folder cannot be made: a name the storage refuses
                problem = f"its spool partition cannot be opened ({_text(exc)})"
        if problem is None:
            try:
                conn = self._sockets.connect(endpoint)
            except Exception as exc:  # zmq refused the address
                self._spool.retire(endpoint.key)
                problem = f"capture cannot connect to it ({_text(exc)})"
            else:
                conn.down_since = self._downtime.since(endpoint.key) if self._downtime else None
                self._connections[endpoint.key] = conn
        if problem is not None:
            self._refused.refuse(endpoint, problem)
            return
        self._refused.forget(endpoint.key)
        self.events["joined"] += 1
        logger.info("%s: endpoint joined: %s at %s", self.name, endpoint.key, endpoint.address)

    def _update(self, conn: Connection, endpoint: Endpoint) -> None:
        """Same address and socket type, new metadata or subscriptions: keep the socket."""
        self._drain(conn)  # rows so far keep the metadata they arrived under
        self._sockets.resubscribe(conn, conn.endpoint.subscriptions, endpoint.subscriptions)
        conn.endpoint = endpoint
        self.events["changed"] += 1
        logger.info(
            "%s: endpoint %s updated its metadata or subscriptions", self.name, endpoint.key
        )

    def leave(self, key: str) -> None:
        """Discovery says the endpoint is gone: read on until its peer closes the connection."""
        conn = self._connections.get(key)
        if conn is None or conn.leave_by is not None:
            return
        settle = LEAVE_SETTLE if conn.health.disconnected_at is not None else LEAVE_GRACE
        conn.leave_by = time.monotonic() + settle
        conn.health.recheck_at = None
        self.events["left"] += 1
        logger.info(
            "%s: endpoint left: %s at %s; reading what it sent until it disconnects",
            self.name,
            key,
            conn.endpoint.address,
        )

    def peer_disconnected(self, conn: Connection) -> bool:
        """The peer closed ``conn``: if it is leaving, what it sent has arrived, so it can go
        soon. True if the event was about a leaving endpoint (and so is handled)."""
        if conn.leave_by is None:
            return False
        conn.leave_by = min(conn.leave_by, time.monotonic() + LEAVE_SETTLE)
        return True

    def next_leave(self) -> float:
        """When the next leaving endpoint is let go (inf: none is leaving)."""
        times = [c.leave_by for c in self._connections.values() if c.leave_by is not None]
        return min(times, default=float("inf"))

    def retire_left(self) -> None:
        """Let go of every leaving endpoint whose time has come."""
        now = time.monotonic()
        for conn in self:
            if conn.leave_by is not None and conn.leave_by <= now:
                self.retire(conn)

    def retire(self, conn: Connection) -> None:
        """Drain ``conn``, close its socket and retire its partition."""
        key = conn.endpoint.key
        del self._connections[key]
        self._drain(conn)  # what already arrived is kept
        self._sockets.close(conn)
        self._spool.retire(key)
        logger.info("%s: partition %s retired after %d messages", self.name, key, conn.received)

    def drop(self, key: str, why: str) -> None:
        """Stop reading ``key`` and write nothing more of it: its partition is no longer this
        capture's (``why``: a newer holder took it over). What its buffer holds is dropped;
        the new holder's gap row covers it."""
        conn = self._connections.pop(key, None)
        if conn is None:
            return
        self._sockets.close(conn)
        logger.warning(
            "%s: stopped reading %s after %d messages: %s", self.name, key, conn.received, why
        )

    def close_all(self, last_words: Callable[[Connection], None] | None) -> None:
        """Close every socket (capture is stopping); ``last_words`` first, if given."""
        for conn in self:
            if last_words is not None:
                last_words(conn)
            self._sockets.close(conn)
        self._connections.clear()


def _text(exc: Exception) -> str:
    return f"{type(exc).__name__}: {brief(str(exc))}"


def _same_socket(old: Endpoint, new: Endpoint) -> bool:
    return old.address == new.address and old.socket_type == new.socket_type
