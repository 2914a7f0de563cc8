"""The ebus format's own options, defined once (see ``spark_zmq.options``): the reader's and
the writer's, with the broker's addresses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_zmq.options import Option, Options, boolean, comma_list, port, positive_int, text
from spark_zmq.protocols.ebus import wire
from spark_zmq.security import Curve
from spark_zmq.stream_options import (
    MAX_MESSAGE_BYTES,
    REQUEST_WRITER_OPTIONS,
    SEND_HIGH_WATER_MARK,
    SEND_TIMEOUT,
    WRITER_MAX_MESSAGE_BYTES,
    curve_of,
)


def _channels(value: str) -> tuple[str, ...]:
    return comma_list(value) or ("",)


BROKER = Option("broker", text, "a host name or address", "127.0.0.1", "The EBUS broker's host.")
FRONTEND_PORT = Option(
    "frontendPort",
    port,
    "a port number",
    str(wire.FRONTEND_PORT),
    "The broker's frontend port (clients): asked for SERVICES with `channels=services`, "
    "sent requests with `service`.",
)

FRONTEND_ENDPOINT = Option(
    "frontendEndpoint",
    text,
    "a zmq endpoint such as tcp://host:5000",
    None,
    "The frontend address in full; overrides `broker` and `frontendPort`.",
)

FRONTEND_OPTIONS: tuple[Option[Any], ...] = (
    FRONTEND_PORT,
    FRONTEND_ENDPOINT,
)


SUB_PORT = Option(
    "subPort",
    port,
    "a port number",
    str(wire.SUB_PORT),
    "The broker's sub port (its XPUB), where broadcasts are read.",
)

SUB_ENDPOINT = Option(
    "subEndpoint",
    text,
    "a zmq endpoint such as tcp://host:5003",
    None,
    "The sub address in full; overrides `broker` and `subPort`.",
)

CHANNELS = Option(
    "channels",
    _channels,
    "comma-separated channel prefixes, or services",
    None,
    "Read broadcasts on channels that start with one of these; one partition per "
    "prefix (a channel under two prefixes is read by both). `services`: one channel "
    "per service registered at the broker, following `ebus/workers` announcements. "
    "Default: every channel.",
)

INCLUDE_BROKER_EVENTS = Option(
    "includeBrokerEvents",
    boolean,
    "true or false",
    "false",
    "Also read the broker's own broadcasts: channel `ebus` and every channel under "
    "`ebus/` (`ebus/started`, `ebus/shutdown`, `ebus/workers`).",
)

READER_OPTIONS: tuple[Option[Any], ...] = (
    BROKER,
    SUB_PORT,
    SUB_ENDPOINT,
    *FRONTEND_OPTIONS,
    CHANNELS,
    INCLUDE_BROKER_EVENTS,
)


PUB_PORT = Option(
    "pubPort",
    port,
    "a port number",
    str(wire.PUB_PORT),
    "The broker's pub port (its XSUB), where broadcasts are sent.",
)

PUB_ENDPOINT = Option(
    "pubEndpoint",
    text,
    "a zmq endpoint such as tcp://host:5002",
    None,
    "The pub address in full; overrides `broker` and `pubPort`.",
)

SERVICE = Option(
    "service",
    text,
    "a service name",
    None,
    "Send each row as a request to this service (through the broker's frontend) "
    "instead of broadcasting it; rows need `data` or `payload`, not `channel`.",
)

STALES_MS = Option(
    "stalesMs",
    positive_int,
    "a positive integer (milliseconds)",
    str(wire.DEFAULT_STALES_MS),
    "With `service`: how long a request may wait for its answer; an unanswered "
    "request is resent after a second with the same id, at most 3 times, until then.",
)

WRITER_OPTIONS: tuple[Option[Any], ...] = (
    BROKER,
    PUB_PORT,
    PUB_ENDPOINT,
    SERVICE,
    STALES_MS,
    *FRONTEND_OPTIONS,
    *REQUEST_WRITER_OPTIONS,
)


def _address(options: Options, endpoint: Option[str | None], port: Option[int]) -> str:
    """A broker address: ``endpoint`` in full if given, else ``broker`` and ``port``."""
    return options.get(endpoint) or f"tcp://{options.get(BROKER)}:{options.get(port)}"


@dataclass(frozen=True)
class ReadSettings:
    """An ebus reader's settings, made once per query on the driver (``of``). ``channels``:
    the channel prefixes read, one partition each (``("",)``: every channel;
    ``("services",)``: one per registered service)."""

    sub_address: str
    frontend_address: str
    channels: tuple[str, ...]
    include_broker_events: bool
    max_message_bytes: int
    curve: Curve

    @classmethod
    def of(cls, options: Options) -> ReadSettings:
        channels = options.get(CHANNELS)
        return cls(
            sub_address=_address(options, SUB_ENDPOINT, SUB_PORT),
            frontend_address=_address(options, FRONTEND_ENDPOINT, FRONTEND_PORT),
            channels=channels or ("",),
            include_broker_events=options.get(INCLUDE_BROKER_EVENTS),
            max_message_bytes=options.get(MAX_MESSAGE_BYTES),
            curve=curve_of(options),
        )


@dataclass(frozen=True)
class WriteSettings:
    """An ebus writer's settings (``of``: once per query, on the driver). ``service`` set:
    each row is a request to it through ``frontend_address``; else a broadcast through
    ``pub_address``."""

    service: str | None
    stales_ms: int
    frontend_address: str
    pub_address: str
    max_message_bytes: int
    send_high_water_mark: int
    send_timeout: float | None
    curve: Curve

    @classmethod
    def of(cls, options: Options) -> WriteSettings:
        return cls(
            service=options.get(SERVICE),
            stales_ms=options.get(STALES_MS),
            frontend_address=_address(options, FRONTEND_ENDPOINT, FRONTEND_PORT),
            pub_address=_address(options, PUB_ENDPOINT, PUB_PORT),
            max_message_bytes=options.get(WRITER_MAX_MESSAGE_BYTES),
            send_high_water_mark=options.get(SEND_HIGH_WATER_MARK),
            send_timeout=options.get(SEND_TIMEOUT) or None,
            curve=curve_of(options),
        )
