"""``python -m spark_zmq goby daemon|subscribe|publish``: Goby3 from a shell, without Spark.

``daemon`` runs the stand-in gobyd until interrupted; ``subscribe`` prints the messages under
identifier prefixes as JSON lines; ``publish`` sends a message as a Goby client does (Manager
exchange, hold handshake). Clients reach gobyd's Manager over IPC (``--platform``,
``--socket-name``) unless ``--manager-host``/``--manager-port`` select TCP. Each takes the CURVE
flags (``spark_zmq.cli.curve``): a daemon with ``--curve-secret-key`` is a CURVE server, and
clients reach it with ``--curve-server-key``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
import threading
import time

import zmq

from spark_zmq.cli.common import (
    CommandError,
    any_port_arg,
    count_arg,
    port_arg,
    positive_seconds_arg,
    seconds_arg,
)
from spark_zmq.cli.curve import add_curve_arguments, curve_of
from spark_zmq.protocols.goby import (
    GobyDaemon,
    HoldTimeout,
    IdentifierError,
    ManagerAddress,
    ManagerError,
    request_router,
    split_message,
)
from spark_zmq.protocols.goby.format import encode_message
from spark_zmq.protocols.goby.manager import DEFAULT_PLATFORM, DEFAULT_TCP_PORT
from spark_zmq.protocols.goby.payloads import PayloadError, bson_json, cstr_text
from spark_zmq.protocols.goby.publisher import GobyPublisher
from spark_zmq.protocols.goby.wire import INTERNAL_GROUP_PREFIX, subscription_prefix, thread_hash

PROG = "python -m spark_zmq goby"
CLIENT_NAME = "spark_zmq_cli"


def add_goby_parser(commands: argparse._SubParsersAction) -> None:
    goby = commands.add_parser(
        "goby",
        help="a stand-in gobyd, subscribe, publish",
        description="Goby3 interprocess from a shell, without Spark.",
    )
    actions = goby.add_subparsers(dest="action", required=True, metavar="ACTION")
    daemon = actions.add_parser("daemon", help="run a stand-in gobyd until interrupted")
    daemon.add_argument(
        "--platform",
        default=DEFAULT_PLATFORM,
        help="IPC sockets at /tmp/goby_PLATFORM.* (default %(default)s)",
    )
    daemon.add_argument("--socket-name", help="IPC sockets at SOCKET_NAME.* (overrides --platform)")
    daemon.add_argument(
        "--tcp-port",
        type=any_port_arg,
        metavar="PORT",
        help=f"TCP instead of IPC: the Manager on this port (gobyd's default "
        f"is {DEFAULT_TCP_PORT}; 0 picks one)",
    )
    daemon.add_argument(
        "--host", default="127.0.0.1", help="TCP address to bind (default loopback)"
    )
    daemon.add_argument(
        "--required-client",
        action="append",
        default=[],
        metavar="NAME",
        help="hold publications until this client is ready (repeatable)",
    )
    daemon.set_defaults(run=run_daemon)

    subscribe = actions.add_parser("subscribe", help="print messages as JSON lines")
    _add_client_arguments(subscribe)
    subscribe.add_argument(
        "prefixes",
        nargs="*",
        default=["/"],
        metavar="PREFIX",
        help="identifier prefixes such as /nav/PROTOBUF/ (default /: all)",
    )
    subscribe.add_argument("--count", type=count_arg, help="stop after this many messages")
    subscribe.add_argument(
        "--timeout", type=positive_seconds_arg, metavar="SECONDS", help="stop after this long"
    )
    subscribe.add_argument(
        "--include-internal-groups",
        action="store_true",
        help="also print gobyd's own hold handshake (groups "
        f"{INTERNAL_GROUP_PREFIX}...), hidden by default as Goby's "
        "tools hide it",
    )
    subscribe.set_defaults(run=run_subscribe)

    publish = actions.add_parser("publish", help="send a message as a Goby client")
    _add_client_arguments(publish)
    publish.add_argument("--group", required=True)
    publish.add_argument("--scheme", default="CSTR", help="a scheme name or number (default CSTR)")
    publish.add_argument("--type", help="the type name (default CSTR for CSTR)")
    body = publish.add_mutually_exclusive_group(required=True)
    body.add_argument("--text", help="CSTR text, or JSON text for the JSON scheme")
    body.add_argument("--payload-hex", help="the payload's bytes in hex")
    publish.add_argument("--count", type=count_arg, default=1)
    publish.add_argument(
        "--wait",
        type=seconds_arg,
        default=5.0,
        metavar="SECONDS",
        help="wait up to this long for a subscriber first (default 5)",
    )
    publish.add_argument(
        "--hold-timeout", type=positive_seconds_arg, default=60.0, metavar="SECONDS"
    )
    publish.set_defaults(run=run_publish)
    for parser in actions.choices.values():
        add_curve_arguments(parser)


def _add_client_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--platform", default=DEFAULT_PLATFORM)
    parser.add_argument("--socket-name")
    parser.add_argument("--manager-host", help="TCP: the Manager's host")
    parser.add_argument("--manager-port", type=port_arg, help="TCP: the Manager's port")
    parser.add_argument(
        "--manager-timeout", type=positive_seconds_arg, default=5.0, metavar="SECONDS"
    )
    parser.add_argument("--client-name", default=CLIENT_NAME)


def _manager(args: argparse.Namespace) -> ManagerAddress:
    if args.manager_host or args.manager_port:
        return ManagerAddress.tcp(
            args.manager_host or "127.0.0.1", args.manager_port or DEFAULT_TCP_PORT
        )
    return ManagerAddress.ipc(args.platform, args.socket_name)


def run_goby(args: argparse.Namespace) -> int:
    try:
        return args.run(args)
    except (CommandError, ManagerError, HoldTimeout, IdentifierError, OSError) as exc:
        print(f"{PROG} {args.action}: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130


def run_daemon(args: argparse.Namespace) -> int:
    curve = curve_of(args)
    daemon = GobyDaemon(
        args.platform, args.socket_name, args.tcp_port, args.host, args.required_client, curve=curve
    )
    print(
        f"gobyd: manager {daemon.manager_endpoint}, router XPUB {daemon.xpub_endpoint}, "
        f"XSUB {daemon.xsub_endpoint}{', CURVE' if curve.serves else ''}",
        flush=True,
    )
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        stop.wait()
    finally:
        daemon.close()
    return 0


def run_subscribe(args: argparse.Namespace) -> int:
    prefixes = [subscription_prefix(p) for p in args.prefixes]
    curve = curve_of(args)
    router = request_router(
        _manager(args), args.client_name, os.getpid(), args.manager_timeout, curve=curve
    )
    sock = curve.as_client(zmq.Context.instance().socket(zmq.SUB))
    sock.setsockopt(zmq.LINGER, 0)
    for prefix in prefixes:
        sock.setsockopt(zmq.SUBSCRIBE, prefix)
    sock.connect(router.subscribe)
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    received = 0
    try:
        while args.count is None or received < args.count:
            wait = 100 if deadline is None else min(100, (deadline - time.monotonic()) * 1000)
            if wait <= 0:
                break
            if sock.poll(wait):
                line = message_line(sock.recv())
                if args.include_internal_groups or not str(line.get("group", "")).startswith(
                    INTERNAL_GROUP_PREFIX
                ):
                    print(json.dumps(line), flush=True)
                    received += 1
    finally:
        sock.close(0)
    if args.count is not None and received < args.count:
        raise CommandError(f"received {received} of {args.count} messages within {args.timeout} s")
    return 0


def message_line(message: bytes) -> dict:
    """A message as one JSON object: identifier parts, and the payload as text or base64."""
    try:
        ident, payload = split_message(message)
    except IdentifierError as exc:
        return {"error": str(exc), "message_base64": base64.b64encode(message).decode()}
    line = {
        "group": ident.group,
        "scheme": ident.scheme,
        "type": ident.type,
        "process": ident.process,
        "thread": ident.thread,
    }
    try:
        if ident.scheme == "CSTR":
            return {**line, "text": cstr_text(payload)}
        if ident.scheme == "JSON":
            return {**line, "json": json.loads(bson_json(payload))}
    except PayloadError as exc:
        line["error"] = str(exc)
    return {**line, "payload_base64": base64.b64encode(payload).decode()}


def run_publish(args: argparse.Namespace) -> int:
    payload = None if args.payload_hex is None else bytes.fromhex(args.payload_hex)
    try:
        message = encode_message(
            args.group,
            args.scheme,
            args.type,
            payload,
            args.text,
            process=os.getpid(),
            thread=thread_hash(),
        )
    except (ValueError, PayloadError) as exc:
        raise CommandError(str(exc)) from None
    publisher = GobyPublisher(
        _manager(args),
        args.client_name,
        manager_timeout=args.manager_timeout,
        hold_timeout=args.hold_timeout or None,
        send_hwm=1000,
        send_timeout=10.0,
        curve=curve_of(args),
    )
    topic = message[: message.index(b"\0")]
    try:
        deadline = time.monotonic() + args.wait
        while publisher.subscribers(topic) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        subscribers = publisher.subscribers(topic)
        for _ in range(args.count):
            publisher.send([message])
    finally:
        publisher.close()
        zmq.Context.instance().term()  # returns once the messages are out (linger: 1 s)
    print(
        f"published {args.count} x {topic.decode('utf-8', 'replace')} to {subscribers} "
        f"subscription(s) via {publisher.router.publish}"
    )
    return 0
