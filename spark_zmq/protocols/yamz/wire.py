"""yamz wire facts (``shared/protocols/yamz.md``): addresses, and the ``YAMZ`` header.

**Addresses**: the seed's three categories of URI, and their query parts.

- **concrete**: ``tcp://``, ``ipc://`` or ``inproc://`` with no ``*``; to bind or to connect;
- **ephemeral**: one of those schemes with at least one ``*`` (``tcp://*:*``); to bind only:
  binding yields the concrete address that is announced;
- **abstract**: scheme ``yamz`` (``yamz://node/path``); to connect only: discovery resolves it
  to zero or more concrete addresses.

Any of them may carry a query. On a bind address it is a set of attributes (key=value)
announced with the port; on an abstract address a set of patterns (key=regex) that must fully
match the port's parameters. The query is split by hand rather than with ``parse_qsl``: a
regex's ``+`` must stay a ``+``, not become a space.

**The header**: the ports a yamz node announces in its ``YAMZ`` header, and which of them an
abstract address matches.

Two header layouts are understood (``shared/protocols/yamz.md``):

- **the seed's tree**: vertices ``{name, port?, params?, children?}``; the root stands for the
  node; ``port`` is ``{address, type}``; a vertex's params apply to its port and its
  descendants, and the nearest vertex that names a parameter wins;
- **the flat variant** of the public yamz code: ``{clients: [{clientid, idparms, ports:
  [{portid, addresses, idparms, ztype}]}], idparms}``, paths ``client/port``, parameters as
  ``{key, val}`` lists in which a key may repeat. The yamz C++ library announces a port that
  only connects (a SUB beside a node's PUB) with an empty address list: it is skipped, not a
  fault, so the node's bound ports are read.

A node may announce both layouts in one header (each parser ignores the other's keys; the yamz
writer does, so that C++ clients find its port); the flat one is read then.

Either way a port's effective parameters map each key to the values of the nearest level that
names it (one value in the seed's tree). A pattern holds when the key exists and its regex fully
matches at least one of those values, as the public code's ``regex_match`` does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from urllib.parse import unquote

from spark_zmq.errors import ProtocolError

SCHEMES = ("tcp", "ipc", "inproc")
ABSTRACT_SCHEME = "yamz"
WILDCARD = "*"


class AddressError(ProtocolError):
    """An address that is malformed, or used for what its category does not allow."""


class Category(Enum):
    CONCRETE = "concrete"
    EPHEMERAL = "ephemeral"
    ABSTRACT = "abstract"


@dataclass(frozen=True)
class Address:
    """A parsed yamz address; ``location`` is the address without its query."""

    text: str
    category: Category
    location: str
    #: the query's key/value pairs in order (attributes, or regex patterns when abstract)
    query: tuple[tuple[str, str], ...] = ()
    #: abstract addresses: the node (may be ``*``) and the path elements (each may be ``*``)
    node: str = ""
    path: tuple[str, ...] = ()
    #: abstract addresses: the query's patterns, compiled
    patterns: tuple[tuple[str, re.Pattern], ...] = field(default=(), compare=False)

    @property
    def attributes(self) -> dict[str, str]:
        """The query as attributes (of a bind address)."""
        return dict(self.query)


def parse(text: str) -> Address:
    """Parse and classify ``text``; AddressError says what is wrong with it."""
    scheme, separator, rest = text.partition("://")
    if not separator or not scheme:
        raise AddressError(
            f"yamz address {text!r} has no scheme: write scheme://..., with "
            f"scheme one of {', '.join(SCHEMES + (ABSTRACT_SCHEME,))}"
        )
    location, _, query_text = rest.partition("?")
    query = _query(text, query_text)
    if scheme == ABSTRACT_SCHEME:
        return _abstract(text, location, query)
    if scheme not in SCHEMES:
        raise AddressError(
            f"yamz address {text!r}: unsupported scheme {scheme!r}; yamz "
            f"supports {', '.join(SCHEMES)} and {ABSTRACT_SCHEME}"
        )
    if not location:
        raise AddressError(f"yamz address {text!r} has nothing after {scheme}://")
    if scheme == "tcp":
        _check_tcp(text, location)
    category = Category.EPHEMERAL if WILDCARD in location else Category.CONCRETE
    return Address(text, category, f"{scheme}://{location}", query)


def for_bind(text: str) -> Address:
    """A concrete or ephemeral address to bind."""
    address = parse(text)
    if address.category is Category.ABSTRACT:
        raise AddressError(
            f"yamz address {text!r} is abstract ({ABSTRACT_SCHEME}://): it "
            f"names sockets to connect to and cannot be bound; bind a concrete "
            f"or ephemeral address such as tcp://*:*"
        )
    return address


def for_connect(text: str) -> Address:
    """A concrete or abstract address to connect to."""
    address = parse(text)
    if address.category is Category.EPHEMERAL:
        raise AddressError(
            f"yamz address {text!r} is ephemeral (it has a '*'): it can only be "
            f"bound; connect to a concrete address or an abstract "
            f"{ABSTRACT_SCHEME}:// one"
        )
    return address


def _query(text: str, query_text: str) -> tuple[tuple[str, str], ...]:
    if not query_text:
        return ()
    pairs = []
    for item in query_text.split("&"):
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise AddressError(
                f"yamz address {text!r}: malformed query item {item!r}; the "
                f"query is key=value pairs joined by '&'"
            )
        pairs.append((unquote(key), unquote(value)))
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise AddressError(f"yamz address {text!r}: query key {repeated[0]!r} is given twice")
    return tuple(pairs)


def _check_tcp(text: str, location: str) -> None:
    host, colon, port = location.rpartition(":")
    if not colon or not host:
        raise AddressError(f"yamz address {text!r}: a tcp address needs host:port")
    if port != WILDCARD and not (
        port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536
    ):
        raise AddressError(f"yamz address {text!r}: port {port!r} is not a port number or '*'")


def _abstract(text: str, location: str, query: tuple[tuple[str, str], ...]) -> Address:
    node, _, path_text = location.partition("/")
    path = tuple(path_text.split("/")) if path_text else ()
    if not node:
        raise AddressError(
            f"yamz address {text!r} names no node: write yamz://NODE/PATH, "
            f"with NODE a Zyre peer name or '*'"
        )
    if not path or any(not element for element in path):
        raise AddressError(
            f"yamz address {text!r} needs a path of non-empty elements after "
            f"the node, such as yamz://{node}/tps or yamz://{node}/*/out"
        )
    patterns = []
    for key, value in query:
        try:
            patterns.append((key, re.compile(value)))
        except (re.error, OverflowError, RecursionError) as exc:
            raise AddressError(
                f"yamz address {text!r}: the pattern of {key!r}, {value!r}, is "
                f"not a valid regular expression: {exc}"
            ) from None
    return Address(
        text,
        Category.ABSTRACT,
        f"{ABSTRACT_SCHEME}://{location}",
        query,
        node,
        path,
        tuple(patterns),
    )


Params = Mapping[str, tuple[str, ...]]


class HeaderError(ProtocolError):
    """A ``YAMZ`` header that is neither the seed's tree nor the flat variant."""


