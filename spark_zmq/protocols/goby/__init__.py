"""Goby3: the ``goby`` format, through gobyd's Manager and Router.

``options``    the format's own options and its frozen reader and writer settings
``wire``       identifiers (``/group/scheme/type/pid/thread/`` + NUL), schemes, prefixes
``messages``   (extra) the Manager's protobuf messages, built at import (no protoc step)
``manager``    (extra) the client of the Manager: where it is, the socket exchange, the hold
               handshake
``daemon``     (extra) a stand-in gobyd: Manager, Router (XPUB/XSUB proxy), hold responder
``discovery``  the Router found through the Manager, followed across gobyd restarts
``payloads``   (extra) CSTR, JSON (BSON) and PROTOBUF (descriptor set) payloads as text
``publisher``  a writer's publisher on the Router, under gobyd's hold
``format``     what the generic stream reader and writer need (options, columns, decode, encode)
"""

from spark_zmq.protocols.goby.daemon import GobyDaemon
from spark_zmq.protocols.goby.format import Goby
from spark_zmq.protocols.goby.manager import (
    HoldHandshake,
    HoldTimeout,
    ManagerAddress,
    ManagerError,
    ManagerUnreachable,
    Router,
    request_router,
)
from spark_zmq.protocols.goby.wire import (
    SCHEMES,
    Identifier,
    IdentifierError,
    identifier,
    split_message,
)

__all__ = [
    "SCHEMES",
    "Goby",
    "GobyDaemon",
    "HoldHandshake",
    "HoldTimeout",
    "Identifier",
    "IdentifierError",
    "ManagerAddress",
    "ManagerError",
    "ManagerUnreachable",
    "Router",
    "identifier",
    "request_router",
    "split_message",
]
