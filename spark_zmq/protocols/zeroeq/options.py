"""The zeroeq format's own options, defined once (see ``spark_zmq.options``): the reader's and
the writer's, and the parsers only they use."""

from __future__ import annotations

from spark_zmq.options import Option, boolean, comma_list, text
from spark_zmq.protocols.zeroeq.wire import (
    events_option,
    parse_event,
    publisher_addresses,
)


def _interfaces_option(value: str) -> tuple[str, ...] | None:
    if value.strip().lower() == "all":
        return None
    return comma_list(value)


def _management_option(value: str) -> str | None:
    value = value.strip()
    if value.lower() in ("", "none", "off"):
        return None
    if "://" not in value:
        raise ValueError("not a zmq endpoint")
    return value


def _bind_uri_option(value: str) -> tuple[str, int]:
    """``tcp://host:port`` where host may be ``*`` and port ``*`` or 0 (any)."""
    rest = value.strip()
    if rest.startswith("tcp://"):
        rest = rest[len("tcp://") :]
    elif "://" in rest:
        raise ValueError("only tcp:// is supported")
    host, sep, port = rest.rpartition(":")
    if not sep:
        host, port = rest, "*"
    if port in ("", "*"):
        port = "0"
    if not port.isdigit() or int(port) > 65535:
        raise ValueError("bad port")
    return host.strip("[]"), int(port)


def _events_map(specs: tuple[str, ...] | None) -> dict[bytes, str | None]:
    return dict(parse_event(spec) for spec in specs or ())


SESSION = Option(
    "session",
    text,
    "a session name",
    None,
    "Read publishers of this session / announce in it. Default: ZEROEQ_PUB_SESSION, "
    "else ZEROEQ_SESSION, else the user name. For a reader, empty means every "
    "publisher; a publisher that announces no session is read in any session.",
)
DISCOVERY_INTERFACES = Option(
    "discoveryInterfaces",
    _interfaces_option,
    "all, or comma-separated IPv4 addresses or interface names",
    None,
    "Where ZeroConf browses (reader; default: all interfaces) or announces (writer; default: "
    "`bindInterface`, or all interfaces when that is `*`).",
)
APPLICATION = Option(
    "application",
    text,
    "a name",
    "spark_zmq",
    "The application name in this side's ZeroConf record.",
)


READER_OPTIONS = (
    SESSION,
    Option(
        "publishers",
        publisher_addresses,
        "comma-separated host:port or tcp://host:port",
        None,
        "Read these publishers instead of discovering them (no ZeroConf).",
    ),
    Option(
        "events",
        events_option,
        "comma-separated event names, 32-hex wire ids or high:low ids",
        None,
        "Subscribe to these events only. Default: every event. The `event` column "
        "shows names given here or learned from publishers' vocabularies.",
    ),
    Option(
        "compatibleOnly",
        boolean,
        "true or false",
        "false",
        "Read only publishers whose vocabulary shares an event with `events` (the "
        "sessions design's compatible events). Needs `events`.",
    ),
    DISCOVERY_INTERFACES,
    Option(
        "managementUri",
        _management_option,
        "a zmq endpoint such as tcp://127.0.0.1:* or ipc://path, or none",
        "tcp://127.0.0.1:*",
        "Where the management port (REP) listens for subscribe / unsubscribe / list "
        "requests of remote applications; `none` turns it off. Its address is logged "
        "and announced as TXT `management`.",
    ),
    APPLICATION,
)

WRITER_OPTIONS = (
    SESSION,
    Option(
        "publisherUri",
        _bind_uri_option,
        "tcp://host:port; host `*`, port `*` or 0 for any",
        "tcp://*:*",
        "Where each writer task's publisher binds its XPUB. Host `*` means `bindInterface`.",
    ),
    Option(
        "bindInterface",
        text,
        "an IP address, or * for every interface",
        "127.0.0.1",
        "The address a publisher binds to when `publisherUri` says `*`.",
    ),
    DISCOVERY_INTERFACES,
    Option(
        "registeredEvents",
        events_option,
        "comma-separated event names, 32-hex wire ids or high:low ids",
        None,
        "The sessions design's registered events: in the vocabulary from the start, and the only "
        "events rows may carry (others are errors per `mode`).",
    ),
    APPLICATION,
)
