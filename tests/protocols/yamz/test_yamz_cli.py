"""``spark-zmq yamz browse|subscribe``, run in this process (``spark_zmq.cli.main``), against
yamz peers written here from the fact sheet (raw pyre nodes with a ``YAMZ`` header, raw pyzmq
sockets): the browse lists peers and their ports (and a header it cannot read, by name),
subscribe resolves an abstract address and prints the matching port's messages."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import zmq
from pyre import Pyre

from spark_zmq.cli import main

#: beacon ports of these tests (nodes of other tests beacon on other ports)
BROWSE_BEACON, SUBSCRIBE_BEACON = 5691, 5692


def peer(name: str, header: str, beacon_port: int) -> Pyre:
    node = Pyre(name, ctx=zmq.Context.instance())
    node.set_header("YAMZ", header)
    node.set_port(str(beacon_port).encode())
    node.start()
    return node


def bound_pub() -> tuple[zmq.Socket, str]:
    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind("tcp://127.0.0.1:*")
    return sock, sock.getsockopt_string(zmq.LAST_ENDPOINT)


def tree(node: str, address: str) -> str:
    """The seed's tree: a node with one PUB port at ``node/out``, parameter det=tpc."""
    port = {"name": "out", "params": {"det": "tpc"}, "port": {"address": address, "type": "PUB"}}
    return json.dumps({"name": node, "children": [port]})


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def cli(capsys, *args: str) -> Done:
    """``spark-zmq yamz ARGS``: its exit code and what it printed."""
    capsys.readouterr()
    code = main(["yamz", *args])
    out, err = capsys.readouterr()
    return Done(code, out, err)


def test_browse_lists_peers_with_their_ports_and_names_an_unreadable_header(capsys):
    sock, address = bound_pub()
    good = peer("good", tree("good", address), BROWSE_BEACON)
    broken = peer("broken", "{not json", BROWSE_BEACON)
    try:
        done = cli(
            capsys, "browse", "--beacon-port", str(BROWSE_BEACON), "--timeout", "4", "--json"
        )
    finally:
        good.stop()
        broken.stop()
        sock.close()
    assert done.returncode == 0, done.stderr
    peers = {p["name"]: p for p in map(json.loads, done.stdout.splitlines())}
    assert set(peers) == {"good", "broken"}
    assert peers["good"]["ports"] == [
        {"address": "yamz://good/out", "type": "PUB", "bound": [address], "params": {"det": "tpc"}}
    ]
    assert peers["good"]["address"].startswith("tcp://")
    assert "'broken'" in peers["broken"]["error"] and "not JSON" in peers["broken"]["error"]


def test_subscribe_resolves_an_abstract_address_and_prints_its_messages(capsys):
    sock, address = bound_pub()
    other, other_address = bound_pub()  # a port the pattern does not match: never read
    node = peer("source", tree("source", address), SUBSCRIBE_BEACON)
    bystander = peer(
        "bystander",
        json.dumps(
            {
                "name": "bystander",
                "children": [
                    {
                        "name": "out",
                        "params": {"det": "pds"},
                        "port": {"address": other_address, "type": "PUB"},
                    }
                ],
            }
        ),
        SUBSCRIBE_BEACON,
    )
    stop = threading.Event()

    def publish() -> None:  # until the CLI has read its messages (a subscription takes a moment)
        number = 0
        while not stop.wait(0.05):
            sock.send_multipart([b"tpc", f"m{number}".encode(), b"\xff"])
            other.send_multipart([b"pds", b"not this one"])
            number += 1

    sender = threading.Thread(target=publish, daemon=True)
    sender.start()
    try:
        done = cli(
            capsys,
            "subscribe",
            "yamz://*/out?det=tpc",
            "--beacon-port",
            str(SUBSCRIBE_BEACON),
            "--count",
            "3",
            "--timeout",
            "45",
        )
    finally:
        stop.set()
        sender.join()
        node.stop()
        bystander.stop()
        sock.close()
        other.close()
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 3
    for line in lines:
        assert line["address"] == address
        assert line["encoding"] == "base64"  # the last frame is not UTF-8
        assert line["frames"][0] == "dHBj"  # b"tpc"
    assert f"reading {address}" in done.stderr
    assert other_address not in done.stderr


def test_subscribe_with_no_peer_says_how_many_messages_came(capsys):
    done = cli(
        capsys,
        "subscribe",
        "yamz://nobody/out",
        "--beacon-port",
        "5694",
        "--count",
        "1",
        "--timeout",
        "2",
    )
    assert done.returncode == 1
    assert "received 0 of 1 messages within 2.0 s" in done.stderr
    bad = cli(capsys, "subscribe", "tcp://*:*", "--count", "1", "--timeout", "1")
    assert bad.returncode == 1 and "ephemeral" in bad.stderr
