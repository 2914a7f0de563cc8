"""What a protocol module provides to the generic reader: discovery, its columns, and decoding.

A protocol module knows its wire format and how its endpoints are found; it knows nothing of
Spark's streaming machinery. The generic reader (``spark_zmq.spark.reader``) and the data plane
(``spark_zmq.capture``, ``spark_zmq.spool``) know nothing of any one wire format.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol as TypingProtocol

import pyarrow as pa
import zmq

from spark_zmq.options import Option, Options
from spark_zmq.spool.layout import Source


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

    @property
    def source(self) -> Source:
        return Source(self.address, self.metadata)

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


class StreamProtocol(ABC):
    """A wire format as seen by the generic stream reader."""

    #: the format name users pass to ``spark.readStream.format(...)``
    name: str
    #: options of this format, besides the generic reader's
    reader_options: tuple[Option, ...] = ()
    #: the columns this format adds after the shared ones
    columns: pa.Schema

    def check_options(self, options: Options) -> None:
        """Raise OptionError for option values that are wrong together; default: nothing."""

    @abstractmethod
    def discovery(self, options: Options, state: StateStore) -> Discovery:
        """The discovery to run on the driver side for a query with these options."""

    @abstractmethod
    def decode(self, frames: pa.ListArray, source: Source, options: Options) -> Decoded:
        """Decode captured messages (list of frames each) that came from ``source``."""


# -- writing -------------------------------------------------------------------------------------


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


def column_values(batch: pa.RecordBatch, name: str) -> list:
    """A column of input rows as Python values; nulls when the rows have no such column."""
    index = batch.schema.get_field_index(name)
    return batch.column(index).to_pylist() if index >= 0 else [None] * batch.num_rows


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


class SinkProtocol(ABC):
    """A wire format as seen by the generic stream writer."""

    name: str
    #: options of this format's writer, besides the generic writer's
    writer_options: tuple[Option, ...] = ()

    @abstractmethod
    def check_input(self, schema: pa.Schema, options: Options) -> None:
        """Raise ValueError naming the columns at fault if rows of ``schema`` cannot be sent."""

    @abstractmethod
    def open_publisher(self, options: Options) -> SinkPublisher | Requester:
        """Bind or connect, and announce; called once per Python worker and option set. A
        Requester when the options make each row a request (EBUS ``service``)."""

    @abstractmethod
    def encode(self, batch: pa.RecordBatch, options: Options) -> Encoded:
        """The messages of a batch of input rows."""
