"""Which address goes on which link (``links``): the rule every ZeroEQ record follows, on
made-up links, and ``discoveryInterfaces`` read into this host's links."""

from __future__ import annotations

import ipaddress

import pytest

from spark_zmq.protocols.zeroeq.links import (
    Link,
    announced_host,
    bind_hosts,
    endpoint_on,
    links_of,
)


def link(name: str, *addresses: str, prefix: int = 24) -> Link:
    networks = tuple(ipaddress.IPv4Network(f"{a}/{prefix}", strict=False) for a in addresses)
    return Link(name, addresses, networks)


LO = link("lo", "127.0.0.1", prefix=8)
ETH0, ETH1 = link("eth0", "10.0.0.5"), link("eth1", "10.1.0.5")
ALL = [LO, ETH0, ETH1]


@pytest.mark.parametrize(
    ("bound", "expected"),
    [
        # every interface: each link its own address; loopback the first other link's
        ("0.0.0.0", {"lo": "10.0.0.5", "eth0": "10.0.0.5", "eth1": "10.1.0.5"}),
        # one address: the link that holds it, and loopback (this host reaches it)
        ("10.1.0.5", {"lo": "10.1.0.5", "eth0": None, "eth1": "10.1.0.5"}),
        # loopback never leaves loopback
        ("127.0.0.1", {"lo": "127.0.0.1", "eth0": None, "eth1": None}),
    ],
)
def test_each_link_gets_an_address_its_hosts_reach(bound, expected):
    assert {each.name: announced_host(bound, each, ALL) for each in ALL} == expected


def test_with_loopback_alone_a_wildcard_is_announced_at_loopback():
    assert announced_host("0.0.0.0", LO, [LO]) == "127.0.0.1"
    assert bind_hosts([LO]) == ["127.0.0.1"]


def test_a_server_that_follows_the_links_binds_each_links_address_once():
    assert bind_hosts(ALL) == ["10.0.0.5", "10.1.0.5"]
    assert bind_hosts([]) == ["127.0.0.1"]


def test_bound_endpoints_as_each_link_announces_them():
    assert endpoint_on("tcp://0.0.0.0:7000", ETH1, ALL) == "tcp://10.1.0.5:7000"
    assert endpoint_on("tcp://127.0.0.1:7000", ETH1, ALL) is None
    assert endpoint_on("tcp://127.0.0.1:7000", LO, ALL) == "tcp://127.0.0.1:7000"
    assert endpoint_on("ipc:///tmp/m", LO, ALL) == "ipc:///tmp/m"
    assert endpoint_on("ipc:///tmp/m", ETH0, ALL) is None
    assert endpoint_on("inproc://m", LO, ALL) is None


def test_a_link_reaches_the_hosts_of_its_networks_only():
    assert ETH0.reaches("10.0.0.77") and not ETH0.reaches("10.1.0.77")
    assert LO.reaches("127.0.0.1") and not LO.reaches("10.0.0.5")
    assert not ETH0.reaches("not an address")


def test_discovery_interfaces_are_this_hosts_links():
    [loopback] = links_of(("lo",))
    assert loopback.address == "127.0.0.1" and loopback.loopback
    assert links_of(("127.0.0.1", "lo")) == [loopback]  # one link, named twice
    assert any(each.name == "lo" for each in links_of(None))
    with pytest.raises(ValueError, match="discoveryInterfaces: no interface 'nosuch0'"):
        links_of(("nosuch0",))
    with pytest.raises(ValueError, match=r"10\.9\.9\.9 is not an address of this host"):
        links_of(("10.9.9.9",))
