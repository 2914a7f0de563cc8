"""``spark-zmq capture``: a capture service, which fills a spool without a query.

It runs the capture of a query with ``capture=driver`` (the same discovery, CURVE, bounds and
spool, from the same reader options ``--option key=value``) until SIGTERM or SIGINT, and lets go
of what every query reading its spool (option ``capture=service``, each under its own
``spoolReader`` name) has committed. A scheduled ``Trigger.AvailableNow`` job then loses
nothing between its runs. ``spark-zmq readers`` lists the reader names of a spool.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from spark_zmq.cli.common import add_format_options, any_port_arg, positive_seconds_arg, seconds_arg
from spark_zmq.errors import SparkZmqError
from spark_zmq.log import configure_logging
from spark_zmq.monitoring.server import MonitoringServer, capture_server
from spark_zmq.options import OptionError
from spark_zmq.placement.service import CaptureService, Progress
from spark_zmq.protocols.contract import StreamProtocol
from spark_zmq.spool.reader import read_snapshot
from spark_zmq.spool.readers import load_readers
from spark_zmq.stream_settings import ReaderSettings

PROG = "spark-zmq capture"
#: seconds between two looks at what queries committed
COMMIT_POLL_SECONDS = 1.0
#: reader options a capture service decides itself
NOT_FOR_THE_SERVICE = {
    "capture": "the service is the capture (a query reading its spool sets capture=service)",
    "spoolPath": "give the spool as --spool",
    "metrics": "give --metrics-port and --metrics-address",
}


def add_capture_parser(commands: argparse._SubParsersAction, formats: list[str]) -> None:
    parser = commands.add_parser(
        "capture",
        help="capture into a spool without a query (a service; stop it with SIGTERM)",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    parser.add_argument("--format", required=True, choices=formats, help="the format to capture")
    add_format_options(parser, help="a reader option of --format, as a query takes it (repeatable)")
    parser.add_argument(
        "--spool",
        required=True,
        metavar="PATH",
        help="the spool folder to fill: what queries with capture=service give as spoolPath",
    )
    parser.add_argument(
        "--progress-every",
        type=positive_seconds_arg,
        default=10.0,
        metavar="SECONDS",
        help="seconds between progress lines on stdout (default 10)",
    )
    parser.add_argument(
        "--metrics-port",
        type=any_port_arg,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics (/metrics) and health probes (/healthz, /readyz) on "
        "this TCP port (0: any free one, named in the start line); off by default",
    )
    parser.add_argument(
        "--metrics-address",
        default="127.0.0.1",
        metavar="ADDRESS",
        help="the address --metrics-port binds (default 127.0.0.1; 0.0.0.0: every interface)",
    )
    parser.add_argument(
        "--ready-endpoint-timeout",
        type=seconds_arg,
        default=300.0,
        metavar="SECONDS",
        help="/readyz fails once no endpoint has been read for this long (default 300; 0: "
        "never for that)",
    )


def service_options(
    protocol: StreamProtocol[Any], given: Mapping[str, str], spool: str
) -> ReaderSettings[Any]:
    """The service's settings, from options parsed and checked as a query's reader options
    are: a wrong one fails with the same OptionError."""
    for name, why in NOT_FOR_THE_SERVICE.items():
        if name in given:
            raise OptionError(f"{protocol.name}: option {name!r} is not for {PROG}: {why}")
    raw = {**given, "spoolPath": spool}
    options = protocol.parse_reader_options(raw)
    return ReaderSettings.of(options, protocol.read_settings(options))


def run_capture(args: argparse.Namespace, formats: Mapping[str, StreamProtocol[Any]]) -> int:
    if args.log_level is None:  # a service's own events (joins, drops) belong in its log
        configure_logging(None, default="INFO")
    protocol = formats[args.format]
    try:  # --spool is checked as option spoolPath is (an object store's URI is refused)
        settings = service_options(protocol, dict(args.option), args.spool)
    except OptionError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    spool = os.path.abspath(settings.source.spool_path or args.spool)
    stop = _stop_on_signals()
    service = CaptureService(protocol, settings, spool)
    monitoring = None
    try:
        service.start()
        served = service.capture.served()
        where = f"serves it at {served.location}" if served else "does not serve it"
        if args.metrics_port is not None:
            monitoring = _monitoring(service, args)
            monitoring.start()
        metrics = f"; metrics and probes at {monitoring.url}" if monitoring else ""
        _say(
            f"{protocol.name}: capture service (process {os.getpid()} on host "
            f"{socket.gethostname()}) fills spool {spool} and {where} (read tasks on hosts "
            f"that do not see the folder); queries read it with options capture=service, "
            f"spoolPath={spool}; a line every {args.progress_every:g} s; SIGTERM or SIGINT "
            f"stops it{metrics}"
        )
        _serve(service, stop, args.progress_every)
        _say(_progress_line(protocol.name, service.progress(), "since the last line, stopping"))
    except SparkZmqError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr, flush=True)
        return 1
    except OSError as exc:  # the metrics port is taken, or the address is not this host's
        print(f"{PROG}: cannot serve metrics: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        if monitoring is not None:
            monitoring.close()
        service.close()
    _say(f"{protocol.name}: capture service stopped; spool {spool} closed")
    return 0


def _monitoring(service: CaptureService, args: argparse.Namespace) -> MonitoringServer:
    """The service's metrics and probes on --metrics-address:--metrics-port."""
    timeout = args.ready_endpoint_timeout or None
    return capture_server(
        service.protocol.name,
        (args.metrics_address, args.metrics_port),
        service.view,
        service.capture.liveness,
        lambda: service.readiness(timeout),
    )