@dataclass(frozen=True)
class Port:
    """One bound socket that a node announces."""

    node: str
    path: tuple[str, ...]
    addresses: tuple[str, ...]
    #: the zmq socket type's name, upper case (PUB, XPUB, PUSH, ...)
    socket_type: str
    params: Params = field(default_factory=dict)

    @property
    def path_text(self) -> str:
        return "/".join(self.path)

    def shown_params(self) -> dict[str, str]:
        """Parameters as one string each (several values of one key joined by commas)."""
        return {key: ",".join(values) for key, values in sorted(self.params.items())}


def ports_of(node: str, header: str) -> list[Port]:
    """The ports in node ``node``'s ``YAMZ`` header; HeaderError names the node and the fault."""
    try:
        data = json.loads(header)
    except (ValueError, RecursionError) as exc:
        raise HeaderError(f"yamz node {node!r}: its YAMZ header is not JSON: {exc}") from None
    try:
        if isinstance(data, dict) and "clients" in data:
            return list(_flat_ports(node, data))
        if isinstance(data, dict) and "name" in data:
            return list(_tree_ports(node, data, (), {}))
    except (KeyError, TypeError, AttributeError) as exc:
        raise HeaderError(
            f"yamz node {node!r}: its YAMZ header has a malformed part "
            f"({type(exc).__name__}: {exc})"
        ) from None
    raise HeaderError(
        f"yamz node {node!r}: its YAMZ header is neither a tree (a root vertex "
        f"with 'name') nor the flat layout (with 'clients')"
    )


def _tree_ports(
    node: str, vertex: dict, path: tuple[str, ...], inherited: Params
) -> Iterator[Port]:
    params = dict(inherited)
    for key, value in (vertex.get("params") or {}).items():
        params[str(key)] = (str(value),)
    port = vertex.get("port")
    if port is not None:
        yield Port(
            node,
            path,
            (_text(port["address"], "port address"),),
            _text(port["type"], "port type").upper(),
            params,
        )
    children = vertex.get("children") or []
    names = [_text(child["name"], "vertex name") for child in children]
    if len(set(names)) != len(names):
        raise HeaderError(
            f"yamz node {node!r}: vertex {'/'.join(path) or '(root)'} has two children of one name"
        )
    for name, child in zip(names, children):
        yield from _tree_ports(node, child, path + (name,), params)


def _flat_ports(node: str, data: dict) -> Iterator[Port]:
    node_params = _idparms(data.get("idparms"))
    for client in data["clients"]:
        client_params = {**node_params, **_idparms(client.get("idparms"))}
        for port in client.get("ports") or []:
            params = {**client_params, **_idparms(port.get("idparms"))}
            addresses = tuple(_text(a, "port address") for a in port["addresses"])
            if not addresses:  # a port that only connects: not an endpoint (module doc)
                continue
            yield Port(
                node,
                (str(client["clientid"]), str(port["portid"])),
                addresses,
                _text(port["ztype"], "ztype").upper(),
                params,
            )


def _idparms(items: list[dict] | None) -> dict[str, tuple[str, ...]]:
    params: dict[str, tuple[str, ...]] = {}
    for item in items or []:
        key = str(item["key"])
        params[key] = params.get(key, ()) + (str(item["val"]),)
    return params


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{what} {value!r} is not a non-empty string")
    return value


def matches(address: Address, port: Port, expected_nodes: frozenset[str] | None = None) -> bool:
    """Whether abstract ``address`` names ``port``. With ``expected_nodes``, a ``*`` node
    matches only nodes of that set (a node named outright matches regardless)."""
    if address.node == WILDCARD:
        if expected_nodes is not None and port.node not in expected_nodes:
            return False
    elif address.node != port.node:
        return False
    if len(address.path) != len(port.path):
        return False
    if any(want not in (WILDCARD, have) for want, have in zip(address.path, port.path)):
        return False
    return all(
        key in port.params and any(pattern.fullmatch(v) for v in port.params[key])
        for key, pattern in address.patterns
    )
