"""The ``goby`` format: Goby3 interprocess messages through gobyd's Manager and Router.

Reading: discovery asks gobyd's Manager for the Router's XPUB; each identifier prefix of option
``subscribe`` is one partition with its own SUB socket subscribed to it (keyed by prefix and
Manager address, so a gobyd restart keeps the keys). Decoding splits each message at its first
NUL into the five identifier parts and the payload, and shows CSTR and JSON payloads as text and
PROTOBUF payloads of types in ``protobufDescriptorSet`` as JSON.
Writing: rows ``group``, ``scheme``, ``type`` and ``payload`` (or ``text`` for CSTR and JSON)
become messages of this process and thread, sent through the Router's XSUB under gobyd's hold.
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_zmq.errors import shown
from spark_zmq.options import OptionError, Options
from spark_zmq.protocols.arrow import (
    binary_column,
    column_values,
    distinct_rows,
    frame_sizes,
    raw_column,
)
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
from spark_zmq.protocols.goby.discovery import ManagerDiscovery
from spark_zmq.protocols.goby.manager import (
    Router,
)
from spark_zmq.protocols.goby.options import (
    FALLBACK_CLIENT_NAME,
    READER_OPTIONS,
    WRITER_OPTIONS,
    ReadSettings,
    WriteSettings,
)
from spark_zmq.protocols.goby.payloads import (
    DescriptorSet,
    PayloadError,
    bson_json,
    cstr_payload,
    cstr_text,
    descriptor_set,
    json_bson,
)
from spark_zmq.protocols.goby.publisher import GobyPublisher
from spark_zmq.protocols.goby.wire import (
    CSTR_TYPE,
    INTERNAL_GROUP_PREFIX,
    SCHEMES,
    IdentifierError,
    identifier,
    scheme_number,
    scheme_part,
    split_message,
    thread_hash,
)
from spark_zmq.spool.index import Source

CSTR, PROTOBUF, JSON = SCHEMES["CSTR"], SCHEMES["PROTOBUF"], SCHEMES["JSON"]


class Goby(StreamProtocol[ReadSettings], SinkProtocol[WriteSettings]):
    name = "goby"
    reader_options = READER_OPTIONS
    writer_options = WRITER_OPTIONS
    columns = pa.schema(
        [
            pa.field("group", pa.string()),
            pa.field("scheme", pa.string()),
            pa.field("scheme_id", pa.int32()),
            pa.field("type", pa.string()),
            pa.field("process", pa.int32()),
            pa.field("thread", pa.string()),
            pa.field("text", pa.string()),
            pa.field("json", pa.string()),
        ]
    )

    # -- reading -------------------------------------------------------------------------------

    def read_settings(self, options: Options) -> ReadSettings:
        settings = ReadSettings.of(options)
        _message_types(settings)  # a file that cannot be loaded fails the query as defined
        return settings

    def discovery(self, settings: ReadSettings, state: StateStore) -> Discovery:
        manager = settings.manager

        def endpoint_of(prefix: bytes, router: Router) -> Endpoint:
            shown = prefix.decode("utf-8")
            return Endpoint(
                f"{shown}@{manager.label}",
                router.subscribe,
                {"prefix": shown, "manager": manager.endpoint},
                (prefix,),
            )

        return ManagerDiscovery(
            manager,
            settings.client_name,
            settings.manager_timeout,
            settings.subscriptions,
            endpoint_of,
            settings.curve,
        )

    def decode(self, frames: pa.ListArray, source: Source, settings: ReadSettings) -> Decoded:
        types = _message_types(settings)
        rows = [_decode_message(message, types) for message in frames.to_pylist()]
        names = ("payload", "error") + tuple(self.columns.names)
        values = dict(zip(names, zip(*rows))) if rows else {name: () for name in names}
        columns = {field.name: pa.array(values[field.name], field.type) for field in self.columns}
        keep = None
        if not settings.include_internal_groups:
            keep = pa.array(
                [
                    group is None or not group.startswith(INTERNAL_GROUP_PREFIX)
                    for group in values["group"]
                ],
                pa.bool_(),
            )
        return Decoded(
            pa.array(values["payload"], pa.binary()),
            pa.array(values["error"], pa.string()),
            columns,
            keep,
        )

    # -- writing -------------------------------------------------------------------------------

    def write_settings(self, options: Options) -> WriteSettings:
        return WriteSettings.of(options)  # IPC and TCP options mixed fail here, on the driver

    def check_input(self, schema: pa.Schema, settings: WriteSettings) -> None:
        names = set(schema.names)
        wanted = {
            "group": pa.types.is_string,
            "scheme": _string_or_integer,
            "type": pa.types.is_string,
            "payload": pa.types.is_binary,
            "text": pa.types.is_string,
        }
        missing = [name for name in ("group", "scheme") if name not in names]
        if missing or not names & {"payload", "text"}:
            raise ValueError(
                f"goby writer: the rows need columns `group`, `scheme`, `type` "
                f"(except for CSTR) and `payload` or `text`; they have "
                f"{', '.join(schema.names)}"
            )
        for name, check in wanted.items():
            if name in names and not check(schema.field(name).type):
                raise ValueError(f"goby writer: column `{name}` has type {schema.field(name).type}")

    def open_publisher(
        self, settings: WriteSettings, application: str | None = None
    ) -> SinkPublisher:
        return GobyPublisher(
            settings.manager,
            settings.client_name or application or FALLBACK_CLIENT_NAME,
            manager_timeout=settings.manager_timeout,
            hold_timeout=settings.hold_timeout,
            send_hwm=settings.send_high_water_mark,
            send_timeout=settings.send_timeout,
            curve=settings.curve,
        )

    def encode(self, batch: pa.RecordBatch, settings: WriteSettings) -> Encoded:
        process, thread = os.getpid(), thread_hash()
        encoded = Encoded()
        for row in zip(
            *(column_values(batch, name) for name in ("group", "scheme", "type", "payload", "text"))
        ):
            try:
                message = encode_message(*row, process=process, thread=thread)
            except (IdentifierError, PayloadError, ValueError) as exc:
                encoded.add_error(str(exc))
                continue
            encoded.add_message([message], message[: message.index(b"\0")])
        return encoded

    def encode_columns(self, batch: pa.RecordBatch, settings: WriteSettings) -> EncodedBatch:
        """``encode``'s messages column-wise: identifiers (and payloads made from ``text``)
        once per distinct (group, scheme, type, payload given, text); payloads stay Arrow's."""
        process, thread = os.getpid(), thread_hash()
        payload = binary_column(batch, "payload")
        has_payload = pc.is_valid(payload)
        rows, keys = distinct_rows(
            *(raw_column(batch, name) for name in ("group", "scheme", "type")),
            has_payload,
            raw_column(batch, "text"),
        )
        heads: list[bytes | None] = []
        bodies: list[bytes | None] = []
        errors: list[str | None] = []
        for group, scheme, type_name, given, text_value in keys:
            try:
                head, body = message_parts(
                    group, scheme, type_name, given, text_value, process=process, thread=thread
                )
            except (IdentifierError, PayloadError, ValueError) as exc:
                heads.append(None)
                bodies.append(None)
                errors.append(str(exc))
                continue
            heads.append(head)
            bodies.append(body)
            errors.append(None)
        of_row = pa.array(rows)
        topics = pa.array([h[:-1] if h else None for h in heads], pa.binary()).take(of_row)
        head = pa.array(heads, pa.binary()).take(of_row)
        body = pc.if_else(has_payload, payload, pa.array(bodies, pa.binary()).take(of_row))
        frame = pc.binary_join_element_wise(head, body, pa.scalar(b"", pa.binary()))
        return EncodedBatch([frame], pa.array(errors, pa.string()).take(of_row), topics)


