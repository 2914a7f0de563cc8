"""`format("yamz")` against zyre.js, an independent Zyre implementation (npm; installed by
scripts/peers-node.sh, which scripts/setup.sh runs): a zyre.js node describing its port in a
YAMZ header (the seed's tree and the public code's flat layout) is read through an abstract
address, so is a node that announces a connect-only port beside its PUB port as the yamz C++
library does, and a zyre.js node finds the yamz writer's port in its header and reads it,
through either layout.

The zyre.js node runs in a network namespace of its own (``support.zyrejs``)."""

from __future__ import annotations

import base64
import json

import pytest

from support.zyrejs import REMOTE, read_from_peer, start_peer, stop_peer

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(("layout", "port"), [("tree", "45678"), ("flat", "45679")])
def test_a_zyrejs_node_is_read_through_an_abstract_address(spark, tmp_path, layout, port):
    # a port per case: the peer sends once, to its first subscriber, and a stopped query's
    # process may still be closing while the next case's peer starts at the same address
    beacon, node, count = "5674", f"zjs-{layout}", 50
    rows, out, err = read_from_peer(
        spark,
        tmp_path,
        f"yamz_zyrejs_{layout}",
        ("publish", node, REMOTE[0], beacon, layout, port, str(count)),
        count,
        beaconPort=beacon,
        address=f"yamz://{node}/tps/out?det=tpc&apa=4[0-9]",
    )
    assert f"sent {count}" in out, err
    assert [bytes(r.payload).decode() for r in rows] == [f"{node}/{i}" for i in range(count)]
    assert {(r.node, r.path, r.address) for r in rows} == {
        (node, "tps/out", f"tcp://{REMOTE[1]}:{port}")
    }
    assert rows[0].params["det"] == "tpc" and rows[0].params["apa"] == "42"


def test_a_zyrejs_node_reads_the_yamz_writers_port(spark, tmp_path, send_core):
    """The zyre.js reader finds the port reading one layout of the writer's header only: the
    flat one as the yamz C++ library does (it ignores the seed's tree), or the tree (each send
    loop takes one, so both layouts are covered without a third query), and connects to the
    address there as it is, as that library does: the writer, bound to ``tcp://*:*``, must
    announce the address it is reached at from the other namespace (it announced
    ``tcp://0.0.0.0:PORT``, where zyre.js reached its own namespace)."""
    beacon, count, node = "5675", 20, f"sparkzw_{send_core}"
    layout = {"native": "flat", "python": "tree"}[send_core]
    peer = start_peer(
        "subscribe", "zjs-reader", REMOTE[0], beacon, node, "spark/out", str(count), layout
    )
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


#: the YAMZ header of a yamz C++ application that publishes on ``daq/tps`` and subscribes on
#: ``daq/ctl`` (shared/protocols/yamz.md, "Observed from the yamz C++ library itself"): the
#: connect-only port is announced with no addresses, next to the bound one
CONNECT_ONLY_HEADER = (
    '{"clients":[{"clientid":"daq","idparms":[{"key":"apa","val":"42"}],"ports":['
    '{"addresses":[],"idparms":[],"portid":"ctl","ztype":"SUB"},'
    '{"addresses":["@ENDPOINT@"],"idparms":[],"portid":"tps","ztype":"PUB"}]}],'
    '"idparms":[{"key":"det","val":"tpc"}]}'
)


def test_a_node_with_a_connect_only_port_is_read(spark, tmp_path):
    """Such a node was refused whole ('port ctl has no addresses'): 0 of 100 rows."""
    beacon, node, port, count = "5677", "zjs-cxx", "45681", 100
    rows, out, err = read_from_peer(
        spark,
        tmp_path,
        "yamz_connect_only",
        ("announce", node, REMOTE[0], beacon, port, str(count), CONNECT_ONLY_HEADER),
        count,
        beaconPort=beacon,
        address="yamz://*/daq/tps?det=tpc&apa=4[12]",
    )
    assert f"sent {count}" in out, err
    assert [bytes(r.payload).decode() for r in rows] == [f"{node}/{i}" for i in range(count)]
    assert {(r.path, r.address) for r in rows} == {("daq/tps", f"tcp://{REMOTE[1]}:{port}")}
