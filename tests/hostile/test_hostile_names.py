"""A Zyre peer (zyre.js, not our code) whose YAMZ header announces, next to a good port, ports
whose addresses no connection can be made of: ``..`` (it once stopped capture for every
partition and made the spool create ``<spool>/..``'s children), an ipc path whose key quotes to
more than 255 bytes (``File name too long`` once stopped capture), a multicast transport, and an
address with control characters; and more ports than the query's ``maxEndpoints``. The good
port's messages all arrive exactly once, the query lives, nothing is written outside the spool
and checkpoint, no more partitions are opened than the bound, and memory stays bounded (the
``contained`` fixture)."""

from __future__ import annotations

import json
import os

import pytest

from spark_zmq.spool.layout import partition_keys
from support.zyrejs import REMOTE, read_from_peer

pytestmark = pytest.mark.spark

#: the good port's messages
COUNT = 200
HOSTILE_ADDRESSES = {
    "dots": "..",
    "long": "ipc:///tmp/" + "x" * 300,
    "multicast": "epgm://eth0;239.192.1.1:5555",
    "forged": "tcp://127.0.0.1:1\nspark_zmq INFO endpoint joined",
}


#: ports announced at addresses where nothing listens, beyond maxEndpoints
EXTRA_PORTS, MAX_ENDPOINTS = 40, 5


def header(node: str) -> str:
    """The seed's tree: the good port ``tps/out`` first, then the hostile ports, then ports
    where nothing listens (a peer that announces more than the query should read)."""
    ports = [{"name": "out", "port": {"address": "@ENDPOINT@", "type": "PUB"}}] + [
        {"name": name, "port": {"address": address, "type": "PUB"}}
        for name, address in HOSTILE_ADDRESSES.items()
    ]
    ports += [
        {"name": f"extra{n}", "port": {"address": f"tcp://{REMOTE[1]}:{46000 + n}", "type": "PUB"}}
        for n in range(EXTRA_PORTS)
    ]
    return json.dumps({"name": node, "children": [{"name": "tps", "children": ports}]})


def test_ports_with_unusable_addresses_next_to_a_good_one(spark, tmp_path, contained):
    beacon, node, port = "5676", "zjs-hostile", "45680"
    rows, out, err = read_from_peer(
        spark,
        tmp_path,
        "hostile_names",
        ("announce", node, REMOTE[0], beacon, port, str(COUNT), header(node)),
        COUNT,
        beaconPort=beacon,
        address=f"yamz://{node}/tps/*",
        maxEndpoints=str(MAX_ENDPOINTS),
    )
    spool = tmp_path / "spool-hostile_names"
    partitions = partition_keys(str(spool))
    assert f"sent {COUNT}" in out, err
    good = f"tcp://{REMOTE[1]}:{port}"
    assert [(r.partition, bytes(r.payload).decode()) for r in rows] == [
        (good, f"{node}/{i}") for i in range(COUNT)
    ]
    assert all(r.error is None for r in rows)
    # the good port, then the first extra ports up to the bound; none of the hostile ones
    assert len(partitions) == MAX_ENDPOINTS, partitions
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-hostile_names", "spool-hostile_names"]
