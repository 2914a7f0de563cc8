"""The seam between the generic layers and a wire format: what a protocol module provides.

A protocol module knows its wire format and how its endpoints are found; it knows nothing of
Spark's streaming machinery (no pyspark import under ``spark_zmq.protocols``). The generic
reader and writer (``spark_zmq.spark``) and the data plane (``spark_zmq.capture``,
``spark_zmq.spool``) know nothing of any one wire format. Everything that crosses the seam is
defined here; Arrow helpers that formats share are in ``spark_zmq.protocols.arrow``.

Invariants a format (a fifth one included) must keep:

- **Settings are made once, on the driver.** ``read_settings``/``write_settings`` turn the
  parsed options into a frozen, picklable settings object (the format's
  ``options.ReadSettings``/``WriteSettings``); ``decode``/``encode`` receive it and never
  parse options again.
- **An endpoint's key is stable and checked.** ``Endpoint.key`` names a partition across
  restarts (a folder, a column value, an offset in Spark's checkpoint): discovery derives it
  from what peers announce the same way each time; ``Endpoint.problem`` refuses keys and
  addresses that must not be used (``addresses.key_problem``, ``addresses.address_problem``).
- **Discovery reports, it does not capture.** It calls its listener from its own threads,
  reports every endpoint known at ``start`` and every later change, and ``check`` raises the
  error that stopped it.
- **Decoding never raises for a message.** ``decode`` returns one entry per message; a
  malformed message is an entry with ``error`` set and its raw bytes as ``payload``. Only an
  OptionError (a fault of the options) may fail a read task.
- **Encoding never raises for a row.** ``encode``/``encode_columns`` return one entry per input
  row; a row that cannot be sent is an error text. Both encodings give the same messages.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generic, TypeVar
from typing import Protocol as TypingProtocol

import pyarrow as pa
import zmq

from spark_zmq.errors import shown
from spark_zmq.options import Option, Options, parse_options
from spark_zmq.protocols.addresses import address_problem, key_problem
from spark_zmq.spool.index import Source
from spark_zmq.stream_options import READER_OPTIONS, WRITER_OPTIONS

#: a format's reader settings (its ``options.ReadSettings``) and writer settings
S = TypeVar("S")
W = TypeVar("W")


@dataclass(frozen=True)
class Endpoint:
    """One thing to capture from: becomes one partition, keyed by ``key``.

    ``key`` must be stable across restarts (a restarted query finds its partitions by it).
    ``metadata`` is what discovery learned about the endpoint; it is stored with the captured
    messages and handed back to ``decode``.
    """

    key: str
    address: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    subscriptions: tuple[bytes, ...] = (b"",)
    socket_type: int = zmq.SUB

    @cached_property
    def source(self) -> Source:
        """Where its messages come from, as the spool records it (one, made once)."""
        return Source(self.address, self.metadata)

    def problem(self) -> str | None:
        """Why capture must refuse this endpoint, or None. Discovery builds endpoints from
        what peers announce: a key becomes a folder name and an address a connection, so
        both are checked before either is used (``key_problem``, ``address_problem``)."""
        return key_problem(self.key) or address_problem(self.address)

    def describe(self) -> str:
        """The endpoint for a log line, safe whatever a peer put in it."""
        if self.key == self.address:
            return shown(self.key)
        return f"{shown(self.key)} at {shown(self.address)}"

    def to_json(self) -> dict:
        """A JSON-able form, for handing the endpoint to a capture process elsewhere."""
        return {
            "key": self.key,
            "address": self.address,
            "metadata": dict(self.metadata),
            "subscriptions": [s.hex() for s in self.subscriptions],
            "socket_type": self.socket_type,
        }

    @classmethod
    def from_json(cls, obj: dict) -> Endpoint:
        return cls(
            obj["key"],
            obj["address"],
            obj["metadata"],
            tuple(bytes.fromhex(s) for s in obj["subscriptions"]),
            obj["socket_type"],
        )


class EndpointListener(TypingProtocol):
    """Receives discovery's view of the world; called from discovery's own threads."""

    def endpoint_joined(self, endpoint: Endpoint) -> None: ...

    def endpoint_left(self, key: str) -> None: ...


class StateStore(TypingProtocol):
    """Durable state of a query's discovery (kept in the spool folder, so a restart of the
    query from its checkpoint finds it again)."""

    def load(self) -> dict | None: ...

    def save(self, data: dict) -> None: ...


class Discovery(ABC):
    """Keeps the live set of endpoints and tells a listener when it changes."""

    @abstractmethod
    def start(self, listener: EndpointListener) -> None:
        """Begin; report every endpoint already known and every later change to ``listener``."""

    def close(self) -> None:
        """Stop discovering; release sockets and threads."""

    def check(self) -> None:
        """Raise the error that has stopped discovery, if any. The reader calls this at every
        offset request, so a query whose discovery died fails with the cause instead of
        going on without ever seeing a new endpoint. Default: nothing can stop it."""


class StaticDiscovery(Discovery):
    """A fixed list of endpoints given by the user; needs no network discovery."""

    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        self.endpoints = tuple(endpoints)

    def start(self, listener: EndpointListener) -> None:
        for endpoint in self.endpoints:
            listener.endpoint_joined(endpoint)


@dataclass
class Decoded:
    """A protocol's decoding of a run of captured messages, one entry per message.

    ``error`` is null for a well-formed message, else a description of what is wrong (the
    generic reader then applies ``mode``); ``payload`` of a malformed message holds its raw bytes.
    ``keep`` (optional) is False for well-formed messages the query did not ask for.
    """

    payload: pa.Array
    error: pa.Array
    columns: dict[str, pa.Array]
    keep: pa.Array | None = None


def concatenated(names: Sequence[str], parts: Sequence[Decoded]) -> Decoded:
    """The decodings of consecutive runs of messages as one, with the format's columns
    ``names`` (``keep`` None if no part has one)."""
    if len(parts) == 1:
        return parts[0]
    keep = None
    if any(part.keep is not None for part in parts):
        keep = pa.concat_arrays(
            [
                part.keep if part.keep is not None else pa.repeat(pa.scalar(True), len(part.error))
                for part in parts
            ]
        )
    return Decoded(
        pa.concat_arrays([part.payload for part in parts]),
        pa.concat_arrays([part.error for part in parts]),
        {name: pa.concat_arrays([part.columns[name] for part in parts]) for name in names},
        keep,
    )


class StreamProtocol(ABC, Generic[S]):
    """A wire format as seen by the generic stream reader, with its reader settings ``S``:
    made once per query from the options (``read_settings``, on the driver) and handed to
    discovery and, pickled, to every read task's ``decode``."""

    #: the format name users pass to ``spark.readStream.format(...)``
    name: str
    #: options of this format, besides the generic reader's
    reader_options: tuple[Option[Any], ...] = ()
    #: the columns this format adds after the shared ones
    columns: pa.Schema

    def parse_reader_options(self, raw: Mapping[str, str]) -> Options:
        """A reader's options as Spark hands them (names case-insensitive), parsed against
        the generic reader's and this format's definitions; OptionError names the fault."""
        return parse_options(self.name, READER_OPTIONS + self.reader_options, raw)

    @abstractmethod
    def read_settings(self, options: Options) -> S:
        """This format's reader settings; OptionError for values wrong together."""

    def reader_settings(self, raw: Mapping[str, str]) -> S:
        """``read_settings`` of ``raw`` options: what a query with them decodes with."""
        return self.read_settings(self.parse_reader_options(raw))

    @abstractmethod
    def discovery(self, settings: S, state: StateStore) -> Discovery:
        """The discovery to run on the driver side for a query with these settings."""

    @abstractmethod
    def decode(self, frames: pa.ListArray, source: Source, settings: S) -> Decoded:
        """Decode captured messages (list of frames each) that came from ``source``.

        A malformed message is an entry with ``error`` set, not an exception. Raise
        OptionError for a fault of the options (a file they name cannot be read), which no
        message causes and which fails the read task. Anything else decode raises is taken for
        a fault of the messages: the generic reader finds the messages that make decode raise
        and makes each a malformed row, so a decoder bug never fails a read task.
        """

    def decode_runs(
        self, frames: pa.ListArray, runs: Sequence[tuple[Source, int]], settings: S
    ) -> Decoded:
        """Decode captured messages of several sources at once: ``runs`` says, in order, how
        many of ``frames`` came from each source (their counts add up to ``len(frames)``).

        A read task hands the runs of many partitions to one call, so that a task of hundreds
        of quiet endpoints pays the decoding's fixed cost once, not once per endpoint; a
        format whose decoding costs a fixed amount per call overrides this. This default
        decodes each run with ``decode``. The contract is ``decode``'s; when this raises, the
        generic reader decodes each run on its own with ``decode``.
        """
        parts, at = [], 0
        for source, count in runs:
            parts.append(self.decode(frames.slice(at, count), source, settings))
            at += count
        return concatenated(self.columns.names, parts)


