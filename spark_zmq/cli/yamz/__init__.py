"""``python -m spark_zmq yamz browse|subscribe``: yamz from a shell, without Spark.

``browse`` runs a Zyre node for a while and prints the peers it met, with the ports each
announces in its ``YAMZ`` header (or why the header cannot be read); ``subscribe`` reads a yamz
address, concrete or abstract (``yamz://node/path?key=regex``), and prints its messages as JSON
lines: an abstract address is resolved through Zyre as the ``yamz`` reader resolves it
(``protocols.yamz.discovery``), and every port it matches, now or later, is read. Both take
``--beacon-port`` (nodes find each other only on the same UDP port); ``subscribe`` takes the
CURVE flags (``spark_zmq.cli.curve``).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import queue
import sys
import time

import zmq

from spark_zmq.cli.common import CommandError, any_port_arg, count_arg, positive_seconds_arg
from spark_zmq.cli.curve import add_curve_arguments, curve_of
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.protocols.yamz.discovery import HEADER, ZyreDiscovery, own_header
from spark_zmq.protocols.yamz.wire import AddressError, HeaderError, Port, for_connect, ports_of
from spark_zmq.protocols.yamz.zyre import DEFAULT_BEACON_PORT, Peer, ZyreError, ZyreNode
from spark_zmq.security import Curve

PROG = "python -m spark_zmq yamz"


def add_yamz_parser(commands: argparse._SubParsersAction) -> None:
    yamz = commands.add_parser(
        "yamz",
        help="browse a Zyre network, subscribe to a yamz address",
        description="yamz (Zyre discovery) from a shell, without Spark.",
    )
    actions = yamz.add_subparsers(dest="action", required=True, metavar="ACTION")
    browse = actions.add_parser("browse", help="list the Zyre peers found and their ports")
    browse.add_argument(
        "--timeout",
        type=positive_seconds_arg,
        default=3.0,
        metavar="SECONDS",
        help="how long to listen for peers (default 3)",
    )
    browse.add_argument("--json", action="store_true", help="one JSON object per peer")
    browse.set_defaults(run=run_browse)
    subscribe = actions.add_parser("subscribe", help="print an address's messages as JSON lines")
    subscribe.add_argument("address", help="a concrete (tcp://host:port) or yamz:// address")
    subscribe.add_argument("--count", type=count_arg, help="stop after this many messages")
    subscribe.add_argument(
        "--timeout", type=positive_seconds_arg, metavar="SECONDS", help="stop after this long"
    )
    subscribe.set_defaults(run=run_subscribe)
    add_curve_arguments(subscribe)
    for parser in (browse, subscribe):
        parser.add_argument(
            "--beacon-port",
            type=any_port_arg,
            default=DEFAULT_BEACON_PORT,
            metavar="PORT",
            help=f"the UDP port of Zyre beacons (default {DEFAULT_BEACON_PORT})",
        )
        parser.add_argument("--node", help="this node's Zyre name (default spark-zmq-cli-PID)")


def run_yamz(args: argparse.Namespace) -> int:
    try:
        return int(args.run(args))
    except (CommandError, ZyreError, AddressError, OSError) as exc:
        print(f"{PROG} {args.action}: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130


def _node_name(args: argparse.Namespace) -> str:
    return str(args.node or f"spark-zmq-cli-{os.getpid()}")


def run_browse(args: argparse.Namespace) -> int:
    """Listen for ``--timeout`` seconds, then print each peer still present (by uuid)."""
    name = _node_name(args)
    peers: dict[str, Peer] = {}

    def exited(uuid: str, _name: str) -> None:
        peers.pop(uuid, None)

    node = ZyreNode(
        name,
        {HEADER: own_header(name)},
        args.beacon_port,
        lambda peer: peers.__setitem__(peer.uuid, peer),
        exited,
        lambda error: print(f"{PROG} browse: {error}", file=sys.stderr, flush=True),
    ).start()
    try:
        time.sleep(args.timeout)
    finally:
        node.close()
    for peer in sorted(peers.values(), key=lambda p: (p.name, p.uuid)):
        described = peer_description(peer)
        print(json.dumps(described) if args.json else peer_text(described), flush=True)
    if not peers and not args.json:
        print(f"no Zyre peer on beacon port {args.beacon_port} within {args.timeout:g} s")
    return 0


def peer_description(peer: Peer) -> dict:
    """A peer as JSON: its name, uuid, Zyre address, and its ports or why they are unknown."""
    described: dict = {"name": peer.name, "uuid": peer.uuid, "address": peer.address}
    header = peer.headers.get(HEADER)
    if header is None:
        described["error"] = "no YAMZ header: it announces no ports"
        return described
    try:
        described["ports"] = [port_description(port) for port in ports_of(peer.name, header)]
    except HeaderError as exc:
        described["error"] = str(exc)
    return described


def port_description(port: Port) -> dict:
    return {
        "address": f"yamz://{port.node}/{port.path_text}",
        "type": port.socket_type,
        "bound": list(port.addresses),
        "params": port.shown_params(),
    }


def peer_text(described: dict) -> str:
    """A peer and its ports as indented lines."""
    lines = [f"{described['name']} ({described['uuid']}) at {described['address']}"]
    if "error" in described:
        lines.append(f"  {described['error']}")
    for port in described.get("ports", ()):
        params = "&".join(f"{k}={v}" for k, v in port["params"].items())
        shown = port["address"] + (f"?{params}" if params else "")
        lines.append(f"  {shown} {port['type']} {', '.join(port['bound']) or '(not bound)'}")
    return "\n".join(lines)


def run_subscribe(args: argparse.Namespace) -> int:
    """Read the address's ports as discovery finds them; print each message as a JSON line."""
    address = for_connect(args.address)
    joined: queue.SimpleQueue[Endpoint] = queue.SimpleQueue()
    discovery = ZyreDiscovery(
        _node_name(args),
        args.beacon_port,
        (address,),
        None,
        lambda where, _port, socket_type: Endpoint(where, where, socket_type=socket_type),
    )
    discovery.start(_Joined(joined))
    curve = curve_of(args)
    sockets: dict[str, zmq.Socket] = {}
    poller = zmq.Poller()
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    received = 0
    try:
        while args.count is None or received < args.count:
            discovery.check()
            _connect_joined(joined, sockets, poller, curve)
            wait = 100 if deadline is None else min(100, (deadline - time.monotonic()) * 1000)
            if wait <= 0:
                break
            for sock, _event in poller.poll(wait):
                where = next(key for key, s in sockets.items() if s is sock)
                print(json.dumps(message_line(where, sock.recv_multipart())), flush=True)
                received += 1
    finally:
        discovery.close()
        for sock in sockets.values():
            sock.close(0)
    if args.count is not None and received < args.count:
        raise CommandError(f"received {received} of {args.count} messages within {args.timeout} s")
    return 0


class _Joined:
    """Discovery's listener: runs on the Zyre node's thread, so it only queues what joined
    (the sockets belong to the main thread); a port that left is read until the end."""

    def __init__(self, joined: queue.SimpleQueue[Endpoint]) -> None:
        self.joined = joined

    def endpoint_joined(self, endpoint: Endpoint) -> None:
        self.joined.put(endpoint)

    def endpoint_left(self, key: str) -> None:
        print(f"{PROG} subscribe: {key} left", file=sys.stderr, flush=True)


def _connect_joined(
    joined: queue.SimpleQueue[Endpoint],
    sockets: dict[str, zmq.Socket],
    poller: zmq.Poller,
    curve: Curve,
) -> None:
    while not joined.empty():
        endpoint = joined.get()
        if endpoint.key in sockets:
            continue
        sock = curve.as_client(zmq.Context.instance().socket(endpoint.socket_type))
        sock.setsockopt(zmq.LINGER, 0)
        if endpoint.socket_type == zmq.SUB:
            sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(endpoint.address)
        sockets[endpoint.key] = sock
        poller.register(sock, zmq.POLLIN)
        print(f"{PROG} subscribe: reading {endpoint.address}", file=sys.stderr, flush=True)


def message_line(address: str, frames: list[bytes]) -> dict:
    """A message as one JSON object: the port's address and the frames, as UTF-8 text when
    every frame is, else each in base64 (``encoding`` says which)."""
    try:
        return {"address": address, "encoding": "utf-8", "frames": [f.decode() for f in frames]}
    except UnicodeDecodeError:
        encoded = [base64.b64encode(f).decode("ascii") for f in frames]
        return {"address": address, "encoding": "base64", "frames": encoded}
