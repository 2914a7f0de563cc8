"""The goby format's own options, defined once (see ``spark_zmq.options``): the reader's and
the writer's, both with gobyd's Manager address."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_zmq.options import (
    Option,
    OptionError,
    Options,
    boolean,
    comma_list,
    non_negative_float,
    port,
    positive_float,
    text,
)
from spark_zmq.protocols.goby.manager import (
    DEFAULT_PLATFORM,
    DEFAULT_TCP_PORT,
    DEFAULT_TIMEOUT,
    ManagerAddress,
)
from spark_zmq.protocols.goby.wire import INTERNAL_GROUP_PREFIX, subscription_prefix
from spark_zmq.security import Curve
from spark_zmq.stream_options import SEND_HIGH_WATER_MARK, SEND_TIMEOUT, curve_of

#: the client name of a reader's Manager requests (it runs outside any Spark task)
READER_CLIENT_NAME = "spark_zmq_reader"
#: the client name of a writer when neither clientName nor a Spark application name is known
FALLBACK_CLIENT_NAME = "spark_zmq"


def _seconds_or_unlimited(value: str) -> float | None:
    return non_negative_float(value) or None


def _prefixes(value: str) -> tuple[bytes, ...]:
    prefixes = tuple(subscription_prefix(item) for item in comma_list(value))
    twice = sorted({p for p in prefixes if prefixes.count(p) > 1})
    if twice:
        raise ValueError(f"{twice[0].decode()} given twice")
    return prefixes


PLATFORM = Option(
    "platform",
    text,
    "a Goby platform name",
    DEFAULT_PLATFORM,
    "IPC: gobyd's Manager is at ipc:///tmp/goby_{platform}.manager.",
)

SOCKET_NAME = Option(
    "socketName",
    text,
    "a path",
    None,
    "IPC: gobyd's `socket_name` in full, overriding `platform`: the Manager is at "
    "ipc://{socketName}.manager.",
)

MANAGER_HOST = Option(
    "managerHost",
    text,
    "a host name or address",
    "127.0.0.1",
    "TCP: the host of gobyd's Manager. Setting it or `managerPort` selects TCP (IPC "
    "otherwise, gobyd's default).",
)

MANAGER_PORT = Option(
    "managerPort",
    port,
    "a port number",
    str(DEFAULT_TCP_PORT),
    "TCP: the port of gobyd's Manager (its `tcp_port`).",
)

MANAGER_TIMEOUT = Option(
    "managerTimeout",
    positive_float,
    "a positive number of seconds",
    f"{DEFAULT_TIMEOUT:g}",
    "How long to wait for gobyd's Manager to answer; the query fails after that, naming "
    "the address tried.",
)

CLIENT_NAME = Option(
    "clientName",
    text,
    "a name",
    None,
    "The client name given to gobyd (its `required_client` names for the hold). "
    f"Default: the Spark application name for a writer, `{READER_CLIENT_NAME}` for a "
    "reader.",
)

_MANAGER_OPTIONS: tuple[Option[Any], ...] = (
    PLATFORM,
    SOCKET_NAME,
    MANAGER_HOST,
    MANAGER_PORT,
    MANAGER_TIMEOUT,
    CLIENT_NAME,
)


SUBSCRIBE = Option(
    "subscribe",
    _prefixes,
    "comma-separated identifier prefixes",
    "/",
    "Read messages whose identifier starts with one of these: `/group/`, "
    "`/group/scheme/`, `/group/scheme/type/` and deeper; a missing leading or "
    "trailing `/` is added, so `Foo` never matches `FooBar`; `/` reads everything. "
    "One partition per prefix (a message under two prefixes is read by both).",
)

INCLUDE_INTERNAL_GROUPS = Option(
    "includeInternalGroups",
    boolean,
    "true or false",
    "false",
    f"Also read gobyd's own hold handshake (groups `{INTERNAL_GROUP_PREFIX}...`), "
    "which Goby's own tools hide unless asked to (`include_internal_groups`).",
)

PROTOBUF_DESCRIPTOR_SET = Option(
    "protobufDescriptorSet",
    text,
    "a path to a serialized FileDescriptorSet",
    None,
    "Decode PROTOBUF payloads of the types it holds into the `json` column (build "
    "it with protoc --include_imports --descriptor_set_out); executors read it too.",
)

READER_OPTIONS: tuple[Option[Any], ...] = _MANAGER_OPTIONS + (
    SUBSCRIBE,
    INCLUDE_INTERNAL_GROUPS,
    PROTOBUF_DESCRIPTOR_SET,
)

HOLD_TIMEOUT = Option(
    "holdTimeout",
    _seconds_or_unlimited,
    "a number of seconds (0: no limit)",
    "60",
    "While gobyd holds publications (its required clients are not all ready), a "
    "writer task waits with its rows; after this long the task fails.",
)

WRITER_OPTIONS: tuple[Option[Any], ...] = _MANAGER_OPTIONS + (HOLD_TIMEOUT,)


def manager_address(options: Options) -> ManagerAddress:
    """Where the options say gobyd's Manager is; OptionError for IPC and TCP options mixed."""
    tcp = [option.name for option in (MANAGER_HOST, MANAGER_PORT) if options.is_set(option)]
    ipc = [option.name for option in (PLATFORM, SOCKET_NAME) if options.is_set(option)]
    if tcp and ipc:
        raise OptionError(
            f"goby: options {', '.join(ipc)} (IPC) and {', '.join(tcp)} (TCP) "
            f"select different transports; give one kind"
        )
    if tcp:
        return ManagerAddress.tcp(options.get(MANAGER_HOST), options.get(MANAGER_PORT))
    return ManagerAddress.ipc(options.get(PLATFORM), options.get(SOCKET_NAME))