@dataclass
class Encoded:
    """A protocol's encoding of rows to send, one entry per row: the frames of a message, or
    an error text (the generic writer then applies ``mode``)."""

    messages: list[list[bytes] | None] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)
    #: the topic of each message as subscribers subscribe to it (for waitForSubscribers)
    topics: list[bytes | None] = field(default_factory=list)
    #: names of the topics, where known (ZeroEQ puts them in the publisher's vocabulary)
    names: dict[bytes, str | None] = field(default_factory=dict)

    def add_message(self, frames: list[bytes], topic: bytes) -> None:
        """The next row's message, with the topic subscribers match it by."""
        self.messages.append(frames)
        self.errors.append(None)
        self.topics.append(topic)

    def add_error(self, text: str) -> None:
        """The next row cannot be sent: why (the writer applies ``mode``)."""
        self.messages.append(None)
        self.errors.append(text)
        self.topics.append(None)


@dataclass
class EncodedBatch:
    """A protocol's encoding of a whole batch, column-wise, for the compiled send loop: a
    column per frame instead of a Python list per row.

    Invariants: every array has one entry per row; ``frames`` and ``topics`` are of type
    ``binary``, ``errors`` of type ``string``. Row i's message is ``frames[0][i]``,
    ``frames[1][i]``, ... up to the first column in which the row is null. A row that is null
    in ``frames[0]`` is not sent and ``errors[i]`` says why (the writer applies ``mode``);
    ``errors[i]`` is null for every other row. ``topics[i]`` is what subscribers match row i
    by (``Encoded.topics``), null where the row is not sent. ``names`` as ``Encoded.names``.
    """

    frames: list[pa.Array]
    errors: pa.Array
    topics: pa.Array
    names: dict[bytes, str | None] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.errors)

    def as_encoded(self) -> Encoded:
        """The same rows as ``Encoded`` (a Python list per message), as ``encode`` gives them:
        what the tests compare the two encodings by."""
        encoded = Encoded(names=dict(self.names))
        messages = self.messages(0, len(self))
        for error, topic in zip(self.errors.to_pylist(), self.topics.to_pylist()):
            if error is None:
                encoded.add_message(next(messages), topic)
            else:
                encoded.add_error(error)
        return encoded

    def messages(self, start: int, stop: int) -> Iterator[list[bytes]]:
        """The messages of rows ``start`` to ``stop`` that are sent, as Python lists."""
        columns = [frame.slice(start, stop - start).to_pylist() for frame in self.frames]
        for row in range(stop - start):
            message = []
            for column in columns:
                if column[row] is None:
                    break
                message.append(column[row])
            if message:
                yield message


