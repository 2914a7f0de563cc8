"""The links (network interfaces) a ZeroEQ side announces itself on, and the address it gives
on each.

mDNS is per link: a record sent on ``eth0`` reaches the hosts of ``eth0``, so the addresses in
it (its A record, and the ``host:port`` of an instance name, ``vocabulary_request`` and
``management``) must be ones those hosts reach. python-zeroconf sends the records it holds to
every interface it was given, so a side announces through one responder per link
(``announce.Responders``), each with a record of its own, made by the rule of
``announced_host``:

- on a link other than loopback, a socket bound to every interface is announced at that link's
  address, and one bound to an address only on the link that holds the address (a host on
  another link may not reach it); a loopback address never leaves loopback;
- on loopback, which only this host sees, a socket is announced at the address of the first
  other link it is announced on (every address of a host reaches it from the host itself), else
  at its own loopback address. So a process here that browses loopback and a LAN, as a reader
  does by default, finds one instance name (``10.0.0.5:PORT``) for a publisher bound to ``*``,
  not two (``127.0.0.1:PORT`` too) that it, and a C++ subscriber, would each read.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spark_zmq.protocols.zeroeq.wire import zmq_host

#: hosts a socket bound to every interface reports (``tcp://0.0.0.0:PORT``), or is given as
WILDCARD_HOSTS = frozenset({"*", "", "0.0.0.0", "::"})


@dataclass(frozen=True)
class Link:
    """One interface to announce on: its name and the IPv4 addresses taken of it (the first is
    the one announced), with their networks. Invariant: at least one address."""

    name: str
    addresses: tuple[str, ...]
    networks: tuple[ipaddress.IPv4Network, ...]

    @property
    def address(self) -> str:
        return self.addresses[0]

    @property
    def loopback(self) -> bool:
        return ipaddress.IPv4Address(self.address).is_loopback

    def reaches(self, peer: str) -> bool:
        """Whether ``peer`` (an address that sent us a packet) is a host of this link: in one
        of its networks (on loopback, 127.0.0.0/8: this host)."""
        try:
            address = ipaddress.IPv4Address(peer)
        except ValueError:
            return False
        return any(address in network for network in self.networks)

    def __str__(self) -> str:
        return f"{self.name} ({self.address})"


def links_of(interfaces: tuple[str, ...] | None) -> list[Link]:
    """``discoveryInterfaces`` as links: None is every interface with an IPv4 address; an
    entry is an interface name (all its IPv4 addresses) or an IPv4 address of this host (that
    address, on its interface). ValueError names an entry that is neither."""
    import ifaddr

    adapters = [a for a in ifaddr.get_adapters() if _ipv4(a)]
    if interfaces is None:
        return [_link(adapter.nice_name, _ipv4(adapter)) for adapter in adapters]
    chosen: dict[str, list[tuple[str, int]]] = {}
    for entry in interfaces:
        adapter, ips = _entry(entry, adapters)
        taken = chosen.setdefault(adapter, [])
        taken.extend(ip for ip in ips if ip not in taken)
    return [_link(name, ips) for name, ips in chosen.items()]


def _ipv4(adapter: Any) -> list[tuple[str, int]]:
    """An ``ifaddr`` adapter's IPv4 addresses with their prefix lengths."""
    return [(ip.ip, ip.network_prefix) for ip in adapter.ips if isinstance(ip.ip, str)]


def _entry(entry: str, adapters: list[Any]) -> tuple[str, list[tuple[str, int]]]:
    """The interface an entry names and the addresses it takes of it."""
    try:
        address = str(ipaddress.IPv4Address(entry))
    except ValueError:
        address = None
    for adapter in adapters:
        ips = _ipv4(adapter)
        if address is None and adapter.nice_name == entry:
            return adapter.nice_name, ips
        if address is not None and address in (ip for ip, _ in ips):
            return adapter.nice_name, [ip for ip in ips if ip[0] == address]
    here = ", ".join(f"{a.nice_name} ({', '.join(ip for ip, _ in _ipv4(a))})" for a in adapters)
    what = (
        f"no interface {entry!r} with an IPv4 address"
        if address is None
        else (f"{entry} is not an address of this host")
    )
    raise ValueError(f"discoveryInterfaces: {what}; interfaces here: {here or 'none'}")


def _link(name: str, ips: list[tuple[str, int]]) -> Link:
    networks = tuple(ipaddress.IPv4Network(f"{ip}/{prefix}", strict=False) for ip, prefix in ips)
    return Link(name, tuple(ip for ip, _ in ips), networks)


def is_wildcard(host: str) -> bool:
    return host in WILDCARD_HOSTS


def announced_host(bound: str, link: Link, links: Sequence[Link]) -> str | None:
    """The host that a socket bound at ``bound`` (an address, or a wildcard for every
    interface) is announced at on ``link``, one of ``links`` (all that the side announces on);
    None: not on this link (see the module docstring for the rule)."""
    if link.loopback:
        if is_wildcard(bound):
            return primary_address(links)
        return bound
    if is_wildcard(bound):
        return link.address
    return bound if bound in link.addresses else None


def primary_address(links: Sequence[Link]) -> str:
    """The address of the first link that is not loopback, else 127.0.0.1: where a socket
    bound to every interface is announced on loopback, and the name a publisher goes by."""
    for link in links:
        if not link.loopback:
            return link.address
    return "127.0.0.1"


def endpoint_on(endpoint: str, link: Link, links: Sequence[Link]) -> str | None:
    """A bound zmq endpoint (``LAST_ENDPOINT``: ``tcp://0.0.0.0:5555``, ``tcp://127.0.0.1:5555``,
    ``ipc://path``) as it is announced on ``link``; None: not on this link. A tcp endpoint
    follows ``announced_host``; an ipc one (a path on this host) is announced on loopback
    only, an inproc one (inside this process) nowhere."""
    if endpoint.startswith("tcp://"):
        host, _, port = endpoint[len("tcp://") :].rpartition(":")
        announced = announced_host(host.strip("[]"), link, links)
        return None if announced is None else f"tcp://{zmq_host(announced)}:{port}"
    if endpoint.startswith("ipc://") and link.loopback:
        return endpoint
    return None


def bind_hosts(links: Sequence[Link]) -> list[str]:
    """Where a server that follows the links listens: each address it is announced at on one
    of them (a socket bound to every interface would be, by ``announced_host``), each once;
    loopback alone when there is no link."""
    hosts: list[str] = []
    for link in links:
        host = announced_host("*", link, links)
        if host is not None and host not in hosts:
            hosts.append(host)
    return hosts or ["127.0.0.1"]
