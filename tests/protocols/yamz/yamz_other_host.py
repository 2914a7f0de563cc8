"""A yamz peer on another host, for test_yamz_zyre.py, which runs it in a network namespace of
its own (``support.hosts``): a pyre node that waits for node TARGET, prints the ``YAMZ`` header
and Zyre address it entered with as a JSON line, connects a SUB to the address of the port at
PATH in the header's tree exactly as announced (as the yamz C++ library does: nothing is put in
place of a wildcard host), and prints COUNT messages from it as JSON lines of text frames.

    python yamz_other_host.py BEACON_PORT TARGET PATH COUNT
"""

from __future__ import annotations

import json
import sys
import time

import zmq
from pyre import Pyre


def port_address(header: dict, path: list[str]) -> str:
    vertex = header
    for name in path:
        vertex = next(child for child in vertex.get("children", []) if child["name"] == name)
    return vertex["port"]["address"]


def main(beacon_port: str, target: str, path: str, count: str) -> None:
    node = Pyre("other-host", ctx=zmq.Context.instance())
    node.set_header("YAMZ", json.dumps({"name": "other-host"}))
    node.set_port(beacon_port.encode())
    node.start()
    poller = zmq.Poller()
    poller.register(node.socket(), zmq.POLLIN)
    deadline = time.monotonic() + 60
    header = None
    while header is None:
        if time.monotonic() > deadline:
            sys.exit(f"node {target} did not enter within 60 s")
        if not poller.poll(500):
            continue
        kind, _uuid, name, *rest = node.recv()
        if kind == b"ENTER" and name.decode() == target:
            header = json.loads(json.loads(rest[0].decode())["YAMZ"])
            seen_at = rest[1].decode()
    print(json.dumps({"header": header, "zyre_address": seen_at}), flush=True)
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(port_address(header, path.split("/")))
    for _ in range(int(count)):
        if not sub.poll(60_000):
            sys.exit("no message within 60 s")
        print(json.dumps([f.decode() for f in sub.recv_multipart()]), flush=True)
    node.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
