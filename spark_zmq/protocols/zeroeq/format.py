"""The ``zeroeq`` format: what the generic reader and writer need to know of ZeroEQ.

Reading: discovery of publishers (see ``discovery``), and decoding of captured messages into
the format's columns. Writing: a ``Publisher`` per Python worker, and the encoding of rows
(``event`` or ``event_id``, ``payload``) into ZeroEQ messages.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zmq

from spark_zmq.options import Options
from spark_zmq.protocols.arrow import (
    binary_column,
    column_values,
    distinct_rows,
    frame_sizes,
    joined_frames,
    string_column,
)
from spark_zmq.protocols.contract import (
    Decoded,
    Discovery,
    Encoded,
    EncodedBatch,
    SinkProtocol,
    SinkPublisher,
    StateStore,
    StreamProtocol,
)
from spark_zmq.protocols.zeroeq.discovery import ZeroEQDiscovery
from spark_zmq.protocols.zeroeq.options import (
    READER_OPTIONS,
    WRITER_OPTIONS,
    ReadSettings,
    WriteSettings,
)
from spark_zmq.protocols.zeroeq.publisher import Publisher
from spark_zmq.protocols.zeroeq.wire import (
    _WIRE_HEX,
    EVENT_ID_BYTES,
    event_id,
)
from spark_zmq.spool.index import Source


class ZeroEQ(StreamProtocol[ReadSettings], SinkProtocol[WriteSettings]):
    name = "zeroeq"
    reader_options = READER_OPTIONS
    writer_options = WRITER_OPTIONS
    columns = pa.schema(
        [
            pa.field("session", pa.string()),
            pa.field("publisher", pa.string()),
            pa.field("application", pa.string()),
            pa.field("user", pa.string()),
            pa.field("instance", pa.string()),
            pa.field("event_id", pa.string()),
            pa.field("event", pa.string()),
        ]
    )

    # -- reading -------------------------------------------------------------------------------

    def read_settings(self, options: Options) -> ReadSettings:
        return ReadSettings.of(options)

    def discovery(self, settings: ReadSettings, state: StateStore) -> Discovery:
        return ZeroEQDiscovery(
            session=settings.session,
            events=dict(settings.events),
            interfaces=settings.interfaces,
            static=settings.publishers,
            compatible_only=settings.compatible_only,
            management_bind=settings.management_uri,
            application=settings.application,
            state=state,
            curve=settings.curve,
        )

    def decode(self, frames: pa.ListArray, source: Source, settings: ReadSettings) -> Decoded:
        return self.decode_runs(frames, [(source, len(frames))], settings)

    def decode_runs(
        self, frames: pa.ListArray, runs: Sequence[tuple[Source, int]], settings: ReadSettings
    ) -> Decoded:
        """The messages of all ``runs`` at once: the event ids once, then what depends on
        each run's source (its columns, its names of events, the events it was subscribed
        to) by run, taken per row."""
        n = len(frames)
        which = np.repeat(np.arange(len(runs)), [count for _, count in runs])  # each row's run
        metadata = [source.metadata for source, _ in runs]
        counts = pc.list_value_length(frames).to_numpy(zero_copy_only=False)
        starts = frames.offsets.to_numpy()[:-1]
        values = frames.values
        lengths = pc.binary_length(values).to_numpy(zero_copy_only=False) if len(values) else None
        has_frame = counts >= 1
        first_index = np.where(has_frame, starts, 0)
        first_length = (
            np.where(has_frame, lengths[first_index], -1) if lengths is not None else np.full(n, -1)
        )
        ok = has_frame & (counts <= 2) & (first_length == EVENT_ID_BYTES)

        event_ids = pa.nulls(n, pa.string())
        event_names = pa.nulls(n, pa.string())
        payload = pa.repeat(pa.scalar(b"", pa.binary()), n)
        if ok.any():
            ids = values.take(pa.array(first_index)).dictionary_encode()
            distinct = [
                d.hex() if len(d) == EVENT_ID_BYTES else None for d in ids.dictionary.to_pylist()
            ]
            mask = pa.array(ok)
            hex_ids = pa.array(distinct, pa.string()).take(ids.indices)
            event_ids = pc.if_else(mask, hex_ids, event_ids)
            names = _names_by_run(distinct, metadata, settings)
            event_names = pc.if_else(mask, names(which, ids.indices), event_names)
            second = values.take(pa.array(np.where(counts == 2, starts + 1, first_index)))
            payload = pc.if_else(pa.array(counts == 2), second, payload)

        error = pa.nulls(n, pa.string())
        bad = np.flatnonzero(~ok & has_frame)
        if len(bad):
            payload, error = _mark_malformed(frames, bad, payload)

        constant = {
            key: _per_run([m.get(key) for m in metadata], which)
            for key in ("session", "publisher", "application", "user", "instance")
        }
        return Decoded(
            payload,
            error,
            {**constant, "event_id": event_ids, "event": event_names},
            _wanted_by_run(event_ids, metadata, which),
        )

    # -- writing -------------------------------------------------------------------------------

    def write_settings(self, options: Options) -> WriteSettings:
        return WriteSettings.of(options)

    def check_input(self, schema: pa.Schema, settings: WriteSettings) -> None:
        names = set(schema.names)
        if not names & {"event", "event_id"}:
            raise ValueError(
                f"zeroeq writer: the rows need a column `event` (an event name) or "
                f"`event_id` (32 hex digits); they have {', '.join(schema.names)}"
            )
        for column, kinds in (
            ("event", ("string",)),
            ("event_id", ("string",)),
            ("payload", ("binary", "string")),
        ):
            if column in names and not any(
                getattr(pa.types, f"is_{kind}")(schema.field(column).type) for kind in kinds
            ):
                raise ValueError(
                    f"zeroeq writer: column `{column}` must be of type "
                    f"{' or '.join(kinds)}, not {schema.field(column).type}"
                )

    def open_publisher(
        self, settings: WriteSettings, application: str | None = None
    ) -> SinkPublisher:
        publisher = Publisher(
            settings.session,
            host=settings.host,
            port=settings.port,
            application=settings.application,
            send_hwm=settings.send_high_water_mark,
            nodrop=True,
            send_timeout=settings.send_timeout,
            interfaces=settings.interfaces,
            registered=dict(settings.registered_events),
            curve=settings.curve,
        )
        return PublisherSink(publisher)

    def encode(self, batch: pa.RecordBatch, settings: WriteSettings) -> Encoded:
        events = column_values(batch, "event")
        ids = column_values(batch, "event_id")
        payloads = column_values(batch, "payload")
        registered = settings.registered
        wire_of: dict[str, bytes] = {}
        encoded = Encoded()
        for event, hex_id, payload in zip(events, ids, payloads):
            wire = _message_head(event, hex_id, registered, wire_of)
            if isinstance(wire, str):
                encoded.add_error(wire)
                continue
            _name(encoded.names, wire, event)
            if isinstance(payload, str):
                payload = payload.encode("utf-8")
            encoded.add_message([wire, payload] if payload else [wire], wire)
        return encoded

    def encode_columns(self, batch: pa.RecordBatch, settings: WriteSettings) -> EncodedBatch:
        """``encode``'s messages column-wise: the rules run once per distinct (event,
        event_id) pair; the payloads stay Arrow's (an empty one sends no second frame)."""
        rows, pairs = distinct_rows(string_column(batch, "event"), string_column(batch, "event_id"))
        registered = settings.registered
        wire_of: dict[str, bytes] = {}
        heads = [_message_head(event, hex_id, registered, wire_of) for event, hex_id in pairs]
        names: dict[bytes, str | None] = {}
        for (event, _), head in zip(pairs, heads):
            if isinstance(head, bytes):
                _name(names, head, event)
        of_row = pa.array(rows)
        wires = pa.array([h if isinstance(h, bytes) else None for h in heads], pa.binary())
        errors = pa.array([h if isinstance(h, str) else None for h in heads], pa.string())
        wires, errors = wires.take(of_row), errors.take(of_row)
        payload = binary_column(batch, "payload")
        has_body = pc.fill_null(pc.greater(pc.binary_length(payload), 0), False)
        body = pc.if_else(has_body, payload, pa.scalar(None, pa.binary()))
        return EncodedBatch([wires, body], errors, wires, names)


