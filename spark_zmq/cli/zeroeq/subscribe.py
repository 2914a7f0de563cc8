"""``zeroeq subscribe``: print the events of a session's publishers, one JSON line each, found and
decoded as a reader does."""

from __future__ import annotations

import argparse
import base64
import json
import queue
import time

import pyarrow as pa
import zmq

from spark_zmq.cli.common import CommandError, MemoryState
from spark_zmq.cli.zeroeq.common import note
from spark_zmq.options import OptionError, Options, parse_options
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.protocols.zeroeq import (
    ZeroEQ,
    default_session,
)
from spark_zmq.stream_options import READER_OPTIONS
from spark_zmq.units import milliseconds


class Subscription:
    """The reader's own discovery and decoding, with one SUB socket per endpoint (a SUB socket
    does not tell which of its peers sent a message, and each line names its publisher).

    Discovery reports endpoints on its own threads; sockets stay on the caller's, so endpoints
    pass through a queue. An endpoint that leaves stays connected: closing its socket could drop
    messages not read yet, and zmq reconnects by itself if it comes back."""

    def __init__(self, options: Options) -> None:
        self.protocol = ZeroEQ()
        self.settings = self.protocol.read_settings(options)
        self._joined: queue.Queue[Endpoint] = queue.Queue()
        self.endpoints: dict[str, Endpoint] = {}
        self.sockets: dict[str, zmq.Socket] = {}
        self.poller = zmq.Poller()
        self.discovery = self.protocol.discovery(self.settings, MemoryState())

    # the EndpointListener of discovery (its threads)
    def endpoint_joined(self, endpoint: Endpoint) -> None:
        self._joined.put(endpoint)

    def endpoint_left(self, key: str) -> None:
        pass

    def connect_joined(self) -> None:
        """Connect the endpoints reported since the last call (on the caller's thread)."""
        while not self._joined.empty():
            endpoint = self._joined.get()
            self.endpoints[endpoint.key] = endpoint  # its latest names decode its events
            if endpoint.key in self.sockets:
                continue
            sock: zmq.Socket = zmq.Context.instance().socket(zmq.SUB)
            sock.setsockopt(zmq.RCVHWM, 0)
            sock.setsockopt(zmq.LINGER, 0)
            for prefix in endpoint.subscriptions:
                sock.setsockopt(zmq.SUBSCRIBE, prefix)
            sock.connect(endpoint.address)
            self.sockets[endpoint.key] = sock
            self.poller.register(sock, zmq.POLLIN)
            note("subscribe", f"connected to publisher {endpoint.key}")

    def receive(self, timeout: float) -> list[tuple[str, list[bytes]]]:
        """At most one message of each publisher that has one, waiting up to ``timeout`` s."""
        if not self.sockets:
            time.sleep(timeout)
            return []
        ready = dict(self.poller.poll(milliseconds(timeout)))
        return [(key, sock.recv_multipart()) for key, sock in self.sockets.items() if sock in ready]

    def decode(self, key: str, frames: list[bytes]) -> dict | None:
        """A message as its JSON line's fields, decoded as a query decodes it; None for one
        that is not printed: malformed (noted), or Meerkat and the like, which only the
        subscription's own bookkeeping asked for."""
        endpoint = self.endpoints[key]
        messages = pa.array([frames], pa.list_(pa.binary()))
        decoded = self.protocol.decode(messages, endpoint.source, self.settings)
        if decoded.keep is not None and not decoded.keep[0].as_py():
            return None
        error = decoded.error[0].as_py()
        if error is not None:
            note("subscribe", f"publisher {key}: skipped a malformed message: {error}")
            return None
        payload = decoded.payload[0].as_py() or b""
        line = {
            "publisher": key,
            "event_id": decoded.columns["event_id"][0].as_py(),
            "event": decoded.columns["event"][0].as_py(),
        }
        try:
            line["payload"] = payload.decode("utf-8")
        except UnicodeDecodeError:
            line["payload_base64"] = base64.b64encode(payload).decode("ascii")
        return line

    def close(self) -> None:
        self.discovery.close()
        for sock in self.sockets.values():
            sock.close(0)


def subscription_options(args: argparse.Namespace, session: str) -> Options:
    """The reader options that say what ``subscribe``'s arguments say."""
    raw = {"session": session, "managementUri": "none"}
    raw["discoveryInterfaces"] = ",".join(args.interfaces) if args.interfaces else "all"
    if args.events:
        raw["events"] = ",".join(name or wire.hex() for wire, name in args.events.items())
    if args.publishers:
        raw["publishers"] = ",".join(args.publishers)
    try:
        return parse_options("zeroeq", READER_OPTIONS + ZeroEQ.reader_options, raw)
    except OptionError as exc:
        raise CommandError(str(exc), 2) from None


def run_subscribe(args: argparse.Namespace) -> int:
    """Print events until done; finding no publisher, or fewer events than asked for, is a
    failure (exit 1) so scripts can tell an empty wire from a working one."""
    session = default_session() if args.session is None else args.session
    subscription = Subscription(subscription_options(args, session))
    try:
        subscription.discovery.start(subscription)
        received = print_events(subscription, args.count, args.timeout)
    finally:
        subscription.close()
    if not subscription.sockets:
        raise CommandError(
            f"no publisher found in session {session!r} within {args.timeout} s (see 'browse')"
        )
    if args.count is not None and received < args.count:
        raise CommandError(f"received {received} of {args.count} events within {args.timeout} s")
    return 0


def print_events(subscription: Subscription, count: int | None, timeout: float | None) -> int:
    """Print events as they come, until ``count`` of them or ``timeout`` s; how many."""
    deadline = None if timeout is None else time.monotonic() + timeout
    received = 0
    while count is None or received < count:
        wait = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
        if wait <= 0:
            break
        subscription.connect_joined()
        for instance, frames in subscription.receive(wait):
            line = subscription.decode(instance, frames)
            if line is not None and (count is None or received < count):
                print(json.dumps(line, ensure_ascii=False), flush=True)
                received += 1
    return received
