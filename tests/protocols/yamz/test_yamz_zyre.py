"""yamz discovery without Spark: the Zyre wrapper (peers entering and leaving, a dead beacon as
an error), and abstract addresses resolved to endpoints as peers announce, change and leave."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import textwrap

import pytest
import zmq
from pyre import Pyre

from spark_zmq.protocols.contract import Endpoint
from spark_zmq.protocols.yamz import ZyreNode, for_bind, for_connect
from spark_zmq.protocols.yamz.discovery import ZyreDiscovery, reachable
from spark_zmq.protocols.yamz.publisher import YamzPublisher
from spark_zmq.protocols.yamz.wire import ports_of
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


def test_a_node_left_running_lets_its_process_exit_and_run_its_atexit_cleanup(tmp_path):
    """Spark's driver-side source process ends its main thread without calling stop when the
    JVM goes away; its cleanup (closing capture, letting go of the spool) is registered with
    atexit, which runs only once every non-daemon thread has ended. pyre's are not daemons:
    the node must stop when the main thread ends, or the process never exits."""
    cleaned = tmp_path / "cleaned"
    script = textwrap.dedent(f"""
        import atexit
        from spark_zmq.protocols.yamz import ZyreNode
        node = ZyreNode("left", {{"YAMZ": '{{"name": "left"}}'}}, 5693, print, print, print)
        node.start()
        atexit.register(lambda: open({str(cleaned)!r}, "w").write("closed"))
        print("started", flush=True)
    """)  # the main thread ends here, the node not closed
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
    )
    assert result.stdout.startswith("started"), result.stderr[-2000:]
    assert cleaned.read_text() == "closed"


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


def test_a_callback_that_raises_on_a_peer_does_not_stop_the_zyre_node():
    """An exception in the node's callback (here: a header it cannot take) once ended the
    node's thread, and with it discovery, as a failure of the node. Now it is one warning
    naming the peer, and peers that enter later are still reported."""
    entered, failures = [], []

    def on_enter(peer):
        json.loads(peer.headers["YAMZ"])["name"]  # KeyError for a header without a name
        entered.append(peer.name)

    ours = ZyreNode("ours", {"YAMZ": '{"name": "ours"}'}, 5690, on_enter, print, failures.append)
    peers = []
    with logged_warnings() as warnings:
        ours.start()
        try:
            peers.append(pyre_node("nameless", '{"no name": 1}', 5690))
            wait_until(lambda: warnings, timeout=30, what="the warning about the nameless peer")
            peers.append(pyre_node("later", '{"name": "later"}', 5690))
            wait_until(lambda: entered == ["later"], timeout=30, what="the later peer's ENTER")
        finally:
            ours.close()
            for peer in peers:
                peer.stop()
    assert failures == []
    assert len(warnings) == 1 and "its ENTER event failed (KeyError" in warnings[0], warnings


def test_malformed_zre_messages_are_dropped_and_the_node_still_finds_peers():
    """pyre parses beacons and ZRE messages in its node thread, which one malformed message
    from anyone ended (the node then deaf for good, silently): a UDP beacon that starts with
    ZRE but is cut short, a HELLO whose endpoint is not UTF-8 (both written here from the ZRE
    layout pyre reads). They are dropped now, with a warning, and a peer that comes later is
    still reported."""
    import socket
    import struct
    import uuid

    entered = []
    ours = ZyreNode("ours", {"YAMZ": '{"name": "ours"}'}, 5692, entered.append, print, print)
    intruder = zmq.Context.instance().socket(zmq.DEALER)
    intruder.setsockopt(zmq.LINGER, 0)
    intruder.setsockopt(zmq.IDENTITY, b"\x01" + uuid.uuid4().bytes)
    later = None
    with logged_warnings() as warnings:
        ours.start()
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                udp.sendto(b"ZRE\x01", ("127.0.0.1", 5692))  # a beacon is 22 bytes
            intruder.connect(ours.endpoint)
            # signature 0xAAA1, HELLO (1), version 2, sequence 1, endpoint: 3 bytes, not UTF-8
            intruder.send(struct.pack(">HBBHB", 0xAAA1, 1, 2, 1, 3) + b"\xff\xfe\xfd")
            wait_until(lambda: len(warnings) >= 2, timeout=10, what="the two warnings")
            later = pyre_node("later", '{"name": "later"}', 5692)
            wait_until(lambda: entered, timeout=30, what="the later peer's ENTER")
        finally:
            ours.close()
            intruder.close(0)
            if later is not None:
                later.stop()
    assert [peer.name for peer in entered] == ["later"]
    assert any("dropped a UDP beacon it cannot parse (error" in line for line in warnings)
    assert any(
        "dropped a ZRE message it cannot parse (UnicodeDecodeError" in line for line in warnings
    )


def test_ports_at_addresses_zmq_refuses_are_logged_once_per_peer_and_skipped():
    """A header's port addresses become capture's connect addresses, where one zmq refuses
    failed the query: such ports are refused where the header is read, one warning per peer;
    so is any failure handling a peer's ports; a good peer entering later is resolved."""
    beacon = 5691
    listener = Listener()

    def endpoint_of(address, port, kind):
        if port is not None and port.node == "broken":  # any failure of ours with one peer
            raise RuntimeError("cannot describe this port")
        return Endpoint(address, address, {"node": port.node if port else ""}, socket_type=kind)

    addresses = (for_connect("yamz://*/tps"), for_connect("yamz://*/*/tps"))  # tree, flat
    discovery = ZyreDiscovery("reader", beacon, addresses, None, endpoint_of)

    def tree(name: str, address) -> str:
        port = {"name": "tps", "port": {"address": address, "type": "PUB"}}
        return json.dumps({"name": name, "children": [port]})

    flat = {"clients": [{"clientid": "c", "ports": [{"portid": "tps", "ztype": "PUB"}]}]}
    flat["clients"][0]["ports"][0]["addresses"] = "tcp://127.0.0.1:7012"  # a string: letters
    peers = []
    with logged_warnings() as warnings:
        discovery.start(listener)
        try:
            peers.append(pyre_node("evil", tree("evil", "tcp://-evil:7010"), beacon))
            peers.append(pyre_node("flat", json.dumps(flat), beacon))
            peers.append(pyre_node("broken", tree("broken", "tcp://127.0.0.1:7011"), beacon))
            wait_until(lambda: len(warnings) >= 3, timeout=30, what="three warnings")
            peers.append(pyre_node("good", tree("good", "tcp://127.0.0.1:7013"), beacon))
            wait_until(
                lambda: "tcp://127.0.0.1:7013" in listener.joined, timeout=30, what="good's port"
            )
            discovery.check()
        finally:
            discovery.close()
            for peer in peers:
                peer.stop()
    assert set(listener.joined) == {"tcp://127.0.0.1:7013"}
    assert len(warnings) == 3, warnings
    [evil] = [line for line in warnings if "-evil" in line]
    assert "port evil/tps has an address zmq refuses" in evil
    [letters] = [line for line in warnings if "port flat/c/tps" in line]
    assert "'t' is not a tcp://, ipc:// or inproc:// address" in letters
    [broken] = [line for line in warnings if "'broken'" in line]
    assert "(RuntimeError: cannot describe this port); its ports are not read" in broken


