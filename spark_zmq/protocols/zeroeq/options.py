"""The zeroeq format's own options, defined once (see ``spark_zmq.options``): the reader's and
the writer's, and the parsers only they use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_zmq.options import Option, OptionError, Options, boolean, comma_list, text
from spark_zmq.protocols.zeroeq.wire import (
    default_session,
    events_option,
    parse_event,
    publisher_addresses,
)
from spark_zmq.security import Curve
from spark_zmq.stream_options import SEND_HIGH_WATER_MARK, SEND_TIMEOUT, curve_of


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
    "Where ZeroConf browses (reader; default: all interfaces) and announces (reader and "
    "writer; writer's default: the interface of `bindInterface`, or all interfaces when that "
    "is `*`). Each interface gets a record of its own that names addresses of that interface "
    "only (loopback's names the first other interface's, which this host reaches); a reader's "
    "vocabulary server listens on the address of each interface it announces on.",
)
APPLICATION = Option(
    "application",
    text,
    "a name",
    "spark_zmq",
    "The application name in this side's ZeroConf record.",
)


PUBLISHERS = Option(
    "publishers",
    publisher_addresses,
    "comma-separated host:port or tcp://host:port",
    None,
    "Read these publishers instead of discovering them (no ZeroConf).",
)

EVENTS = Option(
    "events",
    events_option,
    "comma-separated event names, 32-hex wire ids or high:low ids",
    None,
    "Subscribe to these events only. Default: every event. The `event` column "
    "shows names given here or learned from publishers' vocabularies.",
)

COMPATIBLE_ONLY = Option(
    "compatibleOnly",
    boolean,
    "true or false",
    "false",
    "Read only publishers whose vocabulary shares an event with `events` (the "
    "sessions design's compatible events). Needs `events`.",
)

MANAGEMENT_URI = Option(
    "managementUri",
    _management_option,
    "a zmq endpoint such as tcp://127.0.0.1:* or ipc://path, or none",
    "tcp://127.0.0.1:*",
    "Where the management port (REP) listens for subscribe / unsubscribe / list "
    "requests of remote applications; `none` turns it off. Its address is logged "
    "and announced as TXT `management` on the interfaces that reach it: a loopback "
    "address (the default) on loopback only; `tcp://*:*` on every interface of "
    "`discoveryInterfaces`, at each one's address.",
)

READER_OPTIONS: tuple[Option[Any], ...] = (
    SESSION,
    PUBLISHERS,
    EVENTS,
    COMPATIBLE_ONLY,
    DISCOVERY_INTERFACES,
    MANAGEMENT_URI,
    APPLICATION,
)

PUBLISHER_URI = Option(
    "publisherUri",
    _bind_uri_option,
    "tcp://host:port; host `*`, port `*` or 0 for any",
    "tcp://*:*",
    "Where each writer task's publisher binds its XPUB. Host `*` means `bindInterface`.",
)

BIND_INTERFACE = Option(
    "bindInterface",
    text,
    "an IP address, or * for every interface",
    "127.0.0.1",
    "The address a publisher binds to when `publisherUri` says `*`. `*` binds every "
    "interface; the publisher is then announced on each interface of "
    "`discoveryInterfaces` as `<that interface's address>:PORT`.",
)

REGISTERED_EVENTS = Option(
    "registeredEvents",
    events_option,
    "comma-separated event names, 32-hex wire ids or high:low ids",
    None,
    "The sessions design's registered events: in the vocabulary from the start, and the only "
    "events rows may carry (others are errors per `mode`).",
)

WRITER_OPTIONS: tuple[Option[Any], ...] = (
    SESSION,
    PUBLISHER_URI,
    BIND_INTERFACE,
    DISCOVERY_INTERFACES,
    REGISTERED_EVENTS,
    APPLICATION,
)


def _session(options: Options) -> str:
    """Option ``session``, else the environment's (``default_session``)."""
    session = options.get(SESSION)
    return default_session() if session is None else session


@dataclass(frozen=True)
class ReadSettings:
    """A zeroeq reader's settings, made once per query on the driver (``of``) and pickled to
    the read tasks. ``events`` maps wire ids to names (None: given as an id); empty: every
    event."""

    session: str
    events: Mapping[bytes, str | None]
    interfaces: tuple[str, ...] | None
    publishers: tuple[tuple[str, int], ...]
    compatible_only: bool
    management_uri: str | None
    application: str
    curve: Curve

    @classmethod
    def of(cls, options: Options) -> ReadSettings:
        """OptionError for values wrong together (``compatibleOnly`` without ``events``)."""
        if options.get(COMPATIBLE_ONLY) and not options.get(EVENTS):
            raise OptionError(
                "zeroeq: option 'compatibleOnly' needs option 'events' (the events "
                "a publisher's vocabulary is compared with)"
            )
        publishers = options.get(PUBLISHERS)
        return cls(
            session=_session(options),
            events=_events_map(options.get(EVENTS)),
            interfaces=options.get(DISCOVERY_INTERFACES),
            publishers=publishers or (),
            compatible_only=options.get(COMPATIBLE_ONLY),
            management_uri=options.get(MANAGEMENT_URI),
            application=options.get(APPLICATION),
            curve=curve_of(options),
        )

    def event_names(self) -> dict[str, str]:
        """The names of the events given by name, by their wire id in hex."""
        return {wire.hex(): name for wire, name in self.events.items() if name is not None}


@dataclass(frozen=True)
class WriteSettings:
    """A zeroeq writer's settings (``of``: once per query, on the driver). ``host`` is where
    the publisher binds (``bindInterface`` when ``publisherUri`` says ``*``), ``port`` 0: any;
    ``registered``: the ids a publisher may send, or None: any."""

    session: str
    host: str
    port: int
    interfaces: tuple[str, ...] | None
    application: str
    registered_events: Mapping[bytes, str | None]
    send_high_water_mark: int
    send_timeout: float | None
    curve: Curve

    @classmethod
    def of(cls, options: Options) -> WriteSettings:
        host, port = options.get(PUBLISHER_URI)
        if host in ("", "*"):
            host = options.get(BIND_INTERFACE)
        interfaces = options.get(DISCOVERY_INTERFACES)
        if not options.is_set(DISCOVERY_INTERFACES) and host not in ("*", "0.0.0.0"):
            interfaces = (host,)
        return cls(
            session=_session(options),
            host=host,
            port=port,
            interfaces=interfaces,
            application=options.get(APPLICATION),
            registered_events=_events_map(options.get(REGISTERED_EVENTS)),
            send_high_water_mark=options.get(SEND_HIGH_WATER_MARK),
            send_timeout=options.get(SEND_TIMEOUT) or None,
            curve=curve_of(options),
        )

    @property
    def registered(self) -> frozenset[bytes] | None:
        return frozenset(self.registered_events) if self.registered_events else None
