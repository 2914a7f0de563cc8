"""``python -m spark_zmq ebus broker|worker|services|workers|call``: EBUS peers from a shell.

``broker`` runs a broker (loopback unless ``--host`` says otherwise) and ``worker`` an echo
service on one, both until interrupted; ``services`` and ``workers`` ask a broker and print its
answer as JSON; ``call`` sends one request to a service and prints what became of it. Each takes
the CURVE flags (``spark_zmq.cli.curve``): a broker with ``--curve-secret-key`` is a CURVE server,
and the others reach it with ``--curve-server-key``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from spark_zmq.cli.common import any_port_arg, count_arg, port_arg, positive_seconds_arg
from spark_zmq.cli.curve import add_curve_arguments, curve_of
from spark_zmq.protocols.ebus import Broker, BrokerError, Client, Worker, ask
from spark_zmq.protocols.ebus.wire import (
    BACKEND_PORT,
    DEFAULT_STALES_MS,
    FRONTEND_PORT,
    PUB_PORT,
    SUB_PORT,
    answer_json,
    from_json,
    pack,
)
from spark_zmq.protocols.ebus.worker import DEFAULT_MAX_BYTES


def add_ebus_parser(commands: argparse._SubParsersAction) -> None:
    ebus = commands.add_parser(
        "ebus",
        help="an EBUS broker, an echo worker, services, workers",
        description="EBUS peers from a shell, without Spark.",
    )
    actions = ebus.add_subparsers(dest="action", required=True, metavar="ACTION")
    broker = actions.add_parser("broker", help="run a broker until interrupted")
    broker.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    for name, default in (
        ("frontend", FRONTEND_PORT),
        ("backend", BACKEND_PORT),
        ("pub", PUB_PORT),
        ("sub", SUB_PORT),
    ):
        broker.add_argument(f"--{name}-port", type=any_port_arg, default=default, metavar="PORT")
    broker.set_defaults(run=run_broker)
    worker = actions.add_parser("worker", help="serve an echo service until interrupted")
    worker.add_argument("--service", default="echo")
    worker.add_argument("--broker", default="127.0.0.1", help="the broker's host")
    worker.add_argument("--backend-port", type=port_arg, default=BACKEND_PORT, metavar="PORT")
    worker.set_defaults(run=run_worker)
    for kind in ("services", "workers"):
        question = actions.add_parser(kind, help=f"print the broker's {kind.upper()} answer")
        question.add_argument("--broker", default="127.0.0.1", help="the broker's host")
        question.add_argument(
            "--frontend-port", type=port_arg, default=FRONTEND_PORT, metavar="PORT"
        )
        question.add_argument(
            "--timeout", type=positive_seconds_arg, default=3.0, metavar="SECONDS"
        )
        question.set_defaults(run=run_question)
    call = actions.add_parser("call", help="send one request to a service, print the answer")
    call.add_argument("--service", required=True)
    call.add_argument("--data", default="null", help="the request's data, JSON text")
    call.add_argument("--broker", default="127.0.0.1", help="the broker's host")
    call.add_argument("--frontend-port", type=port_arg, default=FRONTEND_PORT, metavar="PORT")
    call.add_argument(
        "--stales-ms",
        type=count_arg,
        default=DEFAULT_STALES_MS,
        metavar="MS",
        help="how long the request may wait for an answer",
    )
    call.set_defaults(run=run_call)
    for parser in actions.choices.values():
        add_curve_arguments(parser)


def run_ebus(args: argparse.Namespace) -> int:
    try:
        return args.run(args)
    except (BrokerError, OSError) as exc:
        print(f"python -m spark_zmq ebus {args.action}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _until_interrupted() -> None:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()


def run_broker(args: argparse.Namespace) -> int:
    curve = curve_of(args)
    broker = Broker(
        args.host, args.frontend_port, args.backend_port, args.pub_port, args.sub_port, curve=curve
    )
    print(
        f"ebus broker on {args.host}: frontend {broker.frontend_port}, backend "
        f"{broker.backend_port}, pub {broker.pub_port}, sub {broker.sub_port}"
        f"{', CURVE' if curve.serves else ''}",
        flush=True,
    )
    try:
        _until_interrupted()
    finally:
        broker.close()
    return 0


def run_worker(args: argparse.Namespace) -> int:
    # said before the worker registers: once registered it may answer a request, whose
    # client's output must not come before this line (docs/formats/ebus.md's session)
    print(f"ebus worker {args.service!r} on tcp://{args.broker}:{args.backend_port}", flush=True)
    worker = Worker(
        f"tcp://{args.broker}:{args.backend_port}",
        args.service,
        lambda data: data,
        curve=curve_of(args),
    )
    try:
        _until_interrupted()
    finally:
        worker.close()
    return 0


def run_question(args: argparse.Namespace) -> int:
    answer = ask(
        f"tcp://{args.broker}:{args.frontend_port}",
        args.action.upper(),
        args.timeout,
        curve_of(args),
        max_bytes=DEFAULT_MAX_BYTES,
    )
    print(json.dumps(answer, sort_keys=True))
    return 0


def run_call(args: argparse.Namespace) -> int:
    """Print ``{"requestId", "status", "data"}``; exit 0 only for a REPLY."""
    try:
        data = pack(from_json(args.data))
    except ValueError as exc:
        raise BrokerError(f"--data is not JSON text: {exc}") from None
    with Client(f"tcp://{args.broker}:{args.frontend_port}", curve=curve_of(args)) as client:
        answer = client.request(args.service, data, stales_ms=args.stales_ms).result()
    reply = None if answer.data is None else answer_json(answer.data, DEFAULT_MAX_BYTES)
    print(
        json.dumps(
            {
                "requestId": answer.request_id,
                "status": answer.status,
                "data": None if reply is None else json.loads(reply),
            },
            sort_keys=True,
        )
    )
    return 0 if answer.status == "REPLY" else 1
