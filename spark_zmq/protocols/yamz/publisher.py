"""A writer's port: an XPUB bound at a yamz bind address and announced through Zyre.

The socket is bound first, since the announcement holds the concrete address that binding an
ephemeral one yields. A wildcard host (``tcp://*:*``) is this node's Zyre address, as the yamz
C++ library binds its own address for ``*``: the port listens where it is announced, at the
address every peer that hears the node already reaches; announced as ``tcp://0.0.0.0:port``
(what zmq reports for ``*``), a peer that connects to what it is told (the C++ library does)
would connect to its own host. Then a Zyre node starts with a ``YAMZ`` header: the seed's tree
with the port at ``path`` and the bind address's query as the port's parameters, and the flat
layout of the yamz C++ library beside it (``port_header``), each with that one address: the
C++ library connects once for every address a port lists, so a list of several would deliver
each message several times. Zyre headers are fixed once a node starts, so each publisher runs a
node of its own.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import zmq

from spark_zmq.log import logger
from spark_zmq.protocols.contract import SinkPublisher
from spark_zmq.protocols.xpub import XPubSender
from spark_zmq.protocols.yamz.discovery import HEADER
from spark_zmq.protocols.yamz.wire import Address
from spark_zmq.protocols.yamz.zyre import Peer, ZyreError, ZyreNode, node_address
from spark_zmq.security import NO_CURVE, Curve

#: the hosts of a tcp bind address that mean every interface
WILDCARD_HOSTS = ("*", "0.0.0.0")


def bind_location(location: str, node_host: str) -> str:
    """Where to bind ``location`` (an address without its query): a tcp one whose host is a
    wildcard at ``node_host`` (the Zyre node's address), anything else as it is."""
    if not location.startswith("tcp://"):
        return location
    host, _, port = location[len("tcp://") :].rpartition(":")
    return f"tcp://{node_host}:{port}" if host in WILDCARD_HOSTS else location


def port_header(node: str, path: tuple[str, ...], address: str, params: dict[str, str]) -> str:
    """The ``YAMZ`` header of a node with one PUB port at ``path``: the seed's tree, and for a
    path of two elements (``client/port``) the flat layout of the yamz C++ library beside it,
    in the same JSON object. The C++ library reads only ``clients`` and ``idparms`` and sees a
    header with the tree alone as a node without ports, so its clients would never find the
    port; each parser ignores the other's keys. Compact JSON with sorted keys, as that library
    writes its own."""
    header: dict = {"name": node, "children": port_tree(path, address, params)}
    if len(path) == 2:
        header["clients"] = [
            {
                "clientid": path[0],
                "idparms": [],
                "ports": [
                    {
                        "addresses": [address],
                        "idparms": [{"key": k, "val": v} for k, v in sorted(params.items())],
                        "portid": path[1],
                        "ztype": "PUB",
                    }
                ],
            }
        ]
        header["idparms"] = []
    return json.dumps(header, sort_keys=True, separators=(",", ":"))


def port_tree(path: tuple[str, ...], address: str, params: dict[str, str]) -> list[dict]:
    """The root's children that hold one PUB port at ``path``."""
    vertex: dict = {"name": path[-1], "port": {"address": address, "type": "PUB"}}
    if params:
        vertex["params"] = params
    for name in reversed(path[:-1]):
        vertex = {"name": name, "children": [vertex]}
    return [vertex]


class YamzPublisher(SinkPublisher):
    """Binds ``address``, announces the port as node ``node`` at ``path``, sends with
    back-pressure and counts subscriptions (for ``waitForSubscribers``)."""

    def __init__(
        self,
        node: str,
        address: Address,
        path: tuple[str, ...],
        beacon_port: int,
        *,
        send_hwm: int,
        send_timeout: float | None,
        curve: Curve = NO_CURVE,
    ) -> None:
        node_host = node_address()
        self._xpub = XPubSender(
            bind_location(address.location, node_host),
            send_hwm=send_hwm,
            send_timeout=send_timeout,
            bind=True,
            curve=curve,
        )
        self.address = self._xpub.address
        self.name = f"yamz://{node}/{'/'.join(path)} ({self.address})"
        self._failure: ZyreError | None = None
        header = port_header(node, path, self.address, address.attributes)
        if len(path) != 2:
            logger.info(
                "yamz writer: path %s is not client/port: clients of the yamz C++ library, "
                "which name ports so, cannot find it (readers of the seed's tree can)",
                "/".join(path),
            )
        try:
            self._node = ZyreNode(
                node, {HEADER: header}, beacon_port, _ignore_peer, _ignore_exit, self._failed
            ).start()
        except Exception:
            self._xpub.close()
            raise
        seen_at = urlsplit(self._node.endpoint).hostname
        if bind_location(address.location, node_host) != address.location and seen_at != node_host:
            logger.warning(
                "yamz writer: %s was bound at %s, where pyre's node should be seen, but the "
                "node is at %s: peers that reach the node may not reach the port; bind a "
                "concrete address",
                self.name,
                node_host,
                seen_at,
            )
        logger.info("yamz writer: %s announced (Zyre beacon port %d)", self.name, beacon_port)

    def _failed(self, error: ZyreError) -> None:
        logger.error("yamz writer: %s", error)
        self._failure = error

    def send(self, frames: list[bytes]) -> None:
        self._check()
        self._xpub.send(frames)

    def sending_socket(self) -> zmq.Socket:
        self._check()
        return self._xpub.socket

    def timeout_error(self) -> Exception:
        return self._xpub.timeout_error()

    def _check(self) -> None:
        if self._failure is not None:  # readers can no longer find this port
            raise self._failure

    def subscribers(self, topic: bytes) -> int:
        return self._xpub.subscribers(topic)

    def close(self) -> None:
        self._node.close()
        self._xpub.close()


def _ignore_peer(peer: Peer) -> None:
    """A writer only announces; who else is there does not matter to it."""


def _ignore_exit(uuid: str, name: str) -> None:
    pass
