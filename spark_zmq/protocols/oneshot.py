"""One request and its reply on a fresh REQ socket, bounded in time as a whole.

A REQ socket's send blocks while the socket has no connection to send on. zmq queues on a
connecting socket, so that is rare, with one exception that matters here: a server that
refuses our CURVE handshake (a key it does not allow) ends the connection, and a send after
that blocks until zmq connects again, which that server never lets happen. So the send is
bounded (SNDTIMEO) as well as the wait for the reply, and both share one deadline.
"""

from __future__ import annotations

import time

import zmq

from spark_zmq.security import Curve
from spark_zmq.units import milliseconds


def request_socket(
    context: zmq.Context | None, curve: Curve, max_reply_bytes: int | None
) -> zmq.Socket:
    """A REQ socket that closes at once (LINGER 0) and takes no reply frame over
    ``max_reply_bytes`` (zmq's MAXMSGSIZE: it reads a frame's size before its body and drops
    the connection on a larger one, so such a reply never reaches memory)."""
    sock = curve.as_client((context or zmq.Context.instance()).socket(zmq.REQ))
    sock.setsockopt(zmq.LINGER, 0)
    if max_reply_bytes is not None:
        sock.setsockopt(zmq.MAXMSGSIZE, max_reply_bytes)
    return sock


def exchange(sock: zmq.Socket, frames: list[bytes], timeout: float) -> list[bytes] | None:
    """Send ``frames`` on the connected REQ socket ``sock`` and return the reply's frames, or
    None when the send and the reply together took more than ``timeout`` s."""
    deadline = time.monotonic() + timeout
    sock.setsockopt(zmq.SNDTIMEO, milliseconds(timeout))
    try:
        sock.send_multipart(frames)
    except zmq.Again:
        return None
    if not sock.poll(milliseconds(max(0.0, deadline - time.monotonic()))):
        return None
    return sock.recv_multipart()


def ask_once(
    address: str,
    frames: list[bytes],
    timeout: float,
    *,
    context: zmq.Context | None = None,
    curve: Curve,
    max_reply_bytes: int | None = None,
) -> list[bytes] | None:
    """Connect a new REQ socket to ``address``, ``exchange`` one request, close the socket."""
    sock = request_socket(context, curve, max_reply_bytes)
    try:
        sock.connect(address)
        return exchange(sock, frames, timeout)
    finally:
        sock.close(0)
