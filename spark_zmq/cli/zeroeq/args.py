"""Argument types of the zeroeq tools: a bad value is a usage error naming the argument."""

from __future__ import annotations

import argparse

from spark_zmq.options import comma_list
from spark_zmq.protocols.zeroeq import (
    parse_address,
    parse_event,
    resolve_interfaces,
)


def interfaces_arg(value: str) -> tuple[str, ...] | None:
    """``all`` (None: every interface) or IPv4 addresses / interface names, checked now so a
    typo is a usage error rather than a failure deep inside ZeroConf."""
    if value.strip().lower() == "all":
        return None
    try:
        names = comma_list(value)
        resolve_interfaces(names)
    except ValueError as exc:
        message = str(exc).removeprefix("discoveryInterfaces: ")
        raise argparse.ArgumentTypeError(f"{value!r}: {message}") from None
    return names


def event_arg(value: str) -> tuple[bytes, str | None]:
    """An event as the reader's ``events`` option takes it: a name, 32 hex or ``high:low``."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an event name or id cannot be empty")
    return parse_event(value.strip())


def events_arg(value: str) -> dict[bytes, str | None]:
    """Comma-separated events -> {wire id: name or None}."""
    try:
        items = comma_list(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: an empty item in the list") from None
    return dict(parse_event(item) for item in items)


def publisher_arg(value: str) -> str:
    """``host:port`` or ``tcp://host:port`` -> ``host:port``, the form management requests and
    publisher instance names use."""
    try:
        host, port = parse_address(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return f"{host}:{port}"


def publishers_arg(value: str) -> list[str]:
    """Comma-separated publishers, each as ``publisher_arg``."""
    try:
        items = comma_list(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: an empty item in the list") from None
    return [publisher_arg(item) for item in items]