class PublisherSink(SinkPublisher):
    """A ``Publisher`` as the generic writer sees it."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self.name = publisher.instance_name

    def send(self, frames: list[bytes]) -> None:
        self.publisher.send_frames(frames)

    def sending_socket(self) -> zmq.Socket:
        return self.publisher.socket

    def timeout_error(self) -> Exception:
        return self.publisher.timeout_error()

    def declare(self, names: dict[bytes, str | None]) -> None:
        for wire, name in names.items():
            self.publisher.register(wire, name)

    def subscribers(self, topic: bytes) -> int:
        return self.publisher.count_subscribers(topic)

    def close(self) -> None:
        self.publisher.close()


def _message_head(
    event: str | None,
    hex_id: str | None,
    registered: frozenset[bytes] | None,
    cache: dict[str, bytes],
) -> bytes | str:
    """A row's first frame (its wire id), or why the row cannot be sent (text)."""
    wire, error = _wire_id(event, hex_id, cache)
    if error is None and registered is not None and wire not in registered:
        error = (
            f"event {event or hex_id!r} is not among registeredEvents; "
            f"a publisher sends only registered events"
        )
    if error is not None or wire is None:
        return error or "no event"
    return wire


def _name(names: dict[bytes, str | None], wire: bytes, event: str | None) -> None:
    """Note the name of a sent id: the event's, where a row names it."""
    if event:
        names[wire] = event
    else:
        names.setdefault(wire, None)


