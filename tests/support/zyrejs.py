"""zyre.js, an independent Zyre implementation (npm; scripts/peers-node.sh installs it), as a yamz
peer in a network namespace of its own joined to the test's by a veth pair, as on two hosts:
both Zyre implementations beacon to the subnet's broadcast address there. The peer's code is
tests/peers/node/yamz_node.js, written from the fact sheet."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from support.common import ROOT, wait_until
from support.hosts import join_by_veth
from support.queries import memory_query, rows_of

NODE_PEER = ROOT / "tests" / "peers" / "node" / "yamz_node.js"
#: (veth name, address) of the test's side and of the peer's
LOCAL, REMOTE = ("szmqzj0", "10.79.0.1"), ("szmqzj1", "10.79.0.2")


def start_peer(*args: str) -> subprocess.Popen:
    """yamz_node.js with ``args`` in a namespace of its own, joined to ours by a veth pair."""
    node = shutil.which("node")
    if node is None or not (NODE_PEER.parent / "node_modules" / "zyre.js").is_dir():
        pytest.fail("zyre.js is not installed: run scripts/peers-node.sh (scripts/setup.sh does)")
    peer = subprocess.Popen(
        ["unshare", "--net", node, str(NODE_PEER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    join_by_veth(peer.pid, LOCAL, REMOTE)
    return peer


def stop_peer(peer: subprocess.Popen) -> tuple[str, str]:
    """Stop the peer and remove its veth pair: what it printed (stdout, stderr)."""
    if peer.poll() is None:
        peer.terminate()
    out, err = peer.communicate(timeout=30)
    subprocess.run(["ip", "link", "del", LOCAL[0]], capture_output=True)
    return out, err


def read_from_peer(spark, tmp_path, name: str, peer_args: tuple[str, ...], count: int, **options):
    """Start yamz_node.js with ``peer_args`` and read it through a yamz query with ``options``
    into the memory table ``name`` until it holds ``count`` rows; the query must still be alive
    then. Both are stopped: (the rows in offset order, the peer's stdout, its stderr)."""
    peer = start_peer(*peer_args)
    query = None
    try:
        query = memory_query(spark, tmp_path, "yamz", name, **options)
        wait_until(
            lambda: len(rows_of(spark, name)) >= count,
            timeout=120,
            what=f"{count} messages from the zyre.js node",
        )
        query.processAllAvailable()
        assert query.isActive and query.exception() is None
        rows = spark.sql(f"select * from {name} order by offset").collect()
    finally:
        if query is not None:
            query.stop()
        out, err = stop_peer(peer)
    return rows, out, err
