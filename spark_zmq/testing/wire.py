"""Wire-level publishers for tests and benchmarks: bare zmq sockets, no protocol library."""

from __future__ import annotations

import zmq


def bound_xpubs(context: zmq.Context, count: int) -> tuple[list[zmq.Socket], list[str]]:
    """``count`` wire-level publishers: XPUB sockets of ``context`` bound to free loopback
    ports (linger 0), and their ``host:port`` keys, in the same order."""
    sockets = []
    for _ in range(count):
        socket = context.socket(zmq.XPUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.bind("tcp://127.0.0.1:*")
        sockets.append(socket)
    keys = [s.getsockopt_string(zmq.LAST_ENDPOINT).removeprefix("tcp://") for s in sockets]
    return sockets, keys