def _wire_id(
    event: str | None, hex_id: str | None, cache: dict[str, bytes]
) -> tuple[bytes | None, str | None]:
    """The wire id of a row, or why there is none."""
    if event is not None:
        if not event.strip():
            return None, "empty event name"
        wire = cache.get(event)
        if wire is None:
            wire = cache[event] = event_id(event)
        if hex_id is not None and hex_id.lower() != wire.hex():
            return None, (
                f"event {event!r} has id {wire.hex()}, but the row's event_id is {hex_id!r}"
            )
        return wire, None
    if hex_id is None:
        return None, "no event: both `event` and `event_id` are null"
    if not _WIRE_HEX.fullmatch(hex_id):  # (bytes.fromhex would skip blanks)
        return None, f"event_id {hex_id!r} is not 32 hex digits"
    return bytes.fromhex(hex_id), None


def _per_run(values: list[str | None], which: np.ndarray) -> pa.Array:
    """A string column of ``values[which[i]]`` for row i (a value per run)."""
    if len(values) == 1:
        return pa.repeat(pa.scalar(values[0], pa.string()), len(which))
    return pa.array(values, pa.string()).take(pa.array(which))


def _names_by_run(
    distinct: list[str | None], metadata: list[Mapping[str, str]], settings: ReadSettings
) -> Callable[[np.ndarray, pa.Array], pa.Array]:
    """The names of the event ids ``distinct`` as each run's publisher gives them (its
    vocabulary, in its metadata's ``names``, over the names the options give): a function of
    (each row's run, each row's index in ``distinct``) to the rows' names. The runs of a
    session mostly share a vocabulary: each distinct one is looked up once."""
    given = settings.event_names()
    tables: dict[str, int] = {}  # a vocabulary's text -> its table's number
    flat: list[str | None] = []  # the tables, one after the other, each len(distinct) long
    run_table = np.empty(len(metadata), np.int64)
    for run, meta in enumerate(metadata):
        text = meta.get("names") or "{}"
        if text not in tables:
            vocabulary = {**given, **json.loads(text)}
            tables[text] = len(tables)
            flat.extend(vocabulary.get(d) if d is not None else None for d in distinct)
        run_table[run] = tables[text]
    table = pa.array(flat, pa.string())

    def lookup(which: np.ndarray, indices: pa.Array) -> pa.Array:
        if len(tables) == 1:
            return table.take(indices)
        rows = run_table[which] * len(distinct) + indices.to_numpy(zero_copy_only=False)
        return table.take(pa.array(rows))

    return lookup


def _wanted_by_run(
    event_ids: pa.Array, metadata: list[Mapping[str, str]], which: np.ndarray
) -> pa.Array | None:
    """``_wanted`` of each run's rows by its own metadata; None if no run filters."""
    filters: dict[tuple[str | None, str | None], list[int]] = {}
    for run, meta in enumerate(metadata):
        filters.setdefault((meta.get("events"), meta.get("excluded")), []).append(run)
    if len(filters) == 1:
        return _wanted(event_ids, metadata[0])
    keep = np.ones(len(event_ids), bool)
    for runs in filters.values():
        wanted = _wanted(event_ids, metadata[runs[0]])
        if wanted is not None:
            rows = np.isin(which, runs)
            keep[rows] = wanted.to_numpy(zero_copy_only=False)[rows]
    return None if keep.all() else pa.array(keep)


def _wanted(event_ids: pa.Array, metadata: Mapping[str, str]) -> pa.Array | None:
    """False for messages of events the endpoint is not subscribed to (Meerkat, events a
    management request took away), from the endpoint's metadata."""
    events, excluded = metadata.get("events"), metadata.get("excluded")
    if events:
        return pc.fill_null(pc.is_in(event_ids, pa.array(events.split(";"), pa.string())), False)
    if excluded:
        return pc.invert(
            pc.fill_null(pc.is_in(event_ids, pa.array(excluded.split(";"), pa.string())), False)
        )
    return None


def _mark_malformed(
    frames: pa.ListArray, bad: np.ndarray, payload: pa.Array
) -> tuple[pa.Array, pa.Array]:
    """Malformed messages (rare): error text, and their raw frames concatenated as payload
    (one copy of each malformed message; the other payloads stay as they are)."""
    mask = np.zeros(len(frames), bool)
    mask[bad] = True
    malformed = frames.take(pa.array(bad))
    counts = pc.list_value_length(malformed).to_numpy(zero_copy_only=False)
    lengths = pc.binary_length(malformed.flatten()).to_numpy(zero_copy_only=False)
    ends = np.cumsum(counts)
    texts = [
        f"malformed ZeroEQ message: {frame_sizes(lengths[end - count : end].tolist())}; "
        f"expected a 16-byte event id, then at most one payload frame. "
        f"payload holds the frames concatenated"
        for count, end in zip(counts, ends)
    ]
    errors = pc.replace_with_mask(
        pa.nulls(len(frames), pa.string()), pa.array(mask), pa.array(texts, pa.string())
    )
    return pc.replace_with_mask(payload, pa.array(mask), joined_frames(malformed)), errors
