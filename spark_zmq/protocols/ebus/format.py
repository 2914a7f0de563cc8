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
from spark_zmq.options import (
    Option,
    Options,
    boolean,
    comma_list,
    port,
    positive_int,
    text,
)
from spark_zmq.protocols.base import (
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
    binary_column,
    column_values,
    distinct_rows,
    frame_sizes,
    string_column,
)
from spark_zmq.protocols.ebus.discovery import ServiceChannels
from spark_zmq.protocols.ebus.requests import ServiceRequester
from spark_zmq.protocols.ebus.wire import (
    DEFAULT_STALES_MS,
    FRONTEND_PORT,
    PUB_PORT,
    SUB_PORT,
    PayloadError,
    from_json,
    is_broker_channel,
    pack,
    to_json,
    unpack,
)
from spark_zmq.protocols.xpub import XPubSender
from spark_zmq.security import Curve
from spark_zmq.spool.layout import Source
from spark_zmq.stream_options import REQUEST_WRITER_OPTIONS


def _channels(value: str) -> tuple[str, ...]:
    return comma_list(value) or ("",)


BROKER = Option("broker", text, "a host name or address", "127.0.0.1", "The EBUS broker's host.")
FRONTEND_OPTIONS = (
    Option(
        "frontendPort",
        port,
        "a port number",
        str(FRONTEND_PORT),
        "The broker's frontend port (clients): asked for SERVICES with `channels=services`, "
        "sent requests with `service`.",
    ),
    Option(
        "frontendEndpoint",
        text,
        "a zmq endpoint such as tcp://host:5000",
        None,
        "The frontend address in full; overrides `broker` and `frontendPort`.",
    ),
)


def frontend_address(options: Options) -> str:
    return options["frontendEndpoint"] or f"tcp://{options['broker']}:{options['frontendPort']}"


class EBus(StreamProtocol, SinkProtocol):
    name = "ebus"
    reader_options = (
        BROKER,
        Option(
            "subPort",
            port,
            "a port number",
            str(SUB_PORT),
            "The broker's sub port (its XPUB), where broadcasts are read.",
        ),
        Option(
            "subEndpoint",
            text,
            "a zmq endpoint such as tcp://host:5003",
            None,
            "The sub address in full; overrides `broker` and `subPort`.",
        ),
        *FRONTEND_OPTIONS,
        Option(
            "channels",
            _channels,
            "comma-separated channel prefixes, or services",
            None,
            "Read broadcasts on channels that start with one of these; one partition per "
            "prefix (a channel under two prefixes is read by both). `services`: one channel "
            "per service registered at the broker, following `ebus/workers` announcements. "
            "Default: every channel.",
        ),
        Option(
            "includeBrokerEvents",
            boolean,
            "true or false",
            "false",
            "Also read the broker's own broadcasts: channel `ebus` and every channel under "
            "`ebus/` (`ebus/started`, `ebus/shutdown`, `ebus/workers`).",
        ),
    )
    writer_options = (
        BROKER,
        Option(
            "pubPort",
            port,
            "a port number",
            str(PUB_PORT),
            "The broker's pub port (its XSUB), where broadcasts are sent.",
        ),
        Option(
            "pubEndpoint",
            text,
            "a zmq endpoint such as tcp://host:5002",
            None,
            "The pub address in full; overrides `broker` and `pubPort`.",
        ),
        Option(
            "service",
            text,
            "a service name",
            None,
            "Send each row as a request to this service (through the broker's frontend) "
            "instead of broadcasting it; rows need `data` or `payload`, not `channel`.",
        ),
        Option(
            "stalesMs",
            positive_int,
            "a positive integer (milliseconds)",
            str(DEFAULT_STALES_MS),
            "With `service`: how long a request may wait for its answer; an unanswered "
            "request is resent after a second with the same id, at most 3 times, until then.",
        ),
        *FRONTEND_OPTIONS,
        *REQUEST_WRITER_OPTIONS,
    )
    columns = pa.schema(
        [
            pa.field("channel", pa.string()),
            pa.field("data", pa.string()),
        ]
    )

    def sub_address(self, options: Options) -> str:
        return options["subEndpoint"] or f"tcp://{options['broker']}:{options['subPort']}"

    def discovery(self, options: Options, state: StateStore) -> Discovery:
        address = self.sub_address(options)

        def endpoint_of(prefix: str) -> Endpoint:
            return Endpoint(
                f"{prefix or '*'}@{address.split('://', 1)[-1]}",
                address,
                {"prefix": prefix},
                (prefix.encode("utf-8"),),
            )

        prefixes = options["channels"] or ("",)
        if prefixes == ("services",):
            return ServiceChannels(
                frontend_address(options),
                address,
                endpoint_of,
                Curve.of(options),
                max_bytes=options["maxMessageBytes"],
            )
        return StaticDiscovery([endpoint_of(prefix) for prefix in prefixes])

    def decode(self, frames: pa.ListArray, source: Source, options: Options) -> Decoded:
        channels, data, payloads, errors, keep = [], [], [], [], []
        broker_events = options["includeBrokerEvents"]
        max_bytes = options["maxMessageBytes"]
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

    def check_input(self, schema: pa.Schema, options: Options) -> None:
        names = set(schema.names)
        requests = options["service"] is not None
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

    def open_publisher(self, options: Options) -> SinkPublisher | Requester:
        if options["service"] is not None:
            return ServiceRequester(
                frontend_address(options),
                options["service"],
                options["stalesMs"],
                Curve.of(options),
                max_bytes=options["maxMessageBytes"],
            )
        address = options["pubEndpoint"] or f"tcp://{options['broker']}:{options['pubPort']}"
        return XPubSender(
            address,
            send_hwm=options["sendHighWaterMark"],
            send_timeout=options["sendTimeout"] or None,
            curve=Curve.of(options),
        )

    def encode(self, batch: pa.RecordBatch, options: Options) -> Encoded:
        requests = options["service"] is not None
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

    def encode_columns(self, batch: pa.RecordBatch, options: Options) -> EncodedBatch | None:
        """Broadcasts column-wise (requests go through the EBUS client: None): the rules run
        once per distinct (channel, data, payload given) triple; payloads stay Arrow's."""
        if options["service"] is not None:
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
