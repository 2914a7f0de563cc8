"""`format("yamz")` with Spark: abstract addresses resolved through Zyre to the ports of peers
written here with pyre (the seed's tree and the public code's flat header), peers joining and
leaving mid-stream, the yamz writer found by a reader's abstract address, and two hosts (network
namespaces joined by a veth pair)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zmq
from pyre import Pyre

from support.common import wait_until
from support.queries import end_offset, memory_query, payloads

pytestmark = pytest.mark.spark
HERE = Path(__file__).resolve().parent


class TestNode:
    """A yamz peer written from the seed and the fact sheet: a pyre node with a ``YAMZ`` header
    describing sockets bound here."""

    __test__ = False

    def __init__(self, name: str, header: dict, beacon_port: int) -> None:
        self.node = Pyre(name, ctx=zmq.Context.instance())
        self.node.set_header("YAMZ", json.dumps(header))
        self.node.set_port(str(beacon_port).encode())
        self.node.start()

    def stop(self) -> None:
        self.node.stop()


def bound(socket_type: int) -> tuple[zmq.Socket, str]:
    sock = zmq.Context.instance().socket(socket_type)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind("tcp://127.0.0.1:*")
    return sock, sock.getsockopt_string(zmq.LAST_ENDPOINT)


def send_until_read(spark, name: str, sock: zmq.Socket, marker: str) -> None:
    """Send ``marker`` until the query has read it (a SUB's subscription takes a moment)."""

    def read():
        sock.send(marker.encode())
        return marker in payloads(spark, name)

    wait_until(read, timeout=90, interval=0.5, what=f"{marker} to be read")


def test_abstract_addresses_read_matching_ports_as_peers_come_and_go(spark, tmp_path):
    beacon = 5671
    sockets = {
        name: bound(kind)
        for name, kind in (
            ("alpha_tps", zmq.PUB),
            ("alpha_log", zmq.PUB),
            ("beta_tps", zmq.PUSH),
            ("delta_tps", zmq.PUB),
            ("gamma_tps", zmq.PUB),
            ("epsilon_tps", zmq.PUB),
        )
    }
    address = {name: endpoint for name, (_, endpoint) in sockets.items()}
    sock = {name: s for name, (s, _) in sockets.items()}

    def port(name: str, kind: str = "PUB") -> dict:
        return {"address": address[name], "type": kind}

    alpha = TestNode(
        "alpha",
        {
            "name": "alpha",
            "params": {"part": "2"},
            "children": [
                {"name": "tps", "params": {"det": "tpc", "apa": "41"}, "port": port("alpha_tps")},
                {"name": "log", "params": {"det": "tpc", "apa": "41"}, "port": port("alpha_log")},
            ],
        },
        beacon,
    )
    beta = TestNode(
        "beta",
        {
            "name": "beta",
            "params": {"part": "2", "det": "tpc"},
            "children": [
                {"name": "tps", "params": {"apa": "42"}, "port": port("beta_tps", "PUSH")}
            ],
        },
        beacon,
    )
    epsilon = TestNode(
        "epsilon",
        {
            "name": "epsilon",
            "params": {"part": "2", "det": "tpc"},
            "children": [{"name": "tps", "params": {"apa": "43"}, "port": port("epsilon_tps")}],
        },
        beacon,
    )
    # the flat header of the public yamz code: path client/port, idparms lists
    delta = TestNode(
        "delta",
        {
            "clients": [
                {
                    "clientid": "fanout",
                    "idparms": [{"key": "det", "val": "tpc"}],
                    "ports": [
                        {
                            "addresses": [address["delta_tps"]],
                            "portid": "tps",
                            "idparms": [{"key": "apa", "val": "42"}],
                            "ztype": "PUB",
                        }
                    ],
                }
            ],
            "idparms": [{"key": "part", "val": "2"}],
        },
        beacon,
    )
    nodes = [alpha, beta, epsilon, delta]
    query = memory_query(
        spark,
        tmp_path,
        "yamz",
        "yamz_match",
        beaconPort=str(beacon),
        address="yamz://*/tps?part=2&det=tpc&apa=4[12], yamz://delta/fanout/*",
    )
    try:
        send_until_read(spark, "yamz_match", sock["alpha_tps"], "alpha/warm")
        send_until_read(spark, "yamz_match", sock["delta_tps"], "delta/warm")
        sock["beta_tps"].setsockopt(zmq.SNDTIMEO, 60_000)  # PUSH waits for its PULL
        for n in range(3):
            for name in ("alpha_tps", "alpha_log", "beta_tps", "delta_tps", "epsilon_tps"):
                sock[name].send(f"{name.split('_')[0]}/{n}".encode())
        # gamma joins mid-stream; its root says det=pds, its tps vertex overrides it
        gamma = TestNode(
            "gamma",
            {
                "name": "gamma",
                "params": {"part": "2", "det": "pds"},
                "children": [
                    {
                        "name": "tps",
                        "port": port("gamma_tps"),
                        "params": {"det": "tpc", "apa": "41"},
                    }
                ],
            },
            beacon,
        )
        nodes.append(gamma)
        send_until_read(spark, "yamz_match", sock["gamma_tps"], "gamma/warm")
        sock["gamma_tps"].send(b"gamma/0")
        # alpha leaves: its partition is retired once read to its end
        alpha.stop()
        nodes.remove(alpha)
        sock["alpha_tps"].close(0)
        wait_until(
            lambda: (
                address["alpha_tps"] not in end_offset(query)
                and address["gamma_tps"] in end_offset(query)
            ),
            timeout=60,
            what="alpha's partition to be retired",
        )
        sock["gamma_tps"].send(b"gamma/1")
        wait_until(lambda: "gamma/1" in payloads(spark, "yamz_match"), timeout=60, what="gamma/1")
        query.processAllAvailable()
        rows = spark.sql("select * from yamz_match order by partition, offset").collect()
    finally:
        query.stop()
        for node in nodes:
            node.stop()
        for s in sock.values():
            s.close(0)
    data = sorted(bytes(r.payload).decode() for r in rows if b"warm" not in bytes(r.payload))
    assert data == sorted(
        [f"{who}/{n}" for who in ("alpha", "beta", "delta") for n in range(3)]
        + ["gamma/0", "gamma/1"]
    )
    by_node = {r.node: r for r in rows}
    assert set(by_node) == {"alpha", "beta", "delta", "gamma"}
    assert (by_node["beta"].path, by_node["beta"].params) == (
        "tps",
        {"part": "2", "det": "tpc", "apa": "42"},
    )
    assert by_node["gamma"].params == {"part": "2", "det": "tpc", "apa": "41"}
    assert (by_node["delta"].path, by_node["delta"].params) == (
        "fanout/tps",
        {"part": "2", "det": "tpc", "apa": "42"},
    )
    for node, row in by_node.items():
        assert row.partition == row.address == row.endpoint == address[f"{node}_tps"]
        assert [bytes(f) for f in row.frames] == [bytes(row.payload)]
        assert row.error is None


def test_spark_writer_is_found_by_an_abstract_address(spark, tmp_path, send_core):
    beacon = 5672
    node = f"sparkw_{send_core}"
    reader = memory_query(
        spark,
        tmp_path,
        "yamz",
        "yamz_written",
        beaconPort=str(beacon),
        address=f"yamz://{node}/spark/out?apa=4[0-9]&det=tpc",
    )
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "1.json").write_text(
        "\n".join(
            json.dumps(row)
            for row in [
                {"topic": "t", "payload": "one"},
                {"payload": "two"},
                {"frames": ["a", "b", "three"]},
                {"topic": "t"},  # no payload: skipped (PERMISSIVE)
            ]
        )
        + "\n"
    )
    writer = (
        spark.readStream.schema("topic STRING, payload STRING, frames ARRAY<STRING>")
        .json(str(inbox))
        .coalesce(1)
        .writeStream.format("yamz")
        .option("sendCore", send_core)
        .option("beaconPort", str(beacon))
        .option("address", "tcp://127.0.0.1:*?det=tpc&apa=42")
        .option("path", "spark/out")
        .option("node", node)
        .option("waitForSubscribers", "90")
        .option("checkpointLocation", str(tmp_path / "cp-writer"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        writer.awaitTermination(180)
        assert writer.exception() is None
        wait_until(
            lambda: len(payloads(spark, "yamz_written")) >= 3, timeout=60, what="the written rows"
        )
        reader.processAllAvailable()
        rows = spark.sql("select * from yamz_written order by offset").collect()
    finally:
        writer.stop()
        reader.stop()
    assert [[bytes(f) for f in r.frames] for r in rows] == [
        [b"t", b"one"],
        [b"two"],
        [b"a", b"b", b"three"],
    ]
    assert [bytes(r.payload) for r in rows] == [b"one", b"two", b"three"]
    assert {(r.node, r.path) for r in rows} == {(node, "spark/out")}
    assert rows[0].params == {"det": "tpc", "apa": "42"}
    assert rows[0].address.startswith("tcp://127.0.0.1:")


def test_a_node_on_another_host_is_found_across_a_veth_pair(spark, tmp_path):
    """Two network namespaces joined by a veth pair, one node on each side: pyre beacons on
    the first non-loopback interface, here the veth."""
    beacon = 5673
    remote = subprocess.Popen(
        ["unshare", "--net", sys.executable, str(HERE / "yamz_remote_node.py"), str(beacon)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    query = None
    try:

        def ip(*args: str, netns_of: int | None = None) -> None:
            prefix = ["nsenter", "-t", str(netns_of), "-n"] if netns_of else []
            subprocess.run(prefix + ["ip", *args], check=True, capture_output=True)

        wait_until(
            lambda: os.readlink(f"/proc/{remote.pid}/ns/net") != os.readlink("/proc/self/ns/net"),
            timeout=30,
            what="the remote namespace",
        )
        ip("link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", str(remote.pid))
        ip("addr", "add", "10.77.0.1/24", "brd", "+", "dev", "v0")
        ip("link", "set", "v0", "up")
        for args in (
            ("link", "set", "lo", "up"),
            ("addr", "add", "10.77.0.2/24", "brd", "+", "dev", "v1"),
            ("link", "set", "v1", "up"),
        ):
            ip(*args, netns_of=remote.pid)
        query = memory_query(
            spark,
            tmp_path,
            "yamz",
            "yamz_remote",
            beaconPort=str(beacon),
            address="yamz://remote/tps",
        )
        wait_until(
            lambda: len(payloads(spark, "yamz_remote")) >= 3,
            timeout=120,
            what="messages from the node in the other namespace",
        )
        rows = spark.sql("select * from yamz_remote").collect()
    finally:
        if query is not None:
            query.stop()
        remote.terminate()
        _out, err = remote.communicate(timeout=30)
        subprocess.run(["ip", "link", "del", "v0"], capture_output=True)
    # the node announced tcp://0.0.0.0:port; the reader connected to its Zyre host instead
    assert {r.node for r in rows} == {"remote"}
    assert all(r.address.startswith("tcp://10.77.0.2:") for r in rows), (rows[0], err)
    assert all(bytes(r.payload).startswith(b"remote/") for r in rows)
