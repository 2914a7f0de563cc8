"""The ``ebus`` format: broadcasts on channel prefixes, through an EBUS broker.

Reading: each channel prefix of option ``channels`` is one partition with its own SUB socket on
the broker's sub port, subscribed to that prefix (zmq prefix semantics, as EBUS's). Decoding
unpacks each payload (zlib + BSON ``{l: value}``, or the literal ``null``) into JSON text.
Writing: rows ``channel`` + ``data`` (JSON text, packed here) or ``payload`` (packed already),
sent through an XPUB connected to the broker's pub port. With option ``service``, each row's
``data`` or ``payload`` is a request to that service instead (``requests``).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from spark_zmq.errors import shown
from spark_zmq.options import Options
from spark_zmq.protocols.arrow import (
    binary_column,
    column_values,
    distinct_rows,
    frame_sizes,
    string_column,
)
from spark_zmq.protocols.contract import (
    Decoded,
    Discovery,
    Encoded,
    EncodedBatch,
    Endpoint,
    Requester,
    SinkProtocol,
    SinkPublisher,
    StateStore,
    StaticDiscovery,
    StreamProtocol,
)
from spark_zmq.protocols.ebus import publisher
from spark_zmq.protocols.ebus.discovery import ServiceChannels
from spark_zmq.protocols.ebus.options import (
    READER_OPTIONS,
    WRITER_OPTIONS,
    ReadSettings,
    WriteSettings,
)
from spark_zmq.protocols.ebus.wire import (
    PayloadError,
    from_json,
    is_broker_channel,
    pack,
    to_json,
    unpack,
)
from spark_zmq.spool.index import Source


class EBus(StreamProtocol[ReadSettings], SinkProtocol[WriteSettings]):
    name = "ebus"
    reader_options = READER_OPTIONS
    writer_options = WRITER_OPTIONS
    columns = pa.schema(
        [
            pa.field("channel", pa.string()),
            pa.field("data", pa.string()),
        ]
    )

    def read_settings(self, options: Options) -> ReadSettings:
        return ReadSettings.of(options)

    def discovery(self, settings: ReadSettings, state: StateStore) -> Discovery:
        address = settings.sub_address

        def endpoint_of(prefix: str) -> Endpoint:
            return Endpoint(
                f"{prefix or '*'}@{address.split('://', 1)[-1]}",
                address,
                {"prefix": prefix},
                (prefix.encode("utf-8"),),
            )

        prefixes = settings.channels
        if prefixes == ("services",):
            return ServiceChannels(
                settings.frontend_address,
                address,
                endpoint_of,
                settings.curve,
                max_bytes=settings.max_message_bytes,
            )
        return StaticDiscovery([endpoint_of(prefix) for prefix in prefixes])

    def decode(self, frames: pa.ListArray, source: Source, settings: ReadSettings) -> Decoded:
        channels, data, payloads, errors, keep = [], [], [], [], []
        broker_events = settings.include_broker_events
        max_bytes = settings.max_message_bytes
        for message in frames.to_pylist():
            channel, value, payload, error = _decode_message(message, max_bytes)
            channels.append(channel)
            data.append(value)
            payloads.append(payload)
            errors.append(error)
            keep.append(broker_events or not is_broker_channel(channel))
        return Decoded(
            pa.array(payloads, pa.binary()),
            pa.array(errors, pa.string()),
            {"channel": pa.array(channels, pa.string()), "data": pa.array(data, pa.string())},
            None if all(keep) else pa.array(keep, pa.bool_()),
        )

    # -- writing -------------------------------------------------------------------------------

    def write_settings(self, options: Options) -> WriteSettings:
        return WriteSettings.of(options)

    def check_input(self, schema: pa.Schema, settings: WriteSettings) -> None:
        names = set(schema.names)
        requests = settings.service is not None
        if not requests and (
            "channel" not in names or not pa.types.is_string(schema.field("channel").type)
        ):
            raise ValueError(
                f"ebus writer: the rows need a string column `channel` (or option "
                f"`service`, to send requests); they have {', '.join(schema.names)}"
            )
        if not names & {"data", "payload"}:
            what = "request" if requests else "broadcast"
            raise ValueError(
                f"ebus writer: the rows need a column `data` (JSON text) or "
                f"`payload` (packed bytes) to {what}; they have "
                f"{', '.join(schema.names)}"
            )
        for column, check in (("data", pa.types.is_string), ("payload", pa.types.is_binary)):
            if column in names and not check(schema.field(column).type):
                raise ValueError(
                    f"ebus writer: column `{column}` has type {schema.field(column).type}"
                )

    def open_publisher(
        self, settings: WriteSettings, application: str | None = None
    ) -> SinkPublisher | Requester:
        return publisher.open_publisher(settings)

    def encode(self, batch: pa.RecordBatch, settings: WriteSettings) -> Encoded:
        requests = settings.service is not None
        channels = column_values(batch, "channel")
        data = column_values(batch, "data")
        payloads = column_values(batch, "payload")
        encoded = Encoded()
        for channel, text_value, payload in zip(channels, data, payloads):
            if requests:
                frames, error = _request(text_value, payload)
            else:
                frames, error = _broadcast(channel, text_value, payload)
            if frames is None:
                encoded.add_error(error or "nothing to send")
            else:
                encoded.add_message(frames, frames[0])
        return encoded

    def encode_columns(self, batch: pa.RecordBatch, settings: WriteSettings) -> EncodedBatch | None:
        """Broadcasts column-wise (requests go through the EBUS client: None): the rules run
        once per distinct (channel, data, payload given) triple; payloads stay Arrow's."""
        if settings.service is not None:
            return None
        payload = binary_column(batch, "payload")
        has_payload = pc.is_valid(payload)
        rows, triples = distinct_rows(
            string_column(batch, "channel"), string_column(batch, "data"), has_payload
        )
        parts = [_broadcast_parts(*triple) for triple in triples]
        of_row = pa.array(rows)
        channel = pa.array([p[0] if isinstance(p, tuple) else None for p in parts], pa.binary())
        packed = pa.array([p[1] if isinstance(p, tuple) else None for p in parts], pa.binary())
        errors = pa.array([p if isinstance(p, str) else None for p in parts], pa.string())
        channel, packed, errors = channel.take(of_row), packed.take(of_row), errors.take(of_row)
        body = pc.if_else(has_payload, payload, packed)
        return EncodedBatch([channel, body], errors, channel)


