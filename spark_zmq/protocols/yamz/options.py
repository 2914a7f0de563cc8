"""The yamz format's own options, defined once (see ``spark_zmq.options``): the reader's and
the writer's, and the parsers only they use."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from spark_zmq.options import Option, OptionError, Options, comma_list, port, text
from spark_zmq.protocols.yamz.wire import Address, for_bind, for_connect
from spark_zmq.protocols.yamz.zyre import DEFAULT_BEACON_PORT
from spark_zmq.security import Curve
from spark_zmq.stream_options import SEND_HIGH_WATER_MARK, SEND_TIMEOUT, curve_of

#: addresses in option ``address`` are separated by commas or blanks before the next scheme
#: (a regex in a query may hold a comma, as in ``{1,2}``)
_ADDRESS_SEPARATOR = re.compile(r"[\s,]+(?=[A-Za-z][A-Za-z0-9+.-]*://)")
DEFAULT_WRITER_ADDRESS = "tcp://*:*"
DEFAULT_PATH = "spark/out"


def _connect_addresses(value: str) -> tuple[Address, ...]:
    items = [item for item in _ADDRESS_SEPARATOR.split(value.strip()) if item]
    if not items:
        raise ValueError("no address")
    return tuple(for_connect(item.rstrip(",")) for item in items)


def _bind_address(value: str) -> Address:
    return for_bind(value.strip())


def _path(value: str) -> tuple[str, ...]:
    elements = tuple(value.strip().strip("/").split("/"))
    if any(not element or element == "*" for element in elements):
        raise ValueError("empty element or '*'")
    return elements


def _node_names(value: str) -> frozenset[str]:
    return frozenset(comma_list(value))


def unique_node_name(role: str) -> str:
    return f"spark-{role}-{uuid.uuid4().hex[:8]}"


BEACON_PORT = Option(
    "beaconPort",
    port,
    "a port number",
    str(DEFAULT_BEACON_PORT),
    "The UDP port of Zyre beacons: nodes find each other only on the same port.",
)

_ZYRE_OPTIONS: tuple[Option[Any], ...] = (BEACON_PORT,)


ADDRESS = Option(
    "address",
    _connect_addresses,
    "yamz addresses, separated by commas or blanks",
    None,
    "Required. What to read: abstract addresses such as "
    "`yamz://*/tps?det=tpc&apa=4[12]` (node and path elements may be `*`, which "
    "matches one element; query values are regexes that must fully match the port's "
    "parameter), resolved through Zyre to every matching port as peers come and go, "
    "and concrete ones such as `tcp://host:port` (read with a SUB).",
)

NODE = Option(
    "node",
    text,
    "a Zyre node name",
    None,
    "The reader's own Zyre node name. Default: a unique `spark-reader-...`.",
)

EXPECTED_NODES = Option(
    "expectedNodes",
    _node_names,
    "comma-separated node names",
    None,
    "Restrict `*` as a node to these nodes (a node named outright still matches).",
)

SUBSCRIBE = Option(
    "subscribe",
    comma_list,
    "comma-separated topic prefixes",
    None,
    "Subscriptions of the SUB sockets (on PUB and XPUB ports). Default: everything.",
)

READER_OPTIONS: tuple[Option[Any], ...] = _ZYRE_OPTIONS + (
    ADDRESS,
    NODE,
    EXPECTED_NODES,
    SUBSCRIBE,
)


WRITER_ADDRESS = Option(
    "address",
    _bind_address,
    "a concrete or ephemeral address with attributes",
    DEFAULT_WRITER_ADDRESS,
    "Where the writer binds its socket, such as `tcp://*:*?det=tpc&apa=42`. A `*` host "
    "is the address of the writer's Zyre node (the interface pyre beacons on; loopback "
    "when there is no other), where the socket is bound and which it is announced at; a "
    "`*` port picks any port. The query's key=value pairs are announced as the port's "
    "parameters, for abstract addresses to match.",
)

PATH = Option(
    "path",
    _path,
    "a path such as spark/out",
    DEFAULT_PATH,
    "Where the port sits in the node's YAMZ tree: `yamz://NODE/spark/out` finds it.",
)

WRITER_NODE = Option(
    "node",
    text,
    "a Zyre node name",
    None,
    "The writer's Zyre node name (each Python worker runs a node of this name). "
    "Default: a unique `spark-writer-...` per Python worker.",
)

WRITER_OPTIONS: tuple[Option[Any], ...] = _ZYRE_OPTIONS + (
    WRITER_ADDRESS,
    PATH,
    WRITER_NODE,
)


@dataclass(frozen=True)
class ReadSettings:
    """A yamz reader's settings, made once per query on the driver (``of``). ``node`` None: a
    unique name is made when discovery starts; ``subscriptions``: of the SUB sockets."""

    addresses: tuple[Address, ...]
    node: str | None
    expected_nodes: frozenset[str] | None
    subscriptions: tuple[bytes, ...]
    beacon_port: int
    curve: Curve

    @classmethod
    def of(cls, options: Options) -> ReadSettings:
        """OptionError when ``address`` is not given (there is no default)."""
        addresses = options.get(ADDRESS)
        if addresses is None:
            raise OptionError(
                "yamz: option 'address' is required: the yamz:// or concrete "
                "addresses to read, such as yamz://*/spark/out"
            )
        return cls(
            addresses=addresses,
            node=options.get(NODE),
            expected_nodes=options.get(EXPECTED_NODES),
            subscriptions=tuple(p.encode() for p in options.get(SUBSCRIBE) or ("",)),
            beacon_port=options.get(BEACON_PORT),
            curve=curve_of(options),
        )


@dataclass(frozen=True)
class WriteSettings:
    """A yamz writer's settings (``of``: once per query, on the driver). ``node`` None: each
    Python worker's node gets a unique name."""

    address: Address
    node: str | None
    path: tuple[str, ...]
    beacon_port: int
    send_high_water_mark: int
    send_timeout: float | None
    curve: Curve

    @classmethod
    def of(cls, options: Options) -> WriteSettings:
        return cls(
            address=options.get(WRITER_ADDRESS),
            node=options.get(WRITER_NODE),
            path=options.get(PATH),
            beacon_port=options.get(BEACON_PORT),
            send_high_water_mark=options.get(SEND_HIGH_WATER_MARK),
            send_timeout=options.get(SEND_TIMEOUT) or None,
            curve=curve_of(options),
        )
