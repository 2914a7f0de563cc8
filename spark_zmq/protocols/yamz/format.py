"""The ``yamz`` format: sockets named by yamz addresses, found through Zyre.

Reading: option ``address`` names concrete addresses and abstract ``yamz://`` ones; discovery
(``discovery.ZyreDiscovery``) resolves the abstract ones to the concrete addresses of matching
ports, each one partition (SUB for PUB/XPUB ports, PULL for PUSH ports). A message keeps all its
frames; ``payload`` is the last one.
Writing: the writer binds an XPUB at a concrete or ephemeral address, announces it in its Zyre
node's ``YAMZ`` tree at ``path`` with the address's query as parameters, and sends each row as
``frames``, or as ``topic`` + ``payload``.
"""

from __future__ import annotations

import json
import re
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zmq

from spark_zmq.options import Option, OptionError, Options, comma_list, port, text
from spark_zmq.protocols.base import (
    Decoded,
    Discovery,
    Encoded,
    EncodedBatch,
    Endpoint,
    SinkProtocol,
    SinkPublisher,
    StateStore,
    StreamProtocol,
    as_binary,
    binary_column,
    column_values,
    raw_column,
)
from spark_zmq.protocols.yamz.discovery import ZyreDiscovery
from spark_zmq.protocols.yamz.publisher import YamzPublisher
from spark_zmq.protocols.yamz.tree import Port
from spark_zmq.protocols.yamz.uri import Address, AddressError, Category, for_bind, for_connect
from spark_zmq.protocols.yamz.zyre import DEFAULT_BEACON_PORT
from spark_zmq.security import Curve
from spark_zmq.spool.layout import Source

#: addresses in option ``address`` are separated by commas or blanks before the next scheme
#: (a regex in a query may hold a comma, as in ``{1,2}``)
_ADDRESS_SEPARATOR = re.compile(r"[\s,]+(?=[A-Za-z][A-Za-z0-9+.-]*://)")
DEFAULT_WRITER_ADDRESS = "tcp://*:*"
DEFAULT_PATH = "spark/out"


def _connect_addresses(value: str) -> tuple[Address, ...]:
    items = [item for item in _ADDRESS_SEPARATOR.split(value.strip()) if item]
    if not items:
        raise ValueError("no address")
    return tuple(for_connect(item.rstrip(",")) for item in items)


def _bind_address(value: str) -> Address:
    return for_bind(value.strip())


def _path(value: str) -> tuple[str, ...]:
    elements = tuple(value.strip().strip("/").split("/"))
    if any(not element or element == "*" for element in elements):
        raise ValueError("empty element or '*'")
    return elements


def _node_names(value: str) -> frozenset[str]:
    return frozenset(comma_list(value))


def unique_node_name(role: str) -> str:
    return f"spark-{role}-{uuid.uuid4().hex[:8]}"


_ZYRE_OPTIONS = (
    Option(
        "beaconPort",
        port,
        "a port number",
        str(DEFAULT_BEACON_PORT),
        "The UDP port of Zyre beacons: nodes find each other only on the same port.",
    ),
)


