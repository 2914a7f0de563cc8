"""``python -m spark_zmq demo --format F``: demo peers of a format, until interrupted.

The first line printed is the format and the reader options that find the peers, as
``--option KEY=VALUE`` arguments for the jobs and ``discover``; the last, how many readings
each peer sent.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import threading

from spark_zmq.cli.common import positive_rate_arg, positive_seconds_arg
from spark_zmq.testing.demo import DEMOS, run

PROG = "python -m spark_zmq demo"


def add_demo_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "demo",
        help="run demo peers of a format until interrupted",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    parser.add_argument("--format", required=True, choices=sorted(DEMOS))
    parser.add_argument(
        "--rate",
        type=positive_rate_arg,
        default=10.0,
        help="readings per second from each peer (default 10)",
    )
    parser.add_argument("--seconds", type=positive_seconds_arg, help="stop after this long")


def option_arguments(options: dict[str, str]) -> str:
    return " ".join(f"--option {shlex.quote(f'{key}={value}')}" for key, value in options.items())


def run_demo(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    peers = DEMOS[args.format]()
    try:
        print(f"{args.format} {option_arguments(peers.options)}", flush=True)
        sent = run(peers, args.rate, args.seconds, lambda: not stop.is_set())
    finally:
        peers.close()
    print(f"{PROG}: sent {sent} readings from each {args.format} peer", flush=True)
    return 0
