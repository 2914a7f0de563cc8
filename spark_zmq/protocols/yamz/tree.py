"""The ports a yamz node announces in its ``YAMZ`` header, and which of them an abstract address
matches.

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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_zmq.errors import ProtocolError
from spark_zmq.protocols.yamz.uri import WILDCARD, Address

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