class Yamz(StreamProtocol, SinkProtocol):
    name = "yamz"
    reader_options = _ZYRE_OPTIONS + (
        Option(
            "address",
            _connect_addresses,
            "yamz addresses, separated by commas or blanks",
            None,
            "Required. What to read: abstract addresses such as "
            "`yamz://*/tps?det=tpc&apa=4[12]` (node and path elements may be `*`, which "
            "matches one element; query values are regexes that must fully match the port's "
            "parameter), resolved through Zyre to every matching port as peers come and go, "
            "and concrete ones such as `tcp://host:port` (read with a SUB).",
        ),
        Option(
            "node",
            text,
            "a Zyre node name",
            None,
            "The reader's own Zyre node name. Default: a unique `spark-reader-...`.",
        ),
        Option(
            "expectedNodes",
            _node_names,
            "comma-separated node names",
            None,
            "Restrict `*` as a node to these nodes (a node named outright still matches).",
        ),
        Option(
            "subscribe",
            comma_list,
            "comma-separated topic prefixes",
            None,
            "Subscriptions of the SUB sockets (on PUB and XPUB ports). Default: everything.",
        ),
    )
    writer_options = _ZYRE_OPTIONS + (
        Option(
            "address",
            _bind_address,
            "a concrete or ephemeral address with attributes",
            DEFAULT_WRITER_ADDRESS,
            "Where the writer binds its socket, such as `tcp://*:*?det=tpc&apa=42`; `*` "
            "picks any interface or port. The query's key=value pairs are announced as the "
            "port's parameters, for abstract addresses to match.",
        ),
        Option(
            "path",
            _path,
            "a path such as spark/out",
            DEFAULT_PATH,
            "Where the port sits in the node's YAMZ tree: `yamz://NODE/spark/out` finds it.",
        ),
        Option(
            "node",
            text,
            "a Zyre node name",
            None,
            "The writer's Zyre node name (each Python worker runs a node of this name). "
            "Default: a unique `spark-writer-...` per Python worker.",
        ),
    )
    columns = pa.schema(
        [
            pa.field("node", pa.string()),
            pa.field("path", pa.string()),
            pa.field("address", pa.string()),
            pa.field("params", pa.map_(pa.string(), pa.string())),
            pa.field("frames", pa.list_(pa.binary())),
        ]
    )

    # -- reading -------------------------------------------------------------------------------

    def check_options(self, options: Options) -> None:
        if options["address"] is None:
            raise OptionError(
                "yamz: option 'address' is required: the yamz:// or concrete "
                "addresses to read, such as yamz://*/spark/out"
            )

    def discovery(self, options: Options, state: StateStore) -> Discovery:
        self.check_options(options)
        prefixes = tuple(p.encode() for p in options["subscribe"] or ("",))

        def endpoint_of(address: str, found: Port | None, socket_type: int) -> Endpoint:
            metadata = {"address": address}
            if found is not None:
                metadata.update(
                    node=found.node, path=found.path_text, params=json.dumps(found.shown_params())
                )
            return Endpoint(
                address, address, metadata, prefixes if socket_type == zmq.SUB else (), socket_type
            )

        return ZyreDiscovery(
            options["node"] or unique_node_name("reader"),
            options["beaconPort"],
            options["address"],
            options["expectedNodes"],
            endpoint_of,
        )

    def decode(self, frames: pa.ListArray, source: Source, options: Options) -> Decoded:
        n = len(frames)
        metadata = source.metadata
        params = json.loads(metadata["params"]) if "params" in metadata else None
        payloads = [message[-1] if message else None for message in frames.to_pylist()]
        columns = {
            "node": pa.repeat(pa.scalar(metadata.get("node"), pa.string()), n),
            "path": pa.repeat(pa.scalar(metadata.get("path"), pa.string()), n),
            "address": pa.repeat(pa.scalar(metadata.get("address"), pa.string()), n),
            "params": pa.array([params] * n, self.columns.field("params").type),
            "frames": frames.cast(pa.list_(pa.binary())),
        }
        return Decoded(pa.array(payloads, pa.binary()), pa.nulls(n, pa.string()), columns)

    # -- writing -------------------------------------------------------------------------------

    def check_input(self, schema: pa.Schema, options: Options) -> None:
        names = set(schema.names)
        if not names & {"frames", "payload"}:
            raise ValueError(
                f"yamz writer: the rows need a column `frames` (array of binary) "
                f"or `payload` (with an optional `topic`); they have "
                f"{', '.join(schema.names)}"
            )
        if "frames" in names:
            kind = schema.field("frames").type
            if not (pa.types.is_list(kind) and _bytes_or_text(kind.value_type)):
                raise ValueError(
                    f"yamz writer: column `frames` has type {kind}; it must be an "
                    f"array of binary or string"
                )
        for column in ("topic", "payload"):
            if column in names and not _bytes_or_text(schema.field(column).type):
                raise ValueError(
                    f"yamz writer: column `{column}` has type "
                    f"{schema.field(column).type}; it must be binary or string"
                )

    def open_publisher(self, options: Options) -> SinkPublisher:
        address: Address = options["address"]
        if address.category is Category.ABSTRACT:  # parsed by for_bind: cannot happen
            raise AddressError(f"cannot bind {address.text}")
        return YamzPublisher(
            options["node"] or unique_node_name("writer"),
            address,
            options["path"],
            options["beaconPort"],
            send_hwm=options["sendHighWaterMark"],
            send_timeout=options["sendTimeout"] or None,
            curve=Curve.of(options),
        )

    def encode(self, batch: pa.RecordBatch, options: Options) -> Encoded:
        encoded = Encoded()
        for frames, topic, payload in zip(
            *(column_values(batch, name) for name in ("frames", "topic", "payload"))
        ):
            message = _message(frames, topic, payload)
            if isinstance(message, str):
                encoded.add_error(message)
            else:
                encoded.add_message(message, message[0])
        return encoded

    def encode_columns(self, batch: pa.RecordBatch, options: Options) -> EncodedBatch:
        """``encode``'s messages column-wise: the lists of ``frames`` become one column per
        frame position, ``topic`` and ``payload`` the first two; no per-row Python."""
        n = batch.num_rows
        listed, empty_or_null, given = _frame_columns(raw_column(batch, "frames"))
        topic, payload = binary_column(batch, "topic"), binary_column(batch, "payload")
        has_topic = topic.is_valid().to_numpy(zero_copy_only=False)
        has_payload = payload.is_valid().to_numpy(zero_copy_only=False)
        no_message = ~given & ~has_payload
        bad_list = given & empty_or_null
        both = given & (has_topic | has_payload)
        errors = np.full(n, None, object)  # the rules in _message, the first one last
        errors[no_message] = "no message: `frames` and `payload` are null"
        errors[bad_list] = "`frames` is empty or holds a null frame"
        errors[both] = "give either `frames` or `topic`/`payload`, not both"
        unsent = pa.array(no_message | bad_list | both)
        nothing = pa.scalar(None, pa.binary())
        with_topic = pa.array(has_topic)
        first = pc.if_else(with_topic, topic, payload)
        second = pc.if_else(with_topic, payload, nothing)
        width = max(len(listed), 2)
        frames = []
        for position in range(width):
            from_list = listed[position] if position < len(listed) else pa.nulls(n, pa.binary())
            own = (first, second)[position] if position < 2 else pa.nulls(n, pa.binary())
            frames.append(pc.if_else(pa.array(given), from_list, own))
        frames[0] = pc.if_else(unsent, nothing, frames[0])
        return EncodedBatch(frames, pa.array(errors, pa.string()), frames[0])


