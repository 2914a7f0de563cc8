"""The goby format's own options, defined once (see ``spark_zmq.options``): the reader's and
the writer's, both with gobyd's Manager address."""

from __future__ import annotations

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


_MANAGER_OPTIONS = (
    Option(
        "platform",
        text,
        "a Goby platform name",
        DEFAULT_PLATFORM,
        "IPC: gobyd's Manager is at ipc:///tmp/goby_{platform}.manager.",
    ),
    Option(
        "socketName",
        text,
        "a path",
        None,
        "IPC: gobyd's `socket_name` in full, overriding `platform`: the Manager is at "
        "ipc://{socketName}.manager.",
    ),
    Option(
        "managerHost",
        text,
        "a host name or address",
        "127.0.0.1",
        "TCP: the host of gobyd's Manager. Setting it or `managerPort` selects TCP (IPC "
        "otherwise, gobyd's default).",
    ),
    Option(
        "managerPort",
        port,
        "a port number",
        str(DEFAULT_TCP_PORT),
        "TCP: the port of gobyd's Manager (its `tcp_port`).",
    ),
    Option(
        "managerTimeout",
        positive_float,
        "a positive number of seconds",
        f"{DEFAULT_TIMEOUT:g}",
        "How long to wait for gobyd's Manager to answer; the query fails after that, naming "
        "the address tried.",
    ),
    Option(
        "clientName",
        text,
        "a name",
        None,
        "The client name given to gobyd (its `required_client` names for the hold). "
        f"Default: the Spark application name for a writer, `{READER_CLIENT_NAME}` for a "
        "reader.",
    ),
)


def manager_address(options: Options) -> ManagerAddress:
    """Where the options say gobyd's Manager is; OptionError for IPC and TCP options mixed."""
    tcp = [name for name in ("managerHost", "managerPort") if options.is_set(name)]
    ipc = [name for name in ("platform", "socketName") if options.is_set(name)]
    if tcp and ipc:
        raise OptionError(
            f"goby: options {', '.join(ipc)} (IPC) and {', '.join(tcp)} (TCP) "
            f"select different transports; give one kind"
        )
    if tcp:
        return ManagerAddress.tcp(options["managerHost"], options["managerPort"])
    return ManagerAddress.ipc(options["platform"], options["socketName"])


def spark_application_name() -> str:
    """The Spark application's name, as a writer task sees it (a local property of its job)."""
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        name = context.getLocalProperty("spark.app.name") if context is not None else None
    except Exception:  # outside Spark
        name = None
    return name or FALLBACK_CLIENT_NAME


READER_OPTIONS = _MANAGER_OPTIONS + (
    Option(
        "subscribe",
        _prefixes,
        "comma-separated identifier prefixes",
        "/",
        "Read messages whose identifier starts with one of these: `/group/`, "
        "`/group/scheme/`, `/group/scheme/type/` and deeper; a missing leading or "
        "trailing `/` is added, so `Foo` never matches `FooBar`; `/` reads everything. "
        "One partition per prefix (a message under two prefixes is read by both).",
    ),
    Option(
        "includeInternalGroups",
        boolean,
        "true or false",
        "false",
        f"Also read gobyd's own hold handshake (groups `{INTERNAL_GROUP_PREFIX}...`), "
        "which Goby's own tools hide unless asked to (`include_internal_groups`).",
    ),
    Option(
        "protobufDescriptorSet",
        text,
        "a path to a serialized FileDescriptorSet",
        None,
        "Decode PROTOBUF payloads of the types it holds into the `json` column (build "
        "it with protoc --include_imports --descriptor_set_out); executors read it too.",
    ),
)

WRITER_OPTIONS = _MANAGER_OPTIONS + (
    Option(
        "holdTimeout",
        _seconds_or_unlimited,
        "a number of seconds (0: no limit)",
        "60",
        "While gobyd holds publications (its required clients are not all ready), a "
        "writer task waits with its rows; after this long the task fails.",
    ),
)