class SinkPublisher(ABC):
    """Where a writer task's messages go; one per Python worker process and option set."""

    #: how the publisher is named in logs and commit messages
    name: str

    @abstractmethod
    def send(self, frames: list[bytes]) -> None:
        """Send one message; may block (back-pressure); raises TimeoutError when stuck."""

    def declare(self, names: dict[bytes, str | None]) -> None:
        """Topics about to be sent (ZeroEQ adds them to the vocabulary); default: nothing."""

    @abstractmethod
    def subscribers(self, topic: bytes) -> int:
        """How many subscriptions match ``topic`` now."""

    def sending_socket(self) -> zmq.Socket | None:
        """The socket on which the compiled send loop may send the next run of messages
        itself, after this has done what ``send`` does before each message (checks that may
        raise, as ``send`` would); None (the default): messages go through ``send`` only."""
        return None

    def timeout_error(self) -> Exception:
        """What ``send`` raises when back-pressure outlasted the send timeout (the compiled
        send loop raises the same)."""
        return TimeoutError(f"{self.name}: a send stayed blocked beyond the send timeout")

    def close(self) -> None:
        """Release sockets and announcements."""


#: how the generic writer's ``mode`` treats the outcome of a request (see Outcome.kind)
ANSWERED, REFUSED, UNANSWERED = "answered", "refused", "unanswered"