def _frame_columns(frames: pa.Array) -> tuple[list[pa.Array], np.ndarray, np.ndarray]:
    """The ``frames`` column as one ``binary`` column per frame position (a row is null where
    its list ends), and per row whether its list is empty or holds a null frame, and whether
    it is given at all."""
    if not pa.types.is_list(frames.type):  # a null column, or a large list
        frames = frames.cast(pa.list_(pa.binary()))
    n = len(frames)
    given = frames.is_valid().to_numpy(zero_copy_only=False)
    lengths = pc.fill_null(pc.list_value_length(frames), 0).to_numpy(zero_copy_only=False)
    values = as_binary(frames.flatten())
    null_values = values.is_null().to_numpy(zero_copy_only=False)
    parents = pc.list_parent_indices(frames).to_numpy(zero_copy_only=False)
    holds_null = np.bincount(parents[null_values], minlength=n)[:n] > 0
    empty_or_null = given & ((lengths == 0) | holds_null)
    offsets = frames.offsets.to_numpy(zero_copy_only=False)
    starts = offsets[:-1] - offsets[0]
    columns = []
    for position in range(int(lengths.max()) if n else 0):
        present = given & (lengths > position)
        indices = pa.array(np.where(present, starts + position, 0), mask=~present)
        columns.append(values.take(indices))
    return columns, empty_or_null, given


def _bytes_or_text(kind: pa.DataType) -> bool:
    return pa.types.is_binary(kind) or pa.types.is_string(kind)


def _as_bytes(value: bytes | str) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value


def _message(frames, topic, payload) -> list[bytes] | str:
    """A row's frames, or why it has none."""
    if frames is not None:
        if topic is not None or payload is not None:
            return "give either `frames` or `topic`/`payload`, not both"
        if not frames or any(frame is None for frame in frames):
            return "`frames` is empty or holds a null frame"
        return [_as_bytes(frame) for frame in frames]
    if payload is None:
        return "no message: `frames` and `payload` are null"
    return [_as_bytes(payload)] if topic is None else [_as_bytes(topic), _as_bytes(payload)]
