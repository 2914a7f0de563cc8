"""The ``ebus`` format: broadcasts on channel prefixes, through an EBUS broker.

Reading: each channel prefix of option ``channels`` is one partition with its own SUB socket on
the broker's sub port, subscribed to that prefix (zmq prefix semantics, as EBUS's). Decoding
unpacks each payload (zlib + BSON ``{l: value}``, or the literal ``null``) into JSON text.
Writing: rows ``channel`` + ``data`` (JSON text, packed here) or ``payload`` (packed already),
sent through an XPUB connected to the broker's pub port.
"""

from __future__ import annotations

import pyarrow as pa

from ...options import Option, Options, boolean, comma_list, positive_int, text
from ...spool import Source
from ..base import (Decoded, Discovery, Encoded, Endpoint, SinkProtocol, SinkPublisher,
                    StateStore, StaticDiscovery, StreamProtocol, column_values)
from ..xpub import ConnectedXPub
from .discovery import ServiceChannels
from .wire import (BROKER_CHANNEL, FRONTEND_PORT, PUB_PORT, SUB_PORT, PayloadError, from_json,
                   pack, to_json, unpack)


def _port(value: str) -> int:
    port = positive_int(value)
    if port > 65535:
        raise ValueError("not a port")
    return port


def _channels(value: str) -> tuple[str, ...]:
    return comma_list(value) or ("",)


BROKER = Option("broker", text, "a host name or address", "127.0.0.1", "The EBUS broker's host.")


class EBus(StreamProtocol, SinkProtocol):
    name = "ebus"
    reader_options = (
        BROKER,
        Option("subPort", _port, "a port number", str(SUB_PORT),
               "The broker's sub port (its XPUB), where broadcasts are read."),
        Option("subEndpoint", text, "a zmq endpoint such as tcp://host:5003", None,
               "The sub address in full; overrides `broker` and `subPort`."),
        Option("frontendPort", _port, "a port number", str(FRONTEND_PORT),
               "The broker's frontend port, asked for SERVICES with `channels=services`."),
        Option("channels", _channels, "comma-separated channel prefixes, or services", None,
               "Read broadcasts on channels that start with one of these; one partition per "
               "prefix (a channel under two prefixes is read by both). `services`: one channel "
               "per service registered at the broker, following `ebus/workers` announcements. "
               "Default: every channel."),
        Option("includeBrokerEvents", boolean, "true or false", "false",
               "Also read the broker's own broadcasts on channel `ebus` (started, shutdown, "
               "workers)."),
    )
    writer_options = (
        BROKER,
        Option("pubPort", _port, "a port number", str(PUB_PORT),
               "The broker's pub port (its XSUB), where broadcasts are sent."),
        Option("pubEndpoint", text, "a zmq endpoint such as tcp://host:5002", None,
               "The pub address in full; overrides `broker` and `pubPort`."),
    )
    columns = pa.schema([
        pa.field("channel", pa.string()),
        pa.field("data", pa.string()),
    ])

    def sub_address(self, options: Options) -> str:
        return options["subEndpoint"] or f"tcp://{options['broker']}:{options['subPort']}"

    def discovery(self, options: Options, state: StateStore) -> Discovery:
        address = self.sub_address(options)

        def endpoint_of(prefix: str) -> Endpoint:
            return Endpoint(f"{prefix or '*'}@{address.split('://', 1)[-1]}", address,
                            {"prefix": prefix}, (prefix.encode("utf-8"),))

        prefixes = options["channels"] or ("",)
        if prefixes == ("services",):
            frontend = f"tcp://{options['broker']}:{options['frontendPort']}"
            return ServiceChannels(frontend, address, endpoint_of)
        return StaticDiscovery([endpoint_of(prefix) for prefix in prefixes])

    def decode(self, frames: pa.ListArray, source: Source, options: Options) -> Decoded:
        channels, data, payloads, errors, keep = [], [], [], [], []
        broker_events = options["includeBrokerEvents"]
        for message in frames.to_pylist():
            channel, value, payload, error = _decode_message(message)
            channels.append(channel)
            data.append(value)
            payloads.append(payload)
            errors.append(error)
            keep.append(broker_events or channel != BROKER_CHANNEL)
        return Decoded(pa.array(payloads, pa.binary()), pa.array(errors, pa.string()),
                       {"channel": pa.array(channels, pa.string()),
                        "data": pa.array(data, pa.string())},
                       None if all(keep) else pa.array(keep, pa.bool_()))


    # -- writing -------------------------------------------------------------------------------

    def check_input(self, schema: pa.Schema) -> None:
        names = set(schema.names)
        if "channel" not in names or not pa.types.is_string(schema.field("channel").type):
            raise ValueError(f"ebus writer: the rows need a string column `channel`; they have "
                             f"{', '.join(schema.names)}")
        if not names & {"data", "payload"}:
            raise ValueError("ebus writer: the rows need a column `data` (JSON text) or "
                             "`payload` (packed bytes)")
        for column, check in (("data", pa.types.is_string), ("payload", pa.types.is_binary)):
            if column in names and not check(schema.field(column).type):
                raise ValueError(f"ebus writer: column `{column}` has type "
                                 f"{schema.field(column).type}")

    def open_publisher(self, options: Options) -> SinkPublisher:
        address = options["pubEndpoint"] or f"tcp://{options['broker']}:{options['pubPort']}"
        return ConnectedXPub(address, send_hwm=options["sendHighWaterMark"],
                             send_timeout=options["sendTimeout"] or None)

    def encode(self, batch: pa.RecordBatch, options: Options) -> Encoded:
        channels = column_values(batch, "channel")
        data = column_values(batch, "data")
        payloads = column_values(batch, "payload")
        messages, errors, topics = [], [], []
        for channel, text_value, payload in zip(channels, data, payloads):
            frames, error = _broadcast(channel, text_value, payload)
            messages.append(frames)
            errors.append(error)
            topics.append(frames[0] if frames else None)
        return Encoded(messages, errors, topics)


def _decode_message(frames: list[bytes]) -> tuple[str | None, str | None, bytes, str | None]:
    """(channel, data as JSON text, raw payload, error) of one captured broadcast."""
    if len(frames) != 2:
        sizes = ", ".join(str(len(f)) for f in frames)
        return (None, None, b"".join(frames),
                f"malformed EBUS broadcast: {len(frames)} frames of {sizes} bytes; expected "
                f"[channel, packed data]. payload holds the frames concatenated")
    channel_bytes, payload = frames
    try:
        channel = channel_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return None, None, payload, "malformed EBUS broadcast: the channel is not UTF-8"
    try:
        return channel, to_json(unpack(payload)), payload, None
    except PayloadError as exc:
        return channel, None, payload, f"malformed EBUS payload on channel {channel!r}: {exc}"


def _broadcast(channel: str | None, data: str | None,
               payload: bytes | None) -> tuple[list[bytes] | None, str | None]:
    """The two frames of a row's broadcast, or why there are none."""
    if not channel:
        return None, "no channel: `channel` is null or empty"
    if payload is not None and data is not None:
        return None, "both `data` and `payload` are set; give one"
    if payload is not None:
        return [channel.encode("utf-8"), payload], None
    try:
        value = None if data is None else from_json(data)
    except ValueError as exc:
        return None, f"`data` is not JSON text: {exc}"
    return [channel.encode("utf-8"), pack(value)], None