@dataclass(frozen=True)
class ReadSettings:
    """A goby reader's settings, made once per query on the driver (``of``).
    ``descriptor_set``: the path of option ``protobufDescriptorSet`` (each read task loads
    it; the format checks on the driver that it loads)."""

    manager: ManagerAddress
    client_name: str
    manager_timeout: float
    subscriptions: tuple[bytes, ...]
    include_internal_groups: bool
    descriptor_set: str | None
    curve: Curve

    @classmethod
    def of(cls, options: Options) -> ReadSettings:
        """OptionError for IPC and TCP options mixed (``manager_address``)."""
        return cls(
            manager=manager_address(options),
            client_name=options.get(CLIENT_NAME) or READER_CLIENT_NAME,
            manager_timeout=options.get(MANAGER_TIMEOUT),
            subscriptions=options.get(SUBSCRIBE),
            include_internal_groups=options.get(INCLUDE_INTERNAL_GROUPS),
            descriptor_set=options.get(PROTOBUF_DESCRIPTOR_SET),
            curve=curve_of(options),
        )


@dataclass(frozen=True)
class WriteSettings:
    """A goby writer's settings (``of``: once per query, on the driver). ``client_name``
    None: the Spark application's name, which the writer task looks up."""

    manager: ManagerAddress
    client_name: str | None
    manager_timeout: float
    hold_timeout: float | None
    send_high_water_mark: int
    send_timeout: float | None
    curve: Curve

    @classmethod
    def of(cls, options: Options) -> WriteSettings:
        """OptionError for IPC and TCP options mixed (``manager_address``)."""
        return cls(
            manager=manager_address(options),
            client_name=options.get(CLIENT_NAME),
            manager_timeout=options.get(MANAGER_TIMEOUT),
            hold_timeout=options.get(HOLD_TIMEOUT),
            send_high_water_mark=options.get(SEND_HIGH_WATER_MARK),
            send_timeout=options.get(SEND_TIMEOUT) or None,
            curve=curve_of(options),
        )