def test_wildcard_hosts_are_reached_at_the_peers_zyre_host():
    assert reachable("tcp://0.0.0.0:5000", "tcp://10.1.2.3:49152") == "tcp://10.1.2.3:5000"
    assert reachable("tcp://*:5000", "tcp://10.1.2.3:49152") == "tcp://10.1.2.3:5000"
    assert reachable("tcp://10.9.9.9:5000", "tcp://10.1.2.3:49152") == "tcp://10.9.9.9:5000"
    assert reachable("ipc:///tmp/x", "tcp://10.1.2.3:49152") == "ipc:///tmp/x"


def test_option_errors_name_the_option_and_what_is_wrong_with_the_address():
    from spark_zmq.options import OptionError, parse_options
    from spark_zmq.protocols.yamz import Yamz
    from spark_zmq.protocols.yamz.options import ADDRESS
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
    ).get(ADDRESS)
    assert addresses is not None
    assert [a.text for a in addresses] == [
        "yamz://*/tps?apa=4{1,2}",
        "yamz://b/x",
        "tcp://127.0.0.1:5",
    ]
    with pytest.raises(OptionError, match="'address' is required"):
        Yamz().reader_settings({})


def test_a_writer_bound_to_every_interface_is_announced_and_reached_at_its_zyre_address():
    """``tcp://*:*`` was announced as ``tcp://0.0.0.0:PORT``: a peer on another host that
    connects to what it is told (the yamz C++ library does) reached its own host. Now the port
    is bound at, and announced at, the address its Zyre node is seen at (the veth here, which
    pyre beacons on), in both layouts of the header, and listens nowhere else; a pyre node on
    the other host reads it at the announced address."""
    from support.hosts import OtherHost

    host = OtherHost(("szmqyw0", "10.85.0.1"), ("szmqyw1", "10.85.0.2"))
    publisher = None
    try:
        publisher = YamzPublisher(
            "wild",
            for_bind("tcp://*:*?det=tpc"),
            ("spark", "out"),
            5687,
            send_hwm=0,
            send_timeout=None,
        )
        port = int(publisher.address.rsplit(":", 1)[1])
        assert publisher.address == f"tcp://10.85.0.1:{port}"
        with pytest.raises(ConnectionRefusedError):  # bound where announced, not on loopback
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        other = host.start_python(
            "protocols/yamz/yamz_other_host.py", "5687", "wild", "spark/out", "3"
        )
        wait_until(lambda: publisher.subscribers(b"") >= 1, timeout=60, what="the other host's SUB")
        for i in range(3):
            publisher.send([b"wild/%d" % i])
        out, err = other.communicate(timeout=60)
    finally:
        if publisher is not None:
            publisher.close()
        host.close()
    assert other.returncode == 0, err
    seen, *messages = [json.loads(line) for line in out.splitlines()]
    assert seen["zyre_address"].startswith("tcp://10.85.0.1:")
    assert [p.addresses for p in ports_of("wild", json.dumps(seen["header"]))] == [
        (publisher.address,)
    ]
    tree = {key: value for key, value in seen["header"].items() if key != "clients"}
    assert [p.addresses for p in ports_of("wild", json.dumps(tree))] == [(publisher.address,)]
    assert messages == [[f"wild/{i}"] for i in range(3)]