@dataclass(frozen=True)
class Outcome:
    """What became of one request that a writer sent (formats whose writer makes requests)."""

    request_id: str
    #: the peer's own word for it (EBUS: REPLY, REJECT, EXPIRED)
    status: str
    #: ANSWERED, REFUSED (the peer said no) or UNANSWERED (no answer in time)
    kind: str
    #: the answer's data as JSON text, if any
    data: str | None
    #: one line naming the service and the request, for errors and logs
    detail: str


class Requester(ABC):
    """Where a writer task's messages go when each one is a request that gets an answer; one
    per Python worker process and option set, like a SinkPublisher."""

    name: str

    @abstractmethod
    def request(self, frames: list[bytes], request_id: str) -> Future:
        """Send one request; the future resolves to its Outcome (in time: requests expire)."""

    def close(self) -> None:
        """Release sockets and threads."""


class SinkProtocol(ABC, Generic[W]):
    """A wire format as seen by the generic stream writer, with its writer settings ``W``:
    made once per query from the options (``write_settings``, on the driver) and handed,
    pickled, to every writer task."""

    name: str
    #: options of this format's writer, besides the generic writer's
    writer_options: tuple[Option[Any], ...] = ()

    def parse_writer_options(self, raw: Mapping[str, str]) -> Options:
        """A writer's options as Spark hands them, parsed against the generic writer's and
        this format's definitions; OptionError names the fault."""
        return parse_options(self.name, WRITER_OPTIONS + self.writer_options, raw)

    @abstractmethod
    def write_settings(self, options: Options) -> W:
        """This format's writer settings; OptionError for values wrong together."""

    def writer_settings(self, raw: Mapping[str, str]) -> W:
        """``write_settings`` of ``raw`` options: what a query with them encodes with."""
        return self.write_settings(self.parse_writer_options(raw))

    @abstractmethod
    def check_input(self, schema: pa.Schema, settings: W) -> None:
        """Raise ValueError naming the columns at fault if rows of ``schema`` cannot be sent."""

    @abstractmethod
    def open_publisher(
        self, settings: W, application: str | None = None
    ) -> SinkPublisher | Requester:
        """Bind or connect, and announce; called once per Python worker and settings. A
        Requester when the settings make each row a request (EBUS ``service``).
        ``application``: the Spark application's name where the generic writer knows it (a
        format may name its client by it; the format itself never asks Spark)."""

    @abstractmethod
    def encode(self, batch: pa.RecordBatch, settings: W) -> Encoded:
        """The messages of a batch of input rows."""

    def encode_columns(self, batch: pa.RecordBatch, settings: W) -> EncodedBatch | None:
        """The same messages as ``encode``, column-wise, for the compiled send loop; None
        (the default) where this format, or this batch, has no column-wise encoding (the
        writer then sends ``encode``'s messages one by one)."""
        return None
