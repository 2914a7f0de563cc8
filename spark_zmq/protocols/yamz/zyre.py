"""A Zyre node through pyre, with pyre's quirks handled in this one place.

pyre (``zeromq-pyre`` 0.3.4) is used from one thread only, the node's own, since its sockets
belong to that thread. What this module adds around it (``shared/protocols/yamz.md``):

- **A dead beacon is an error, not silence.** A beacon that cannot join its multicast group
  only logs the error and runs on, deaf and mute; one that found no usable interface hands pyre
  the host name ``None``; one that hits a network error later logs it and ends. ``start``
  raises a ZyreError naming the beacon port for the first two (it reads pyre's error records
  while the node starts, and gives the beacon 1 s to settle); the last is reported to
  ``on_failure``.
- **A beacon that dies while pyre starts hangs the start.** pyre's node sends its beacon
  thread three commands in a row; a beacon that ends between them (its first send failed)
  leaves the node blocked forever on the next (seen on a loaded machine, with no network).
  So ``start`` first checks, without sending anything, that the beacon pyre would open has a
  route (``beacon_problem``), and refuses to start a node whose beacon could not work. pyre's
  stop can block the same way, so nodes are stopped with a bound, after any error is reported.
- ``set_port`` wants bytes; header values must be ASCII text.
- pyre picks the interface itself (the first IPv4 one that is neither loopback nor link-local,
  else 127.0.0.1 with multicast group 225.25.25.25) and ignores ``set_interface``; its node is
  seen at that interface's address (``node_address``).
- Peers go evasive after 10 s of silence and are expired (an EXIT) after 30 s; a node that stops
  politely sends a last beacon with port 0, on which its peers report EXIT at once.
- **One malformed message from anyone ends pyre's node thread.** pyre parses each UDP beacon
  (anything that starts ``ZRE``) and each ZRE message on its TCP port in its node thread, and
  a truncated beacon (``struct.error``) or a HELLO whose strings are not UTF-8 ends that thread:
  the node is deaf for good, without a word. ``guard_pyre`` wraps those two handlers once per
  process so that such a message is dropped, with one warning.
- What a peer sends cannot end our node's thread either: an event that does not parse, or a
  callback that raises on it, is one warning for that peer, and the node goes on.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import zmq

from spark_zmq.errors import PeerError
from spark_zmq.extras import optional
from spark_zmq.log import logger

pyre = optional("pyre")
#: pyre's node (``pyre.Pyre``) and event (``pyre.PyreEvent``): pyre has no type hints
PyreNode = Any
PyreEvent = Any

DEFAULT_BEACON_PORT = 5670
#: how often the node's thread checks that pyre's beacon thread is alive
BEACON_CHECK_SECONDS = 0.5
START_TIMEOUT = 10.0
#: how long closing waits for pyre's node to stop
STOP_SECONDS = 2.0
#: how long a new beacon must live to count as started: a beacon whose multicast join failed
#: dies at its first send, just after pyre's start returns
BEACON_SETTLE_SECONDS = 1.0


class ZyreError(PeerError):
    """The Zyre node could not start, or its beacon died."""


def guard_pyre() -> None:
    """Make pyre's node thread drop, rather than die of, a beacon or ZRE message it cannot
    parse (see the module docstring). Idempotent; pyre's own handlers run unchanged."""
    node_class = pyre.pyre_node.PyreNode
    if getattr(node_class, "_spark_zmq_guarded", False):
        return
    for name, what in (("recv_beacon", "UDP beacon"), ("recv_peer", "ZRE message")):
        setattr(node_class, name, _dropping_failures(getattr(node_class, name), what))
    node_class._spark_zmq_guarded = True


def _dropping_failures(handler: Callable, what: str) -> Callable:
    """``handler`` (a PyreNode method), dropping what it fails on: the first drop of each kind
    on a node is a warning, later ones debug lines."""

    def guarded(node: PyreNode) -> None:
        try:
            handler(node)
        except Exception as exc:  # pyre's thread would end here, and the node go deaf
            dropped = node.__dict__.setdefault("_spark_zmq_dropped", {})
            dropped[what] = dropped.get(what, 0) + 1
            log = logger.warning if dropped[what] == 1 else logger.debug
            log(
                "yamz: Zyre node %s dropped a %s it cannot parse (%s: %s); further ones are "
                "not logged",
                getattr(node, "name", "?"),
                what,
                type(exc).__name__,
                exc,
            )

    return guarded


