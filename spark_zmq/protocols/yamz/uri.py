"""yamz addresses: the seed's three categories of URI, and their query parts.

- **concrete**: ``tcp://``, ``ipc://`` or ``inproc://`` with no ``*``; to bind or to connect;
- **ephemeral**: one of those schemes with at least one ``*`` (``tcp://*:*``); to bind only:
  binding yields the concrete address that is announced;
- **abstract**: scheme ``yamz`` (``yamz://node/path``); to connect only: discovery resolves it
  to zero or more concrete addresses.

Any of them may carry a query. On a bind address it is a set of attributes (key=value)
announced with the port; on an abstract address a set of patterns (key=regex) that must fully
match the port's parameters. The query is split by hand rather than with ``parse_qsl``: a
regex's ``+`` must stay a ``+``, not become a space.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
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