def _serve(service: CaptureService, stop: threading.Event, every: float) -> None:
    """Apply commits every second and print a progress line every ``every`` s until ``stop``."""
    next_line = time.monotonic() + every
    while not stop.wait(min(COMMIT_POLL_SECONDS, max(0.0, next_line - time.monotonic()))):
        if time.monotonic() >= next_line:
            next_line += every
            _say(_progress_line(service.protocol.name, service.progress(), f"in {every:g} s"))
        else:
            service.poll()


def _progress_line(name: str, progress: Progress, interval: str) -> str:
    if progress.slowest is None:
        readers = "readers: none holds data"
    else:
        slowest, behind = progress.slowest
        readers = f"readers: {progress.readers}, slowest {slowest!r} {behind} messages behind"
    return (
        f"{name}: partitions: {progress.live} live, {progress.retired} retired; captured "
        f"{progress.captured} messages {interval}; spool: {progress.uncommitted} messages not "
        f"committed by every reader, {_size(progress.spool_bytes)}; {readers}"
    )


def add_readers_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "readers",
        help="list the queries (reader names) that read a capture service's spool",
        description=(
            "Every reader name of a spool (option spoolReader of the queries that read it): "
            "whether its query runs, when it last planned or committed, and how many "
            "messages the spool holds that it has not committed."
        ),
    )
    parser.add_argument("--spool", required=True, metavar="PATH", help="the spool folder")
    parser.add_argument(
        "--json", action="store_true", help="one JSON document per reader, with its positions"
    )


def run_readers(args: argparse.Namespace) -> int:
    spool = os.path.abspath(args.spool)
    if not os.path.isdir(spool):
        print(f"spark-zmq readers: no spool at {spool}", file=sys.stderr)
        return 1
    held = read_snapshot(spool)
    readers = load_readers(spool)
    if args.json:
        for record in readers.values():
            doc = {**dataclasses.asdict(record), "behind": record.lag(held)}
            print(json.dumps(doc, sort_keys=True))
        return 0
    print(f"spool {spool}: {len(held)} partitions, {len(readers)} reader names")
    now = time.time()
    for name, record in sorted(readers.items()):
        state = "stopped" if record.stopped else "running"
        silent = _duration(now - record.at) if record.at else "never"
        print(
            f"  {name!r}: {state}, last seen {silent} ago, {record.lag(held)} messages behind, "
            f"committed in {len(record.committed)} of {len(held)} partitions"
        )
    return 0


def _duration(seconds: float) -> str:
    """A time span for a person: seconds, minutes, hours or days, one unit."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{max(0.0, seconds):.0f} s"


def _size(nbytes: int) -> str:
    """A size for a person: bytes below 1 KiB, else KiB, MiB, GiB or TiB with one decimal."""
    if nbytes < 1024:
        return f"{nbytes} B"
    size = nbytes / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _say(line: str) -> None:
    """A status line of the service on stdout (start, progress, stop), at once."""
    print(f"{PROG}: {line}", flush=True)


def _stop_on_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set: the service then flushes, closes and exits 0."""
    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop
