"""The generic layers' settings, typed: what the stream reader, its read tasks, capture and the
stream writer of any format take from the options they share with every other format
(``stream_options``). Each is made once per query, on the driver (``of``), and handed on as it
is (pickled to tasks, as JSON to a capture process on an executor); nothing below the driver
reads ``Options``. A format's own settings are in ``protocols/<name>/options.py``."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from spark_zmq.options import OptionError, Options
from spark_zmq.security import Curve
from spark_zmq.spool.index import Retention
from spark_zmq.spool.remote import ServerSettings
from spark_zmq.stream_options import (
    CAPTURE,
    CAPTURE_CORE,
    CAPTURE_IDLE_TIMEOUT,
    CAPTURE_NICE,
    ENDING_OFFSETS,
    FAIL_ON_DATA_LOSS,
    FLUSH_INTERVAL_MS,
    LEASE_TIMEOUT,
    MAX_BYTES_PER_BATCH,
    MAX_ENDPOINTS,
    MAX_IN_FLIGHT,
    MAX_MESSAGE_BYTES,
    MAX_MESSAGE_PARTS,
    MAX_PARTITIONS,
    MAX_RECORDS_PER_TRIGGER,
    MAX_SPOOL_BYTES,
    MAX_TRIGGER_DELAY,
    METRICS,
    MIN_PARTITIONS,
    MIN_RECORDS_PER_TRIGGER,
    MIN_SUBSCRIBERS,
    MODE,
    ON_SPOOL_WRITE_ERROR,
    RECEIVE_HIGH_WATER_MARK,
    REPLY_PATH,
    SEND_CORE,
    SPOOL_PATH,
    SPOOL_READER,
    SPOOL_READER_TIMEOUT,
    SPOOL_RETENTION,
    SPOOL_RETENTION_BYTES,
    SPOOL_SERVER,
    SPOOL_SERVER_CERTIFICATE,
    SPOOL_SERVER_KEY,
    STARTING_OFFSETS,
    WAIT_FOR_SUBSCRIBERS,
    WRITER_MAX_MESSAGE_BYTES,
    WRITER_MODE,
    OffsetSpec,
    curve_of,
)

#: a format's reader settings (its ``options.ReadSettings``)
S = TypeVar("S")

#: the default of option ``maxMessageParts``, for captures made without a query's options
DEFAULT_MAX_MESSAGE_PARTS: int = MAX_MESSAGE_PARTS.parsed_default()


@dataclass(frozen=True)
class SourceSettings:
    """Where a read starts and ends, where its spool is, where capture runs and how
    micro-batches are admitted.

    ``spool_path`` is None when option ``spoolPath`` is not set (a stream then spools to a
    default folder: ``given`` is what names it; a batch read cannot run);
    ``starting_offsets``/``ending_offsets`` are None when not set (each kind of read has its own
    default). ``placement`` is option ``capture``: driver, executors or service."""

    spool_path: str | None
    starting_offsets: OffsetSpec | None
    ending_offsets: OffsetSpec | None
    max_records_per_trigger: int | None
    min_records_per_trigger: int | None
    max_trigger_delay: float
    placement: str
    max_endpoints: int
    #: minPartitions: the fewest read tasks a read is split into (None: one per partition)
    min_partitions: int | None
    #: maxPartitions: the most read tasks ranges are grouped into (None: the driver's cores)
    max_partitions: int | None
    #: the options the user gave but spoolPath, as text, in name order
    given: tuple[tuple[str, str], ...]
    #: spoolServer: where capture on the driver (or a service) serves the spool (None: off)
    spool_server: ServerSettings | None
    #: spoolReader: the name a query reads a capture service's spool under
    reader_name: str = SPOOL_READER.parsed_default()

    @classmethod
    def of(cls, options: Options) -> SourceSettings:
        given = options.given_values()
        return cls(
            spool_path=options.get(SPOOL_PATH),
            starting_offsets=options.get(STARTING_OFFSETS),
            ending_offsets=options.get(ENDING_OFFSETS),
            max_records_per_trigger=options.get(MAX_RECORDS_PER_TRIGGER),
            min_records_per_trigger=options.get(MIN_RECORDS_PER_TRIGGER),
            max_trigger_delay=options.get(MAX_TRIGGER_DELAY),
            placement=options.get(CAPTURE),
            max_endpoints=options.get(MAX_ENDPOINTS),
            min_partitions=options.get(MIN_PARTITIONS),
            max_partitions=options.get(MAX_PARTITIONS),
            given=tuple((k, str(v)) for k, v in given.items() if k != SPOOL_PATH.name),
            spool_server=_spool_server(options),
            reader_name=options.get(SPOOL_READER),
        )

    @property
    def capture_on_executors(self) -> bool:
        return self.placement == "executors"

    @property
    def read_tasks(self) -> int:
        """The most read tasks ranges are grouped into: maxPartitions, else the cores this
        process may run on (planning runs on the driver's host; as Spark's ``local[*]``)."""
        if self.max_partitions is not None:
            return self.max_partitions
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def _spool_server(options: Options) -> ServerSettings | None:
    """Options spoolServer, spoolServerCertificate and spoolServerKey, as one setting."""
    served = options.get(SPOOL_SERVER)
    certificate, key = options.get(SPOOL_SERVER_CERTIFICATE), options.get(SPOOL_SERVER_KEY)
    if (certificate is None) != (key is None):
        raise OptionError(
            f"{options.format_name}: options spoolServerCertificate and spoolServerKey go "
            f"together (TLS needs both); "
            f"{'spoolServerKey' if key is None else 'spoolServerCertificate'} is missing"
        )
    if served is None or certificate is None:
        return served
    return dataclasses.replace(served, certificate=certificate, key=key)


@dataclass(frozen=True)
class RowSettings:
    """The options that shape the rows of a read task (``rows``)."""

    mode: str
    fail_on_data_loss: bool
    max_bytes_per_batch: int

    @classmethod
    def of(cls, options: Options) -> RowSettings:
        return cls(
            options.get(MODE), options.get(FAIL_ON_DATA_LOSS), options.get(MAX_BYTES_PER_BATCH)
        )


@dataclass(frozen=True)
class CaptureSettings:
    """What capture needs besides its partitions, from the query's options: capture on the
    driver, and each holder process on an executor (which gets it on its stdin)."""

    format_name: str
    max_spool_bytes: int
    max_message_bytes: int
    flush_interval: float | None  # seconds; None: auto (``capture.loop.auto_flush_interval``)
    lease_timeout: float
    idle_timeout: float
    drop_on_write_error: bool
    receive_hwm: int
    #: CURVE client keys (Z85 text), handed to the holder on its stdin, never on its command line
    curve: tuple[str | None, str | None, str | None] = (None, None, None)
    #: the receive loop (``spark_zmq.native.choose``): "auto", "native", "python", or None for
    #: the environment's
    core: str | None = None
    #: frames in one message at most (``maxMessageParts``; ``max_message_bytes`` bounds its bytes)
    max_message_parts: int = DEFAULT_MAX_MESSAGE_PARTS
    #: how long committed segments are kept (``spoolRetention``; None: no bound by age)
    retention_seconds: float | None = None
    #: most bytes of committed segments kept (``spoolRetentionBytes``; None: not bounded)
    retention_bytes: int | None = None
    #: nice value of capture's thread and its zmq I/O thread (``captureNice``; None: as is)
    nice: int | None = CAPTURE_NICE.parsed_default()
    #: a capture service: seconds a silent reader name holds data (``spoolReaderTimeout``;
    #: None: forever)
    reader_timeout: float | None = SPOOL_READER_TIMEOUT.parsed_default()
    #: where capture serves its metrics and probes (``metrics``: address, port; None: off)
    metrics: tuple[str, int] | None = None

    @classmethod
    def of(cls, options: Options) -> CaptureSettings:
        curve = curve_of(options)
        server, public, secret = (
            k.decode() if k else None
            for k in (curve.server_key, curve.public_key, curve.secret_key)
        )
        return cls(
            options.format_name,
            options.get(MAX_SPOOL_BYTES),
            options.get(MAX_MESSAGE_BYTES),
            _seconds(options.get(FLUSH_INTERVAL_MS)),
            options.get(LEASE_TIMEOUT),
            options.get(CAPTURE_IDLE_TIMEOUT),
            options.get(ON_SPOOL_WRITE_ERROR) == "drop",
            options.get(RECEIVE_HIGH_WATER_MARK),
            (server, public, secret),
            options.get(CAPTURE_CORE),
            options.get(MAX_MESSAGE_PARTS),
            options.get(SPOOL_RETENTION),
            options.get(SPOOL_RETENTION_BYTES),
            options.get(CAPTURE_NICE),
            options.get(SPOOL_READER_TIMEOUT),
            options.get(METRICS),
        )

    @classmethod
    def from_json(cls, given: dict[str, Any]) -> CaptureSettings:
        """The settings a holder got on its stdin (``dataclasses.asdict``, as JSON)."""
        metrics = given.get("metrics")
        return cls(
            **{**given, "curve": tuple(given["curve"]), "metrics": metrics and tuple(metrics)}
        )

    @property
    def retention(self) -> Retention:
        return Retention(self.retention_seconds, self.retention_bytes)

    def curve_keys(self) -> Curve:
        server, public, secret = (k.encode() if k else None for k in self.curve)
        return Curve(server, public, secret)


@dataclass(frozen=True)
class WriterSettings:
    """The generic writer's options, typed (the format's own are its ``WriteSettings``)."""

    mode: str
    max_message_bytes: int
    wait_for_subscribers: float
    min_subscribers: int
    #: the send loop: "auto", "native", "python", or None for the environment's
    send_core: str | None
    #: request writers only (REQUEST_WRITER_OPTIONS): requests waiting at once, and where
    #: their answers go
    max_in_flight: int
    reply_path: str | None

    @classmethod
    def of(cls, options: Options) -> WriterSettings:
        requests = options.defines(MAX_IN_FLIGHT)
        return cls(
            options.get(WRITER_MODE),
            options.get(WRITER_MAX_MESSAGE_BYTES),
            options.get(WAIT_FOR_SUBSCRIBERS),
            options.get(MIN_SUBSCRIBERS),
            options.get(SEND_CORE),
            options.get(MAX_IN_FLIGHT) if requests else 1,
            options.get(REPLY_PATH) if requests else None,
        )


@dataclass(frozen=True)
class ReaderSettings(Generic[S]):
    """All a query's reader takes from its options, made once on the driver: the generic
    reader's, its read tasks', capture's, and the format's own (``decoding``, which discovery
    and ``decode`` get). The stream reader carries it to its driver-side process and its
    tasks; placement, capture and the read tasks never see ``Options``."""

    source: SourceSettings
    rows: RowSettings
    capture: CaptureSettings
    decoding: S

    @classmethod
    def of(cls, options: Options, decoding: S) -> ReaderSettings[S]:
        return cls(
            SourceSettings.of(options),
            RowSettings.of(options),
            CaptureSettings.of(options),
            decoding,
        )


def _seconds(milliseconds: int | None) -> float | None:
    return None if milliseconds is None else milliseconds / 1000.0
