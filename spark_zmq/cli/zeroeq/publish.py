"""``zeroeq publish``: send events from a publisher announced in a session, as a Spark writer
does."""

from __future__ import annotations

import argparse
import sys

import zmq

from spark_zmq.cli.common import CommandError
from spark_zmq.cli.zeroeq.common import APPLICATION, event_label, note
from spark_zmq.protocols.zeroeq import (
    Publisher,
)


def run_publish(args: argparse.Namespace) -> int:
    """Announce a publisher, send, and leave only once the messages are out: the publisher has
    its own zmq context, and terminating it waits (up to the socket's linger) for delivery."""
    wire, name = args.event
    payload = read_payload(args.payload, args.payload_file)
    context = zmq.Context()
    try:
        publisher = Publisher(
            args.session,
            host=args.host,
            port=args.port,
            application=APPLICATION,
            interfaces=args.interfaces,
            registered={wire: name},
            context=context,
        )
    except OSError as exc:
        context.destroy(linger=0)
        raise CommandError(str(exc)) from None
    try:
        subscribers = send(publisher, wire, name, payload, args.count, args.wait)
    finally:
        publisher.close()
        context.term()
    print(
        f"published {args.count} x {event_label(wire, name)}, {len(payload)} bytes, from "
        f"{publisher.instance_name} in session {publisher.session!r} to {subscribers} "
        f"subscriber(s)"
    )
    return 0


def read_payload(text: str | None, path: str | None) -> bytes:
    """Text for the common case, a file (or stdin) for binary payloads."""
    if text is not None:
        return text.encode("utf-8")
    if path is None:
        return b""
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise CommandError(f"--payload-file {path}: {exc.strerror}", 2) from None


def send(
    publisher: Publisher, wire: bytes, name: str | None, payload: bytes, count: int, wait: float
) -> int:
    """Send after a subscriber shows up, since zmq drops what is published before a
    subscription arrives; with none, send anyway (the user may be testing just that).
    Returns how many subscribers the event had."""
    try:
        publisher.wait_for_subscribers(1, timeout=wait, event=wire)
    except TimeoutError:
        note(
            "publish",
            f"no subscriber to {event_label(wire, name)} within {wait} s; publishing anyway",
        )
    for _ in range(count):
        publisher.publish(wire, payload)
    return publisher.count_subscribers(wire)