class _BeaconErrors(logging.Handler):
    """The errors pyre's beacon logs (and otherwise survives, deaf or mute): a failed multicast
    join or bind is only a log record there."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self) -> list[str]:
        return [r.getMessage() + (f": {r.exc_info[1]}" if r.exc_info else "") for r in self.records]


@dataclass(frozen=True)
class Peer:
    """A peer as its ENTER event describes it."""

    uuid: str
    name: str
    address: str
    headers: Mapping[str, str]


class ZyreNode:
    """A started Zyre node named ``name`` with ``headers``; reports peers that enter and exit.

    ``on_enter(peer)`` and ``on_exit(uuid, name)`` run on the node's thread; ``on_failure``
    gets a ZyreError when the beacon dies after the start.
    """

    def __init__(
        self,
        name: str,
        headers: Mapping[str, str],
        beacon_port: int,
        on_enter: Callable[[Peer], None],
        on_exit: Callable[[str, str], None],
        on_failure: Callable[[ZyreError], None],
    ) -> None:
        for key, value in headers.items():
            if not (key.isascii() and value.isascii()):
                raise ValueError(f"Zyre header {key!r} must be ASCII text")
        guard_pyre()
        self.name = name
        self.headers = dict(headers)
        self.beacon_port = beacon_port
        self._on_enter, self._on_exit, self._on_failure = on_enter, on_exit, on_failure
        self._started: Future = Future()
        self._stopping = threading.Event()
        self._beacon_errors = _BeaconErrors()
        self._faulty_peers: set[str] = set()  # peers whose events failed, logged once each
        self._thread = threading.Thread(
            target=self._run, name=f"spark_zmq zyre {name}", daemon=True
        )

    def start(self) -> ZyreNode:
        """Start and return once the node beacons; ZyreError if it cannot."""
        problem = beacon_problem(self.beacon_port)
        if problem is not None:
            raise ZyreError(
                f"Zyre node {self.name!r}: no beacon on UDP port {self.beacon_port} "
                f"({problem}); peers cannot be discovered"
            )
        self._thread.start()
        try:
            self.endpoint = self._started.result(START_TIMEOUT)
        except TimeoutError:
            logged = "; ".join(self._beacon_errors.messages())
            raise ZyreError(
                f"Zyre node {self.name!r} did not start within {START_TIMEOUT:g} s"
                + (f" (its beacon on UDP port {self.beacon_port}: {logged})" if logged else "")
            ) from None
        return self

    def _run(self) -> None:
        try:
            node = pyre.Pyre(self.name, ctx=zmq.Context.instance())
            beacon_threads = self._start_pyre(node)
        except Exception as exc:  # reported to start()
            self._started.set_exception(exc)
            return
        failure = self._check_beacon(node, beacon_threads)
        if failure is not None:
            # start() hears of the failure before the node is stopped: pyre's stop can wait
            # forever for a beacon thread that died (see _stop)
            self._started.set_exception(failure)
            _stop(node)
            return
        try:
            self._started.set_result(node.endpoint())
            self._loop(node, beacon_threads)
        except Exception as exc:
            logger.exception("yamz: Zyre node %s stopped by an error", self.name)
            self._on_failure(ZyreError(f"Zyre node {self.name!r} stopped: {exc}"))
        finally:
            _stop(node)

    def _start_pyre(self, node: PyreNode) -> list[threading.Thread]:
        """Start ``node``; the threads pyre started for its beacon."""
        for key, value in self.headers.items():
            node.set_header(key, value)
        node.set_port(str(self.beacon_port).encode())
        before = set(threading.enumerate())
        pyre_beacon_log = logging.getLogger("pyre.zbeacon")
        pyre_beacon_log.addHandler(self._beacon_errors)
        try:
            node.start()
        finally:
            pyre_beacon_log.removeHandler(self._beacon_errors)
        return [t for t in threading.enumerate() if t not in before]

    def _check_beacon(
        self, node: PyreNode, beacon_threads: list[threading.Thread]
    ) -> ZyreError | None:
        """The error of a beacon that failed as the node started, or None once it has lived
        BEACON_SETTLE_SECONDS."""
        logged = self._beacon_errors.messages()  # (while this node started: its own beacon's)
        if logged:
            return ZyreError(
                f"Zyre node {self.name!r}: its beacon on UDP port "
                f"{self.beacon_port} failed to start ({'; '.join(logged)}); "
                f"peers cannot be discovered"
            )
        endpoint = node.endpoint()
        settled = time.monotonic() + BEACON_SETTLE_SECONDS
        while (
            "None" not in endpoint
            and all(t.is_alive() for t in beacon_threads)
            and time.monotonic() < settled
        ):
            time.sleep(0.05)
        if "None" in endpoint or not all(t.is_alive() for t in beacon_threads):
            return ZyreError(
                f"Zyre node {self.name!r}: no beacon on UDP port "
                f"{self.beacon_port} (no usable network interface, or the port "
                f"cannot be bound); peers cannot be discovered"
            )
        return None

    def _loop(self, node: PyreNode, beacon_threads: list[threading.Thread]) -> None:
        """Until ``close``, or until the process's main thread has ended: pyre's actor threads
        are not daemons, so a node left running would keep the interpreter from exiting, and
        the atexit cleanup that closes capture and lets go of the spool (run only after every
        such thread ends) would never run (a query's process whose Spark went away without
        calling stop then held its spool's LOCK for good)."""
        inbox = node.socket()
        main = threading.main_thread()
        while not self._stopping.is_set() and main.is_alive():
            if inbox.poll(BEACON_CHECK_SECONDS * 1000):
                self._take_event(node)
            if not all(t.is_alive() for t in beacon_threads):
                self._on_failure(
                    ZyreError(
                        f"Zyre node {self.name!r}: its beacon on UDP port {self.beacon_port} "
                        f"stopped after a network error; peers are no longer discovered"
                    )
                )
                return

    def _take_event(self, node: PyreNode) -> None:
        """Read one event and hand it on. What a peer sent cannot end this thread (and with
        it discovery): an event that does not parse, or a callback that raises on it, is
        logged once for its peer and skipped."""
        try:
            event = pyre.PyreEvent(node)
        except Exception as exc:  # pyre decodes the peer's name and headers here
            self._log_peer_fault("?", f"an event from it does not parse ({exc})")
            return
        try:
            self._dispatch(event)
        except Exception as exc:
            uuid = event.peer_uuid_bytes.hex() if event.peer_uuid_bytes else "?"
            self._log_peer_fault(
                uuid, f"its {event.type} event failed ({type(exc).__name__}: {exc}); skipped"
            )

    def _log_peer_fault(self, uuid: str, why: str) -> None:
        """One line per peer (by uuid; '?' for events whose peer is unknown)."""
        if uuid not in self._faulty_peers:
            self._faulty_peers.add(uuid)
            logger.warning("yamz: Zyre node %s: peer %s: %s", self.name, uuid, why)

    def _dispatch(self, event: PyreEvent) -> None:
        if event.type == "ENTER":
            headers = {str(k): str(v) for k, v in (event.headers or {}).items()}
            self._on_enter(
                Peer(str(event.peer_uuid), event.peer_name, event.peer_addr or "", headers)
            )
        elif event.type == "EXIT":
            self._on_exit(str(event.peer_uuid), event.peer_name)

    def close(self) -> None:
        """Leave politely (peers see the EXIT at once) and stop the thread."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(START_TIMEOUT)


def _stop(node: PyreNode) -> None:
    """Stop a pyre node, waiting at most STOP_SECONDS. pyre's stop waits for its beacon thread
    to answer; one that died (a network error) answered already, and if the node's own loop
    took that answer, the stop waits forever: it is then left to a thread of its own."""
    stopping = threading.Thread(target=node.stop, name="spark_zmq zyre stop", daemon=True)
    stopping.start()
    stopping.join(STOP_SECONDS)
    if stopping.is_alive():
        logger.debug("yamz: a pyre node did not stop within %g s (its beacon died)", STOP_SECONDS)


def beacon_problem(beacon_port: int) -> str | None:
    """Why the beacon pyre would open on this host cannot work, or None. pyre beacons to the
    broadcast address of the first IPv4 interface that is neither loopback nor link-local,
    else to multicast group MULTICAST_GROUP over loopback; this checks the route to that
    address (and the group's membership) as pyre's beacon would set them up, sending nothing."""
    target, multicast = _beacon_target()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            if multicast:
                membership = struct.pack("4sl", socket.inet_aton(target), socket.INADDR_ANY)
                probe.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
            probe.connect((target, beacon_port))
        except OSError as exc:
            problem = f"{target} cannot be reached: {exc.strerror or exc}"
            if multicast:
                problem += (
                    "; with no IPv4 interface but loopback, pyre beacons to that multicast "
                    "group, which needs loopback up with a multicast route "
                    "(ip route add 224.0.0.0/4 dev lo)"
                )
            return problem
    return None


#: pyre's multicast group for a host with no interface but loopback
MULTICAST_GROUP = "225.25.25.25"


def _beacon_target() -> tuple[str, bool]:
    """Where pyre's beacon sends, as pyre chooses it: (address, whether it is multicast)."""
    interface = _beacon_interface()
    if interface is None:
        return MULTICAST_GROUP, True
    return str(interface.network.broadcast_address), False


def node_address() -> str:
    """The IPv4 address a pyre node on this host is seen at: the one its beacon sends from
    (pyre's choice, as ``beacon_problem`` reads it), which peers connect to for ZRE, and
    127.0.0.1 when there is no interface but loopback (then only this host hears the node)."""
    interface = _beacon_interface()
    return "127.0.0.1" if interface is None else str(interface.ip)


def _beacon_interface() -> ipaddress.IPv4Interface | None:
    """pyre's beacon interface: the first IPv4 one that is neither loopback nor link-local."""
    for interfaces in pyre.zhelper.get_ifaddrs():
        for ipv4 in (families.get(socket.AF_INET) for families in interfaces.values()):
            if not ipv4 or not ipv4.get("addr") or not ipv4.get("netmask"):
                continue
            interface = ipaddress.IPv4Interface(f"{ipv4['addr']}/{ipv4['netmask']}")
            if not (interface.is_loopback or interface.is_link_local):
                return interface
    return None
