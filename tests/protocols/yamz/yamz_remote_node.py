"""A yamz node for the two-host test, run in a network namespace of its own: once the test has
given it a veth address, it binds a PUB on every interface, announces it as ``tps`` of node
``remote`` with the address zmq reports (``tcp://0.0.0.0:port``) and publishes until stopped."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import zmq
from pyre import Pyre


def has_veth_address() -> bool:
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", "v1"], capture_output=True, text=True
    ).stdout
    return (
        " inet " in out
        and " UP"
        in subprocess.run(
            ["ip", "-o", "link", "show", "dev", "v1"], capture_output=True, text=True
        ).stdout
    )


def main(beacon_port: int) -> None:
    deadline = time.monotonic() + 60
    while not has_veth_address():
        if time.monotonic() > deadline:
            sys.exit("no veth address within 60 s")
        time.sleep(0.1)
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind("tcp://*:*")
    address = pub.getsockopt_string(zmq.LAST_ENDPOINT)
    node = Pyre("remote", ctx=zmq.Context.instance())
    node.set_header(
        "YAMZ",
        json.dumps(
            {
                "name": "remote",
                "children": [{"name": "tps", "port": {"address": address, "type": "PUB"}}],
            }
        ),
    )
    node.set_port(str(beacon_port).encode())
    node.start()
    print(f"remote: {address} on {socket.gethostname()}", flush=True)
    running = [True]
    signal.signal(signal.SIGTERM, lambda *_: running.clear())
    n = 0
    while running:
        pub.send(b"remote/%d" % n)
        n += 1
        time.sleep(0.2)
    node.stop()
    pub.close(0)


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    main(int(sys.argv[1]))