def _decode_message(
    frames: list[bytes], max_bytes: int
) -> tuple[str | None, str | None, bytes, str | None]:
    """(channel, data as JSON text, raw payload, error) of one captured broadcast, whose data
    may inflate to ``max_bytes`` (maxMessageBytes) at most."""
    if len(frames) != 2:
        return (
            None,
            None,
            b"".join(frames),
            f"malformed EBUS broadcast: {frame_sizes([len(f) for f in frames])}; expected "
            f"[channel, packed data]. payload holds the frames concatenated",
        )
    channel_bytes, payload = frames
    try:
        channel = channel_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return None, None, payload, "malformed EBUS broadcast: the channel is not UTF-8"
    try:
        return channel, to_json(unpack(payload, max_bytes)), payload, None
    except PayloadError as exc:
        return channel, None, payload, f"malformed EBUS payload on channel {shown(channel)}: {exc}"


def _broadcast(
    channel: str | None, data: str | None, payload: bytes | None
) -> tuple[list[bytes] | None, str | None]:
    """The two frames of a row's broadcast, or why there are none."""
    parts = _broadcast_parts(channel, data, payload is not None)
    if isinstance(parts, str):
        return None, parts
    head, packed = parts
    return [head, _body(packed, payload)], None


def _broadcast_parts(
    channel: str | None, data: str | None, has_payload: bool
) -> tuple[bytes, bytes | None] | str:
    """A broadcast's channel frame and its data packed (None: the row's payload as it is),
    or why there is no broadcast (text): all that depends on a row but its payload's bytes."""
    if not channel:
        return "no channel: `channel` is null or empty"
    packed, error = _packed(data, has_payload)
    return error if error else (channel.encode("utf-8"), packed)


def _request(data: str | None, payload: bytes | None) -> tuple[list[bytes] | None, str | None]:
    """The one frame (packed data) of a row's request, or why there is none."""
    packed, error = _packed(data, payload is not None)
    return (None, error) if error else ([_body(packed, payload)], None)


def _body(packed: bytes | None, payload: bytes | None) -> bytes:
    """The packed data frame: ``data`` packed, else the row's payload as given."""
    if packed is not None:
        return packed
    assert payload is not None  # _packed packs data unless the row has a payload
    return payload


def _packed(data: str | None, has_payload: bool) -> tuple[bytes | None, str | None]:
    """A row's ``data`` (JSON text) packed, or None when the row's ``payload`` is sent as it
    is; or why there is neither."""
    if has_payload and data is not None:
        return None, "both `data` and `payload` are set; give one"
    if has_payload:
        return None, None
    try:
        value = None if data is None else from_json(data)
    except ValueError as exc:
        return None, f"`data` is not JSON text: {exc}"
    try:
        return pack(value), None
    except Exception as exc:  # bson's InvalidDocument, OverflowError, ...
        return None, f"`data` cannot be packed as BSON: {exc}"
