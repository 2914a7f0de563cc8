"""Resolution of yamz addresses: concrete ones as given, abstract ones through Zyre.

The reader runs a Zyre node of its own (with a valid ``YAMZ`` header, a tree of just its root,
since a yamz peer may abort on an ENTER without one). Each peer's ENTER header lists its bound
ports; every port an abstract address matches, and that a reader can connect to (PUB, XPUB or
PUSH), becomes an endpoint keyed by its concrete address. A peer's EXIT retires its endpoints.
A port announced on a wildcard host (``tcp://0.0.0.0:port``, ``tcp://*:port``) is reached at
the host of the peer's Zyre address.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

import zmq

from spark_zmq.log import logger
from spark_zmq.protocols.addresses import AddressError, connect_address
from spark_zmq.protocols.contract import Discovery, Endpoint, EndpointListener
from spark_zmq.protocols.yamz.wire import Address, Category, HeaderError, Port, matches, ports_of
from spark_zmq.protocols.yamz.zyre import Peer, ZyreError, ZyreNode

HEADER = "YAMZ"
#: the socket a reader opens to read each kind of announced port
READER_SOCKETS = {"PUB": zmq.SUB, "XPUB": zmq.SUB, "PUSH": zmq.PULL}
WILDCARD_HOSTS = ("0.0.0.0", "*", "[::]", "::")


def own_header(node: str, children: list[dict] | None = None) -> str:
    """A node's ``YAMZ`` header: the seed's tree with the node as its root."""
    root: dict = {"name": node}
    if children:
        root["children"] = children
    return json.dumps(root, sort_keys=True)


def reachable(address: str, peer_address: str) -> str:
    """``address`` with a wildcard host replaced by the host of the peer's Zyre endpoint."""
    if not address.startswith("tcp://"):
        return address
    host, _, port = address[len("tcp://") :].rpartition(":")
    if host not in WILDCARD_HOSTS:
        return address
    peer_host = urlsplit(peer_address).hostname
    return f"tcp://{peer_host}:{port}" if peer_host else address


class ZyreDiscovery(Discovery):
    """Concrete addresses at once; ports matching the abstract ones as Zyre peers come and go."""

    def __init__(
        self,
        node: str,
        beacon_port: int,
        addresses: tuple[Address, ...],
        expected_nodes: frozenset[str] | None,
        endpoint_of: Callable[[str, Port | None, int], Endpoint],
    ) -> None:
        self.node_name = node
        self.beacon_port = beacon_port
        self.concrete = [a for a in addresses if a.category is Category.CONCRETE]
        self.abstract = [a for a in addresses if a.category is Category.ABSTRACT]
        self.expected_nodes = expected_nodes
        self.endpoint_of = endpoint_of
        self._lock = threading.Lock()
        #: endpoint key -> the peers (uuids) that announce it
        self._providers: dict[str, set[str]] = {}
        self._by_peer: dict[str, set[str]] = {}
        self._unreadable: set[tuple[str, str]] = set()  # logged once each
        self._refused: set[str] = set()  # peers whose announcement was refused, logged once
        self._failure: ZyreError | None = None
        self._node: ZyreNode | None = None

    def start(self, listener: EndpointListener) -> None:
        self._listener = listener
        for address in self.concrete:
            listener.endpoint_joined(self.endpoint_of(address.location, None, zmq.SUB))
        if self.abstract:
            self._node = ZyreNode(
                self.node_name,
                {HEADER: own_header(self.node_name)},
                self.beacon_port,
                self._entered,
                self._exited,
                self._failed,
            ).start()
            logger.info(
                "yamz: Zyre node %s (beacon port %d) resolving %s",
                self.node_name,
                self.beacon_port,
                ", ".join(a.text for a in self.abstract),
            )

    def _entered(self, peer: Peer) -> None:
        """Runs on the Zyre node's thread for each peer that enters. Whatever the peer's header
        holds (not JSON, a tree nested past the recursion limit, values of the wrong type),
        nothing escapes: the fault is logged once for the peer and its ports are skipped."""
        try:
            self._read_ports(peer)
        except HeaderError as exc:
            self._refuse(peer, f"{exc}; its ports are not read")
        except Exception as exc:  # the node's thread must go on, whatever a peer announces
            self._refuse(
                peer,
                f"yamz node {peer.name!r}: handling its announcement failed "
                f"({type(exc).__name__}: {exc}); its ports are not read",
            )

    def _refuse(self, peer: Peer, why: str) -> None:
        """One line per peer (by uuid) whose announcement is refused."""
        if peer.uuid not in self._refused:
            self._refused.add(peer.uuid)
            logger.warning("yamz: Zyre peer %s at %s: %s", peer.uuid, peer.address, why)

    def _read_ports(self, peer: Peer) -> None:
        header = peer.headers.get(HEADER)
        if header is None:
            logger.info(
                "yamz: Zyre peer %s (%s) has no YAMZ header; it announces no ports",
                peer.name,
                peer.address,
            )
            return
        for port in ports_of(peer.name, header):
            if any(matches(a, port, self.expected_nodes) for a in self.abstract):
                self._join(peer, port)

    def _join(self, peer: Peer, port: Port) -> None:
        socket_type = READER_SOCKETS.get(port.socket_type)
        if socket_type is None:
            if (peer.uuid, port.path_text) not in self._unreadable:
                self._unreadable.add((peer.uuid, port.path_text))
                logger.warning(
                    "yamz: port %s/%s of type %s matches but cannot be read (a "
                    "reader reads PUB, XPUB and PUSH ports)",
                    port.node,
                    port.path_text,
                    port.socket_type,
                )
            return
        # A port bound on several addresses is one socket: connecting to each would read
        # every message more than once.
        address = reachable(port.addresses[0], peer.address)
        try:
            connect_address(address)
        except AddressError as exc:
            self._refuse(
                peer, f"port {port.node}/{port.path_text} has an address zmq refuses ({exc})"
            )
            return
        endpoint = self.endpoint_of(address, port, socket_type)
        with self._lock:
            self._providers.setdefault(endpoint.key, set()).add(peer.uuid)
            self._by_peer.setdefault(peer.uuid, set()).add(endpoint.key)
        self._listener.endpoint_joined(endpoint)

    def _exited(self, uuid: str, name: str) -> None:
        self._refused.discard(uuid)  # a peer that comes back is judged anew
        gone = []
        with self._lock:
            for key in self._by_peer.pop(uuid, ()):
                providers = self._providers.get(key, set())
                providers.discard(uuid)
                if not providers:
                    self._providers.pop(key, None)
                    gone.append(key)
        for key in gone:
            self._listener.endpoint_left(key)
        if gone:
            logger.info("yamz: Zyre peer %s left; retiring %s", name, ", ".join(gone))

    def _failed(self, error: ZyreError) -> None:
        logger.error("yamz: %s", error)
        self._failure = error

    def check(self) -> None:
        if self._failure is not None:
            raise self._failure

    def close(self) -> None:
        if self._node is not None:
            self._node.close()
            self._node = None