def _string_or_integer(data_type: pa.DataType) -> bool:
    return pa.types.is_string(data_type) or pa.types.is_integer(data_type)


def _message_types(settings: ReadSettings) -> DescriptorSet | None:
    """The types of option ``protobufDescriptorSet``, if set; OptionError if the file cannot
    be read or loaded (on the driver when the query starts, on an executor if it changed
    since: no message is at fault then, so the task fails, naming the option)."""
    path = settings.descriptor_set
    if path is None:
        return None
    try:
        return descriptor_set(path)
    except ValueError as exc:
        raise OptionError(f"goby: option 'protobufDescriptorSet': {exc}") from None


def _malformed(payload: bytes, error: str) -> tuple:
    """A message whose identifier cannot be read: no part of it is known."""
    return (payload, error) + (None,) * 8


def _decode_message(frames: list[bytes], types: DescriptorSet | None) -> tuple:
    """(payload, error, group, scheme, scheme_id, type, process, thread, text, json) of one
    captured message."""
    if len(frames) != 1:
        return _malformed(
            b"".join(frames),
            f"malformed Goby message: {frame_sizes([len(f) for f in frames])}; expected "
            f"one. payload holds the frames concatenated",
        )
    try:
        ident, payload = split_message(frames[0])
    except IdentifierError as exc:
        return _malformed(
            frames[0], f"malformed Goby identifier: {exc}. payload holds the whole message"
        )
    text_value = json_value = error = None
    try:
        if ident.scheme_id == CSTR:
            text_value = cstr_text(payload)
        elif ident.scheme_id == JSON:
            text_value = bson_json(payload)
        elif ident.scheme_id == PROTOBUF and types is not None:
            json_value = types.to_json(ident.type, payload)
    except PayloadError as exc:
        error = f"malformed payload of {shown(ident.group + '/' + ident.type)}: {exc}"
    return (
        payload,
        error,
        ident.group,
        ident.scheme,
        ident.scheme_id,
        ident.type,
        ident.process,
        ident.thread,
        text_value,
        json_value,
    )


