"""yamz: sockets named by URIs and found through Zyre discovery (the yamz design).

``options``    the format's own options and its frozen reader and writer settings
``wire``       the seed's address categories (concrete, ephemeral, abstract ``yamz://``) and
               queries; the ports a node announces in its ``YAMZ`` header (the seed's tree, or the
               flat layout of the public yamz code) and the matching of abstract addresses
``zyre``       (extra) a Zyre node through pyre, with pyre's quirks handled in one place
``discovery``  abstract addresses resolved to the concrete addresses of matching ports
``publisher``  a writer's port: an XPUB bound and announced in its node's tree
``format``     what the generic stream reader and writer need (options, columns, decode, encode)
"""

from spark_zmq.protocols.yamz.format import Yamz
from spark_zmq.protocols.yamz.publisher import YamzPublisher
from spark_zmq.protocols.yamz.wire import (
    Address,
    AddressError,
    Category,
    HeaderError,
    Port,
    for_bind,
    for_connect,
    matches,
    parse,
    ports_of,
)
from spark_zmq.protocols.yamz.zyre import Peer, ZyreError, ZyreNode

__all__ = [
    "Address",
    "AddressError",
    "Category",
    "HeaderError",
    "Peer",
    "Port",
    "Yamz",
    "YamzPublisher",
    "ZyreError",
    "ZyreNode",
    "for_bind",
    "for_connect",
    "matches",
    "parse",
    "ports_of",
]
