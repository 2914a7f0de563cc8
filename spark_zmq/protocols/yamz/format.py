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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zmq

from spark_zmq.options import Options
from spark_zmq.protocols.arrow import as_binary, binary_column, column_values, raw_column
from spark_zmq.protocols.contract import (
    Decoded,
    Discovery,
    Encoded,
    EncodedBatch,
    Endpoint,
    SinkProtocol,
    SinkPublisher,
    StateStore,
    StreamProtocol,
)
from spark_zmq.protocols.yamz.discovery import ZyreDiscovery
from spark_zmq.protocols.yamz.options import (
    READER_OPTIONS,
    WRITER_OPTIONS,
    ReadSettings,
    WriteSettings,
    unique_node_name,
)
from spark_zmq.protocols.yamz.publisher import YamzPublisher
from spark_zmq.protocols.yamz.wire import AddressError, Category, Port
from spark_zmq.spool.index import Source


class Yamz(StreamProtocol[ReadSettings], SinkProtocol[WriteSettings]):
    name = "yamz"
    reader_options = READER_OPTIONS
    writer_options = WRITER_OPTIONS
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

    def read_settings(self, options: Options) -> ReadSettings:
        return ReadSettings.of(options)

    def discovery(self, settings: ReadSettings, state: StateStore) -> Discovery:
        prefixes = settings.subscriptions

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
            settings.node or unique_node_name("reader"),
            settings.beacon_port,
            settings.addresses,
            settings.expected_nodes,
            endpoint_of,
        )

    def decode(self, frames: pa.ListArray, source: Source, settings: ReadSettings) -> Decoded:
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

    def write_settings(self, options: Options) -> WriteSettings:
        return WriteSettings.of(options)

    def check_input(self, schema: pa.Schema, settings: WriteSettings) -> None:
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

    def open_publisher(
        self, settings: WriteSettings, application: str | None = None
    ) -> SinkPublisher:
        address = settings.address
        if address.category is Category.ABSTRACT:  # parsed by for_bind: cannot happen
            raise AddressError(f"cannot bind {address.text}")
        return YamzPublisher(
            settings.node or unique_node_name("writer"),
            address,
            settings.path,
            settings.beacon_port,
            send_hwm=settings.send_high_water_mark,
            send_timeout=settings.send_timeout,
            curve=settings.curve,
        )

    def encode(self, batch: pa.RecordBatch, settings: WriteSettings) -> Encoded:
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

    def encode_columns(self, batch: pa.RecordBatch, settings: WriteSettings) -> EncodedBatch:
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


def _message(
    frames: list[bytes | str | None] | None, topic: bytes | str | None, payload: bytes | str | None
) -> list[bytes] | str:
    """A row's frames, or why it has none."""
    if frames is not None:
        if topic is not None or payload is not None:
            return "give either `frames` or `topic`/`payload`, not both"
        if not frames or any(frame is None for frame in frames):
            return "`frames` is empty or holds a null frame"
        return [_as_bytes(frame) for frame in frames if frame is not None]
    if payload is None:
        return "no message: `frames` and `payload` are null"
    return [_as_bytes(payload)] if topic is None else [_as_bytes(topic), _as_bytes(payload)]
