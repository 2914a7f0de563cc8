"""`format("yamz")` against zyre.js, an independent Zyre implementation (npm; installed by
scripts/peers-node.sh, which scripts/setup.sh runs): a zyre.js node describing its port in a
YAMZ header (the seed's tree and the public code's flat layout) is read through an abstract
address, and a zyre.js node finds the yamz writer's port in its header and reads it.

The zyre.js node runs in a network namespace of its own joined to the test's by a veth pair,
as on two hosts: both Zyre implementations beacon to the subnet's broadcast address there.
The peer's code is tests/peers/node/yamz_node.js, written from the fact sheet."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess

import pytest

from support.common import ROOT, wait_until
from support.queries import memory_query, payloads

pytestmark = pytest.mark.spark
NODE_PEER = ROOT / "tests" / "peers" / "node" / "yamz_node.js"
LOCAL, REMOTE = ("szmqzj0", "10.79.0.1"), ("szmqzj1", "10.79.0.2")


def ip(*args: str, netns_of: int | None = None) -> None:
    prefix = ["nsenter", "-t", str(netns_of), "-n"] if netns_of else []
    subprocess.run(prefix + ["ip", *args], check=True, capture_output=True)


def start_peer(*args: str) -> subprocess.Popen:
    """yamz_node.js in a namespace of its own, joined to ours by a veth pair."""
    node = shutil.which("node")
    if node is None or not (NODE_PEER.parent / "node_modules" / "zyre.js").is_dir():
        pytest.fail("zyre.js is not installed: run scripts/peers-node.sh (scripts/setup.sh does)")
    peer = subprocess.Popen(
        ["unshare", "--net", node, str(NODE_PEER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until(
        lambda: os.readlink(f"/proc/{peer.pid}/ns/net") != os.readlink("/proc/self/ns/net"),
        timeout=30,
        what="the peer's namespace",
    )
    ip("link", "add", LOCAL[0], "type", "veth", "peer", "name", REMOTE[0], "netns", str(peer.pid))
    ip("addr", "add", f"{LOCAL[1]}/24", "brd", "+", "dev", LOCAL[0])
    ip("link", "set", LOCAL[0], "up")
    for command in (
        ("link", "set", "lo", "up"),
        ("addr", "add", f"{REMOTE[1]}/24", "brd", "+", "dev", REMOTE[0]),
        ("link", "set", REMOTE[0], "up"),
    ):
        ip(*command, netns_of=peer.pid)
    return peer


def stop_peer(peer: subprocess.Popen) -> tuple[str, str]:
    if peer.poll() is None:
        peer.terminate()
    out, err = peer.communicate(timeout=30)
    subprocess.run(["ip", "link", "del", LOCAL[0]], capture_output=True)
    return out, err


@pytest.mark.parametrize(("layout", "port"), [("tree", "45678"), ("flat", "45679")])
def test_a_zyrejs_node_is_read_through_an_abstract_address(spark, tmp_path, layout, port):
    # a port per case: the peer sends once, to its first subscriber, and a stopped query's
    # process may still be closing while the next case's peer starts at the same address
    beacon, node, count = "5674", f"zjs-{layout}", 50
    peer = start_peer("publish", node, REMOTE[0], beacon, layout, port, str(count))
    name = f"yamz_zyrejs_{layout}"
    query = None
    try:
        query = memory_query(
            spark,
            tmp_path,
            "yamz",
            name,
            beaconPort=beacon,
            address=f"yamz://{node}/tps/out?det=tpc&apa=4[0-9]",
        )
        wait_until(
            lambda: len(payloads(spark, name)) >= count,
            timeout=120,
            what=f"{count} messages from the zyre.js node",
        )
        query.processAllAvailable()
        rows = spark.sql(f"select * from {name} order by offset").collect()
    finally:
        if query is not None:
            query.stop()
        out, err = stop_peer(peer)
    assert f"sent {count}" in out, err
    assert [bytes(r.payload).decode() for r in rows] == [f"{node}/{i}" for i in range(count)]
    assert {(r.node, r.path, r.address) for r in rows} == {
        (node, "tps/out", f"tcp://{REMOTE[1]}:{port}")
    }
    assert rows[0].params["det"] == "tpc" and rows[0].params["apa"] == "42"


def test_a_zyrejs_node_reads_the_yamz_writers_port(spark, tmp_path, send_core):
    beacon, count, node = "5675", 20, f"sparkzw_{send_core}"
    peer = start_peer("subscribe", "zjs-reader", REMOTE[0], beacon, node, "spark/out", str(count))
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "1.json").write_text(
        "".join(json.dumps({"payload": f"w/{i}"}) + "\n" for i in range(count))
    )
    writer = (
        spark.readStream.schema("payload STRING")
        .json(str(inbox))
        .coalesce(1)
        .writeStream.format("yamz")
        .option("sendCore", send_core)
        .option("beaconPort", beacon)
        .option("address", "tcp://*:*?det=tpc")
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
        peer.wait(60)
    finally:
        writer.stop()
        out, err = stop_peer(peer)
    lines = [json.loads(line) for line in out.splitlines()]
    got = [[base64.b64decode(f) for f in line["frames"]] for line in lines]
    assert got == [[b"w/%d" % i] for i in range(count)], err
    assert f"connecting to {node}'s spark/out at tcp://10.79.0.1:" in err