def encode_message(
    group: Any,
    scheme: Any,
    type_name: Any,
    payload: Any,
    text_value: Any,
    *,
    process: int,
    thread: str,
) -> bytes:
    """The one frame of a row's message; ValueError (and kin) says why there is none. The
    row's values are as Arrow gives them (typed Any: any column type may come; the rules
    here check each)."""
    head, body = message_parts(
        group, scheme, type_name, payload is not None, text_value, process=process, thread=thread
    )
    if body is not None:
        return head + body
    return head + payload


def message_parts(
    group: Any,
    scheme: Any,
    type_name: Any,
    has_payload: bool,
    text_value: Any,
    *,
    process: int,
    thread: str,
) -> tuple[bytes, bytes | None]:
    """A row's identifier and its payload made from ``text`` (None: the row's own payload):
    all of a message that depends on a row but its payload's bytes. ValueError (and kin) says
    why there is no message."""
    if not group:
        raise ValueError("no group: `group` is null or empty")
    if scheme is None or scheme == "":
        raise ValueError("no scheme: `scheme` is null or empty")
    scheme_name = scheme_part(scheme)
    scheme_id = scheme_number(scheme_name)
    if scheme_id == CSTR and not type_name:
        type_name = CSTR_TYPE
    if not type_name:
        raise ValueError(f"no type: `type` is null or empty (scheme {scheme_name})")
    if has_payload == (text_value is not None):
        raise ValueError("give exactly one of `payload` and `text`")
    body = None
    if not has_payload:
        if scheme_id == CSTR:
            body = cstr_payload(text_value)
        elif scheme_id == JSON:
            body = json_bson(text_value)
        else:
            raise ValueError(
                f"`text` is for CSTR and JSON rows; a {scheme_name} row needs `payload`"
            )
    return identifier(group, scheme_name, type_name, process, thread), body
