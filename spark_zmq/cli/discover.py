"""``python -m spark_zmq discover``: the endpoints a stream would read right now.

It runs the very discovery that a ``readStream.format(F)`` query runs on the driver, with the
same options (``--option key=value``), for a few seconds, and lists every endpoint found: one
table, or JSON lines with ``--json``. Without ``--format`` it asks every format with its
defaults; a format whose discovery cannot start (no gobyd, no Zyre beacon) is reported on stderr
and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from spark_zmq.cli.common import MemoryState, add_format_options, aligned, positive_seconds_arg
from spark_zmq.options import OptionError
from spark_zmq.protocols.contract import Endpoint, StreamProtocol

PROG = "python -m spark_zmq discover"
#: what discover reads of yamz when no address is given: every port one to three levels deep
YAMZ_EVERYTHING = "yamz://*/* yamz://*/*/* yamz://*/*/*/*"
#: defaults of discover that differ from a query's (a query needs them set; a look does not)
DISCOVER_DEFAULTS = {"yamz": {"address": YAMZ_EVERYTHING}, "zeroeq": {"managementUri": "none"}}


class Found:
    """An EndpointListener that keeps what discovery reports."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.endpoints: dict[str, Endpoint] = {}

    def endpoint_joined(self, endpoint: Endpoint) -> None:
        with self._lock:
            self.endpoints[endpoint.key] = endpoint

    def endpoint_left(self, key: str) -> None:
        with self._lock:
            self.endpoints.pop(key, None)


def add_discover_parser(commands: argparse._SubParsersAction, formats: list[str]) -> None:
    parser = commands.add_parser(
        "discover",
        help="list the endpoints a stream would read right now",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    parser.add_argument(
        "--format", choices=formats, help="only this format (default: every one, with its defaults)"
    )
    add_format_options(parser, help="a reader option of --format (repeatable)")
    parser.add_argument(
        "--seconds", type=positive_seconds_arg, default=3.0, help="how long to listen (default 3)"
    )
    parser.add_argument("--json", action="store_true", help="JSON lines instead of a table")


def discover(
    protocol: StreamProtocol[Any], given: Mapping[str, str], seconds: float
) -> list[Endpoint]:
    """Run ``protocol``'s discovery with these options for ``seconds``; what it found."""
    raw = {**DISCOVER_DEFAULTS.get(protocol.name, {}), **given}
    settings = protocol.reader_settings(raw)
    found = Found()
    discovery = protocol.discovery(settings, MemoryState())
    try:
        discovery.start(found)
        time.sleep(seconds)
        discovery.check()
    finally:
        discovery.close()
    return sorted(found.endpoints.values(), key=lambda e: e.key)


def row_of(format_name: str, endpoint: Endpoint) -> dict:
    return {
        "format": format_name,
        "partition": endpoint.key,
        "endpoint": endpoint.address,
        "metadata": dict(sorted(endpoint.metadata.items())),
    }


def table(rows: list[dict]) -> str:
    """A plain text table: format, partition, endpoint, metadata as key=value."""
    head = ("format", "partition", "endpoint", "metadata")
    return aligned(
        head,
        (
            (
                r["format"],
                r["partition"],
                r["endpoint"],
                " ".join(f"{k}={v}" for k, v in r["metadata"].items()),
            )
            for r in rows
        ),
    )


def run_discover(args: argparse.Namespace, formats: Mapping[str, StreamProtocol]) -> int:
    if args.option and not args.format:
        print(f"{PROG}: --option needs --format (options belong to one format)", file=sys.stderr)
        return 2
    names = [args.format] if args.format else list(formats)
    rows: list[dict] = []
    failed = False
    for name in names:
        try:
            endpoints = discover(formats[name], dict(args.option), args.seconds)
        except OptionError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:  # the format's own error: gobyd, Zyre, a bind
            print(f"{PROG}: {name}: {exc}", file=sys.stderr, flush=True)
            failed = True
            continue
        rows.extend(row_of(name, endpoint) for endpoint in endpoints)
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        print(table(rows))
    return 1 if failed else 0
