"""yamz discovery without Spark: the Zyre wrapper (peers entering and leaving, a dead beacon as
an error), and abstract addresses resolved to endpoints as peers announce, change and leave."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
import zmq
from pyre import Pyre

from spark_zmq.protocols.base import Endpoint
from spark_zmq.protocols.yamz import ZyreNode, for_connect
from spark_zmq.protocols.yamz.discovery import ZyreDiscovery, reachable
from spark_zmq.testing.logs import logged_warnings
from support.common import wait_until


class Listener:
    def __init__(self) -> None:
        self.joined: dict[str, Endpoint] = {}
        self.left: list[str] = []

    def endpoint_joined(self, endpoint: Endpoint) -> None:
        self.joined[endpoint.key] = endpoint

    def endpoint_left(self, key: str) -> None:
        self.left.append(key)


def pyre_node(name: str, header: str | None, beacon_port: int) -> Pyre:
    node = Pyre(name, ctx=zmq.Context.instance())
    if header is not None:
        node.set_header("YAMZ", header)
    node.set_port(str(beacon_port).encode())
    node.start()
    return node


def test_zyre_node_reports_peers_entering_and_leaving():
    entered, exited = [], []
    ours = ZyreNode(
        "ours",
        {"YAMZ": '{"name": "ours"}'},
        5681,
        entered.append,
        lambda uuid, name: exited.append(name),
        pytest.fail,
    ).start()
    peer = pyre_node("peer", '{"name": "peer"}', 5681)
    try:
        wait_until(lambda: entered, timeout=30, what="the peer's ENTER")
        assert (entered[0].name, entered[0].headers["YAMZ"]) == ("peer", '{"name": "peer"}')
        assert entered[0].address.startswith("tcp://127.0.0.1:")
        peer.stop()
        wait_until(lambda: exited == ["peer"], timeout=30, what="the peer's EXIT")
    finally:
        ours.close()
    with pytest.raises(ValueError, match="must be ASCII"):
        ZyreNode("x", {"YAMZ": "caf\u00e9"}, 5681, print, print, print)


def test_a_beacon_without_a_network_is_an_error_naming_the_port():
    """In a namespace whose loopback is down, pyre's beacon cannot join its multicast group:
    starting fails with an error instead of a node that never finds anyone."""
    script = textwrap.dedent("""
        import os, time
        from spark_zmq.protocols.yamz import ZyreError, ZyreNode
        try:
            ZyreNode("lonely", {"YAMZ": '{"name": "lonely"}'}, 5682, print, print,
                     lambda error: print("ZyreError:", error, flush=True)).start()
            time.sleep(5)      # a beacon that dies late is reported to on_failure
        except ZyreError as exc:
            print("ZyreError:", exc, flush=True)
        os._exit(0)   # pyre's actor threads are not daemons; one whose beacon died can linger
    """)
    result = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert re.search(
        r"ZyreError: Zyre node 'lonely': (no beacon on|its beacon on) UDP port 5682", result.stdout
    ), (result.stdout, result.stderr[-2000:])


def test_discovery_resolves_ports_as_peers_announce_and_leave():
    beacon = 5683
    listener = Listener()
    discovery = ZyreDiscovery(
        "reader",
        beacon,
        (for_connect("yamz://*/tps?apa=4[12]"), for_connect("tcp://127.0.0.1:9999")),
        frozenset({"alpha", "beta"}),
        lambda address, port, kind: Endpoint(
            address, address, {"node": port.node if port else ""}, socket_type=kind
        ),
    )
    tree = {
        "name": "x",
        "params": {"apa": "41"},
        "children": [
            {"name": "tps", "port": {"address": "tcp://0.0.0.0:7001", "type": "PUSH"}},
            {"name": "req", "port": {"address": "tcp://127.0.0.1:7002", "type": "REP"}},
        ],
    }
    peers = []
    with logged_warnings() as warnings:
        discovery.start(listener)
        try:
            assert listener.joined["tcp://127.0.0.1:9999"].socket_type == zmq.SUB
            peers.append(pyre_node("alpha", json.dumps(tree), beacon))
            peers.append(pyre_node("gamma", json.dumps(tree), beacon))  # not expected: no match
            peers.append(pyre_node("beta", "not json", beacon))  # logged, ignored
            peers.append(pyre_node("delta", None, beacon))  # no header: ignored
            wait_until(
                lambda: "tcp://127.0.0.1:7001" in listener.joined, timeout=30, what="alpha's port"
            )
            endpoint = listener.joined["tcp://127.0.0.1:7001"]  # 0.0.0.0: alpha's Zyre host
            assert (endpoint.socket_type, endpoint.metadata["node"]) == (zmq.PULL, "alpha")
            peers[0].stop()
            wait_until(
                lambda: listener.left == ["tcp://127.0.0.1:7001"],
                timeout=30,
                what="alpha's port to leave",
            )
            discovery.check()  # the beacon is alive
            wait_until(
                lambda: any("beta" in line for line in warnings),
                timeout=30,
                what="the warning about beta's header",
            )
        finally:
            discovery.close()
            for peer in peers[1:]:
                peer.stop()
    assert set(listener.joined) == {"tcp://127.0.0.1:9999", "tcp://127.0.0.1:7001"}
    about_beta = [line for line in warnings if "beta" in line]
    assert len(about_beta) == 1 and "its ports are not read" in about_beta[0], warnings


def test_wildcard_hosts_are_reached_at_the_peers_zyre_host():
    assert reachable("tcp://0.0.0.0:5000", "tcp://10.1.2.3:49152") == "tcp://10.1.2.3:5000"
    assert reachable("tcp://*:5000", "tcp://10.1.2.3:49152") == "tcp://10.1.2.3:5000"
    assert reachable("tcp://10.9.9.9:5000", "tcp://10.1.2.3:49152") == "tcp://10.9.9.9:5000"
    assert reachable("ipc:///tmp/x", "tcp://10.1.2.3:49152") == "ipc:///tmp/x"


def test_option_errors_name_the_option_and_what_is_wrong_with_the_address():
    from spark_zmq.options import OptionError, parse_options
    from spark_zmq.protocols.yamz import Yamz
    from spark_zmq.stream_options import READER_OPTIONS, WRITER_OPTIONS

    reader, writer = READER_OPTIONS + Yamz.reader_options, WRITER_OPTIONS + Yamz.writer_options
    for specs, raw, fault in (
        (reader, {"address": "tcp://*:*"}, "'address' .* is ephemeral .*: it can only be bound"),
        (writer, {"address": "yamz://*/x"}, "'address' .* is abstract .* cannot be bound"),
        (reader, {"address": "yamz://*/x?apa=4[12"}, "not a valid regular expression"),
        (reader, {"address": "udp://h:1"}, "unsupported scheme 'udp'"),
        (writer, {"path": "spark/*"}, "'path' must be a path"),
    ):
        with pytest.raises(OptionError, match=fault):
            parse_options("yamz", specs, raw)
    addresses = parse_options(
        "yamz", reader, {"address": "yamz://*/tps?apa=4{1,2}, yamz://b/x tcp://127.0.0.1:5"}
    )["address"]
    assert [a.text for a in addresses] == [
        "yamz://*/tps?apa=4{1,2}",
        "yamz://b/x",
        "tcp://127.0.0.1:5",
    ]
    with pytest.raises(OptionError, match="'address' is required"):
        Yamz().check_options(parse_options("yamz", reader, {}))
