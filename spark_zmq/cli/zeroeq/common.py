"""What the zeroeq tools share: their name in messages, progress notes on stderr, event labels, a
peer's vocabulary."""

from __future__ import annotations

import argparse
import sys

from spark_zmq.cli.common import CommandError
from spark_zmq.protocols.zeroeq import (
    Record,
    request_vocabulary,
)
from spark_zmq.protocols.zeroeq.discovery import VOCABULARY_TIMEOUT
from spark_zmq.protocols.zeroeq.reqrep import RequestError

PROG = "python -m spark_zmq zeroeq"
#: the TXT ``Application`` of the CLI's publisher, so browse tells it from a Spark writer
APPLICATION = "spark_zmq-cli"


def note(action: str, message: str) -> None:
    """Progress and errors go to stderr, so stdout carries only results (JSON, tables)."""
    print(f"{PROG} {action}: {message}", file=sys.stderr, flush=True)


def run_zeroeq(args: argparse.Namespace) -> int:
    """Run one zeroeq action; failures become one stderr line and an exit status, and Ctrl-C a
    quiet stop, since these are interactive tools."""
    try:
        return args.run(args)
    except CommandError as exc:
        note(args.action, str(exc))
        return exc.status
    except KeyboardInterrupt:
        return 130


def event_label(wire: bytes, name: str | None) -> str:
    """How messages name an event: its name when known, always its wire id."""
    return f"{name!r} ({wire.hex()})" if name else wire.hex()


def vocabulary_of(record: Record) -> dict[bytes, str | None]:
    """A peer's events: the ids of its TXT record, named by its vocabulary server when that
    answers (the TXT value holds only ids, and only as many as fit in 255 bytes)."""
    events: dict[bytes, str | None] = dict.fromkeys(record.vocabulary)
    if record.vocabulary_request:
        try:
            events.update(request_vocabulary(record.vocabulary_request, VOCABULARY_TIMEOUT))
        except (RequestError, ValueError):
            pass
    return events
