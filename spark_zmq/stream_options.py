"""The options every format shares: the generic stream reader's, the generic writer's, and
CURVE's (applied by ``spark_zmq.security``). Each is defined once (see ``options``)."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlparse

from spark_zmq import security
from spark_zmq.errors import SparkZmqError
from spark_zmq.options import (
    Option,
    Options,
    boolean,
    byte_size,
    choice,
    duration,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    text,
)

# ---------------------------------------------------------------------------------------------
# CURVE security, for readers and writers of every format (spark_zmq.security applies them).

KEY = "a 40-character Z85 key or a zmq.auth key file"

CURVE_SERVER_KEY = Option(
    "curveServerKey",
    security.public_key,
    KEY,
    None,
    "CURVE: the public key of the server this side connects to (publisher, broker, "
    "gobyd); the connection is then encrypted and the server authenticated.",
)

CURVE_PUBLIC_KEY = Option(
    "curvePublicKey",
    security.public_key,
    KEY,
    None,
    "CURVE: this side's public key (derived from `curveSecretKey` when not given).",
)

CURVE_SECRET_KEY = Option(
    "curveSecretKey",
    security.secret_key,
    KEY,
    None,
    "CURVE: this side's secret key. A side that binds (a writer's socket, a reader's "
    "management port) becomes a CURVE server; a client without one uses a fresh key "
    "pair.",
)

CURVE_CLIENT_KEYS = Option(
    "curveClientKeys",
    security.public_keys,
    "comma-separated keys or key files, or a folder of .key files",
    None,
    "CURVE: the client public keys a CURVE server of this side accepts. Default: any "
    "client that completes the handshake (the management port then refuses all).",
)

CURVE_OPTIONS: tuple[Option[Any], ...] = (
    CURVE_SERVER_KEY,
    CURVE_PUBLIC_KEY,
    CURVE_SECRET_KEY,
    CURVE_CLIENT_KEYS,
)


def curve_of(options: Options) -> security.Curve:
    """The query's CURVE settings, from its options (a reader's or a writer's)."""
    return security.Curve.of_keys(
        options.get(CURVE_SERVER_KEY),
        options.get(CURVE_PUBLIC_KEY),
        options.get(CURVE_SECRET_KEY),
        options.get(CURVE_CLIENT_KEYS),
    )


# ---------------------------------------------------------------------------------------------
# startingOffsets and endingOffsets (spark_zmq.spark.offsets.resolve applies them to a spool)

#: earliest, latest, or an offset per partition
OffsetSpec = str | dict[str, int]
#: in a JSON offset spec, as in Kafka's: the first offset still held, and the next one written
EARLIEST, LATEST = -2, -1


def starting_offsets(value: str) -> OffsetSpec:
    """Option parser: ``earliest``, ``latest`` or JSON ``{"<partition>": offset}``."""
    return _offset_spec(value, ("earliest", "latest"))


def ending_offsets(value: str) -> OffsetSpec:
    """Option parser: ``latest`` or JSON ``{"<partition>": offset}`` (no ``earliest``: a
    read that ends where it starts reads nothing)."""
    return _offset_spec(value, ("latest",))


def _offset_spec(value: str, words: tuple[str, ...]) -> OffsetSpec:
    if value.strip().lower() in words:
        return value.strip().lower()
    if not value.strip().startswith("{"):
        raise ValueError(value)
    doc = json.loads(value)  # ValueError: the option's error says what is accepted
    if not isinstance(doc, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= EARLIEST for v in doc.values()
    ):
        raise ValueError(value)
    return {str(k): int(v) for k, v in doc.items()}


def retention_duration(value: str) -> float | None:
    """Option parser: a duration (``duration``), or ``forever`` (None: no bound by age)."""
    if value.strip().lower() == "forever":
        return None
    return duration(value)


# ---------------------------------------------------------------------------------------------
# spoolPath: a folder on a POSIX file system

#: a URI's scheme, as an object store's paths begin (``s3a://``, ``abfss://``, ``dbfs:/``)
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):/")


class NotAPosixFolder(SparkZmqError, ValueError):
    """A spoolPath on storage the spool cannot live on (an object store, HDFS, DBFS)."""


def spool_folder(value: str) -> str:
    """Option parser: a folder path; a ``file:`` URI is taken as its path. Any other URI is
    refused: the spool needs what a POSIX file system gives (``flock`` for one writer,
    ``rename`` that replaces a file whole, ``mkdir`` that one claimant wins), which object
    stores do not; taken as a path, ``s3a://b/x`` would quietly become the local ``s3a:/b/x``."""
    match = _SCHEME.match(value.strip())
    if match is None:
        return value
    scheme = match.group(1).lower()
    if scheme == "file":
        return urlparse(value.strip()).path
    hint = " (on Databricks, the FUSE path /dbfs/... is a local path)" if scheme == "dbfs" else ""
    raise NotAPosixFolder(
        f"{scheme}:// is not a POSIX file system: the spool needs flock, atomic rename and "
        f"mkdir; give a local folder or an NFS mount{hint}"
    )


# ---------------------------------------------------------------------------------------------
# Options of the generic stream reader, shared by every format.


def capture_nice(value: str) -> int | None:
    """``captureNice``: a nice value (-20..19), or None for ``off``."""
    if value.strip().lower() == "off":
        return None
    number = int(value.strip())
    if not -20 <= number <= 19:
        raise ValueError("not a nice value")
    return number


MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")

MODE = Option(
    "mode",
    choice(*MODES),
    "one of " + ", ".join(MODES),
    "PERMISSIVE",
    "What to do with a malformed message: keep it as a row with `error` set and the raw "
    "bytes in `payload`, drop it (counted and logged), or fail the query. Gap rows "
    "(lost messages, `error` starting with `gap:`) are not malformed: see "
    "`failOnDataLoss`.",
)

FAIL_ON_DATA_LOSS = Option(
    "failOnDataLoss",
    boolean,
    "true or false",
    "false",
    "What to do when messages were lost before they reached the spool (a dropped "
    "connection, the spool's bound, a partition without a holder, a damaged segment): "
    "deliver a gap row (`error` starting with `gap:`, null `payload`, counted in the "
    "progress line), or fail the query naming the partition, offset and cause. False by "
    "default because a push source cannot ask a peer to send again: failing would stop "
    "capture too and lose more.",
)

MAX_RECORDS_PER_TRIGGER = Option(
    "maxRecordsPerTrigger",
    positive_int,
    "a positive integer",
    None,
    "Admission control: at most this many messages per micro-batch over all partitions.",
)

MIN_RECORDS_PER_TRIGGER = Option(
    "minRecordsPerTrigger",
    positive_int,
    "a positive integer",
    None,
    "Admission control: a micro-batch waits until this many messages are available, but "
    "not longer than `maxTriggerDelay` after the previous one, so a slow stream makes "
    "fewer, larger files. Ignored by `Trigger.AvailableNow`.",
)

MAX_TRIGGER_DELAY = Option(
    "maxTriggerDelay",
    duration,
    "a duration such as 30s, 15m or 500ms (a bare number: seconds)",
    "15m",
    "With `minRecordsPerTrigger`: the longest wait for a micro-batch that has fewer "
    "messages than that.",
)

STARTING_OFFSETS = Option(
    "startingOffsets",
    starting_offsets,
    'earliest, latest, or JSON {"<partition>": offset} (-2: earliest, -1: latest)',
    None,
    "Where a read starts in a spool that already holds messages. A new stream (no "
    "checkpoint), default `latest`: after them (what is captured from now on), or at the "
    "first one still held (`earliest`: the history `spoolRetention` kept, committed or "
    "not, as Kafka's earliest; the default with `capture=service`, where it is all that "
    "the capture service holds); a restart from a checkpoint goes on where it stopped "
    "either way. A batch read, default `earliest`. In JSON, a partition not named starts "
    "at earliest.",
)

ENDING_OFFSETS = Option(
    "endingOffsets",
    ending_offsets,
    'latest, or JSON {"<partition>": offset} (-1: latest)',
    None,
    "Batch reads only: where the read ends (exclusive). Default `latest`: everything the "
    "spool holds when the read is planned. In JSON, a partition not named ends at latest.",
)

MIN_PARTITIONS = Option(
    "minPartitions",
    positive_int,
    "a positive integer (read tasks)",
    None,
    "The fewest read tasks a micro-batch (or a batch read) is split into, as Kafka's "
    "`minPartitions`. Default: one task per partition with new messages. When there are "
    "fewer such partitions than this, each partition's offset range is cut into "
    "contiguous pieces in proportion to its size, so one busy endpoint is decoded and "
    "written by several tasks at once (a sink such as Parquet that one task per "
    "endpoint cannot keep up with). The rows are the same, gap rows included once; each "
    "task costs Spark a few milliseconds, so set it to about the number of cores the "
    "query's tasks get.",
)
SPOOL_PATH = Option(
    "spoolPath",
    spool_folder,
    "a folder path on a POSIX file system (local disk or NFS; a file: URI is its path)",
    None,
    "Where captured messages are kept until Spark commits them, and after that for "
    "`spoolRetention` (batch reads of it replay them). Default: a folder under "
    "the local temporary directory derived from the format and options, so a restart with "
    "the same options finds it; its path is logged.",
)

MAX_BYTES_PER_BATCH = Option(
    "maxBytesPerBatch",
    byte_size,
    "a size such as 64m or 1048576",
    "64m",
    "Largest Arrow batch a read task hands to Spark (as well as at most 65536 rows): "
    "it bounds the read-side Python worker's memory and keeps each batch well inside the "
    "JVM's direct memory (which is the heap size unless set), however large the "
    "messages. A single larger message goes alone in its batch.",
)

MAX_SPOOL_BYTES = Option(
    "maxSpoolBytes",
    byte_size,
    "a size such as 4g, 512m or 1048576",
    "4g",
    "Bound of the spool on disk. At the bound new messages are dropped, counted, logged "
    "and reported as a row with `error` set (a gap): those of the partitions that hold "
    "more than their share of the bound (the bound divided among the partitions), so "
    "that one flooding peer does not cost its neighbours their messages. Before any "
    "message is dropped, committed messages kept by `spoolRetention` are deleted, oldest "
    "first: history never costs capture a message.",
)

SPOOL_RETENTION = Option(
    "spoolRetention",
    retention_duration,
    "a duration such as 7d, 12h or 30m (a bare number: seconds), 0, or forever",
    "7d",
    "How long messages are kept in the spool after Spark committed them, counted from when "
    "they were written, so that batch reads (`spark.read`) and new streams with "
    "`startingOffsets=earliest` can replay them (debugging, backfills). Default 7 days, "
    "as Kafka's `retention.ms`; `0` deletes them at commit. Only committed messages are "
    "ever deleted; retention runs in the process that writes the partition (at each "
    "commit and on capture's flush tick).",
)

SPOOL_RETENTION_BYTES = Option(
    "spoolRetentionBytes",
    byte_size,
    "a size such as 1g, 512m or 1048576",
    None,
    "Most bytes of committed messages the spool keeps (with `capture=executors`, each "
    "partition's capture process keeps this much); older ones are deleted first. Not set "
    "by default: `maxSpoolBytes` already bounds them, since committed messages are deleted "
    "first whenever a write needs room.",
)

MAX_MESSAGE_BYTES = Option(
    "maxMessageBytes",
    byte_size,
    "a size such as 64m or 1048576",
    "64m",
    "Largest message accepted, all its frames together. A larger message is dropped "
    "whole (nothing of it is stored, the next one is read as usual) and reported as a gap "
    "row that counts consecutive such messages (see `failOnDataLoss`), logged once and "
    "then at most once a minute per endpoint. A single frame over it is caught earlier by "
    "zmq (ZMQ_MAXMSGSIZE), which drops the connection; capture reconnects and reports "
    "the drop as a gap row.",
)

MAX_MESSAGE_PARTS = Option(
    "maxMessageParts",
    positive_int,
    "a positive integer (frames)",
    "1000",
    "Most frames in one message accepted. A message with more is dropped whole and "
    "reported like one over `maxMessageBytes`: it bounds what capture spends on a message "
    "of many small or empty frames, which `maxMessageBytes` alone does not.",
)

MAX_ENDPOINTS = Option(
    "maxEndpoints",
    positive_int,
    "a positive integer",
    "1000",
    "Most endpoints (partitions) a query reads at once. Discovery takes what peers "
    "announce, unauthenticated: beyond this bound a new endpoint waits (logged, with "
    "counts) until one that is read leaves, so that no peer can make capture open "
    "sockets, spool folders or capture processes without end.",
)

RECEIVE_HIGH_WATER_MARK = Option(
    "receiveHighWaterMark",
    non_negative_int,
    "a non-negative integer (messages)",
    "10000",
    "Messages zmq queues per endpoint before capture takes them (ZMQ_RCVHWM): enough for "
    "capture's pauses (a spool write). A peer that sends faster than capture takes is "
    "pushed back beyond it (TCP flow control) and drops or waits at its own send queue; "
    "the episode is logged once. Memory per endpoint is about this many times the "
    "message size, plus capture's 32 MiB buffer: lower it for large messages. 0: no "
    "bound (a backlog grows in memory).",
)

FLUSH_INTERVAL_MS = Option(
    "flushIntervalMs",
    positive_int,
    "a positive integer (milliseconds)",
    "100",
    "How often capture writes what it received to the spool (it also writes at every "
    "micro-batch, every 65536 messages and every 32 MiB).",
)

ON_SPOOL_WRITE_ERROR = Option(
    "onSpoolWriteError",
    choice("fail", "drop"),
    "fail or drop",
    "fail",
    "When the spool's storage refuses a write (full disk, read-only, I/O error): fail "
    "the query naming the spool and the cause, or drop new messages while it lasts, "
    "counted, logged and reported as a row with `error` set (a gap). Either way the "
    "spool keeps everything written before.",
)

CAPTURE = Option(
    "capture",
    choice("driver", "executors", "service"),
    "driver, executors or service",
    "driver",
    "Where the zmq sockets live: in the driver-side reader process (one machine), or in "
    "one capture process per partition on the executors, started by tasks and handed "
    "over when an executor is lost, or in a capture service that runs without a query "
    "(`spark-zmq capture --spool PATH`, see the jobs page): the query then starts no "
    "discovery and no capture, reads the spool the service fills (`spoolPath` must name "
    "it) and hands the service what Spark committed, so a scheduled "
    "`Trigger.AvailableNow` job loses nothing between its runs; its `startingOffsets` "
    "default is `earliest` (everything the service holds, within `spoolRetention`). "
    "With `executors`, `spoolPath` must name storage that every node reaches.",
)

CAPTURE_CORE = Option(
    "captureCore",
    choice("auto", "native", "python"),
    "auto, native or python",
    None,
    "Which receive loop capture runs: `native`, the compiled core (C, without Python's "
    "lock, one Arrow buffer per flush), or `python`, the pure-Python loop; `auto` takes "
    "the compiled core when it loads and otherwise logs once that it runs the Python "
    "loop. Not set: the environment variable `SPARK_ZMQ_CAPTURE_CORE` of the capture "
    "process, else `auto`.",
)

CAPTURE_NICE = Option(
    "captureNice",
    capture_nice,
    "a nice value from -20 to 19, or off",
    "-10",
    "Scheduling priority of capture's receive thread and its zmq I/O thread (Linux nice "
    "value; Spark's tasks run at 0): with a lower value they get a core as soon as "
    "messages arrive, however busy Spark keeps the host, so publishers that drop at a "
    "full send queue lose nothing while a micro-batch runs. Raising priority needs "
    "CAP_SYS_NICE (root) or RLIMIT_NICE; without it capture logs one warning and runs as "
    "it is. `off`: leave the priority alone.",
)
LEASE_TIMEOUT = Option(
    "leaseTimeout",
    positive_float,
    "a positive number of seconds",
    "10",
    "`capture=executors`: a partition whose capture process has not renewed its lease "
    "for this long is taken over by a new one (an executor lost).",
)

CAPTURE_IDLE_TIMEOUT = Option(
    "captureIdleTimeout",
    positive_float,
    "a positive number of seconds",
    "60",
    "`capture=executors`: a capture process ends when the query has not renewed its "
    "assignment for this long (the query stopped or lost its driver).",
)

READER_OPTIONS: tuple[Option[Any], ...] = (
    MODE,
    FAIL_ON_DATA_LOSS,
    MAX_RECORDS_PER_TRIGGER,
    MIN_RECORDS_PER_TRIGGER,
    MAX_TRIGGER_DELAY,
    STARTING_OFFSETS,
    ENDING_OFFSETS,
    MIN_PARTITIONS,
    SPOOL_PATH,
    MAX_BYTES_PER_BATCH,
    MAX_SPOOL_BYTES,
    SPOOL_RETENTION,
    SPOOL_RETENTION_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_MESSAGE_PARTS,
    MAX_ENDPOINTS,
    RECEIVE_HIGH_WATER_MARK,
    FLUSH_INTERVAL_MS,
    ON_SPOOL_WRITE_ERROR,
    CAPTURE,
    CAPTURE_CORE,
    CAPTURE_NICE,
    LEASE_TIMEOUT,
    CAPTURE_IDLE_TIMEOUT,
    *CURVE_OPTIONS,
)


# ---------------------------------------------------------------------------------------------
# Options of the generic stream writer, shared by every format.

WRITER_MODE = Option(
    "mode",
    choice(*MODES),
    "one of " + ", ".join(MODES),
    "PERMISSIVE",
    "What to do with a row that cannot be sent (no event, a wrong id, a message over "
    "`maxMessageBytes`, ...): skip it with a warning naming the first such row of the "
    "task, skip it counting only, or fail the batch naming the row. For requests "
    "(`ebus` with `service`): a refused request fails the batch under FAILFAST only; an "
    "unanswered (expired) one fails it unless DROPMALFORMED, which counts it and records "
    "it in `replyPath`.",
)

WRITER_MAX_MESSAGE_BYTES = Option(
    "maxMessageBytes",
    byte_size,
    "a size such as 64m or 1048576",
    "64m",
    "Largest message sent; a larger row is handled per `mode`.",
)

WAIT_FOR_SUBSCRIBERS = Option(
    "waitForSubscribers",
    non_negative_float,
    "a number of seconds",
    "0",
    "Time given to subscribers to connect to a new publisher: before it sends an "
    "event, a publisher waits until `minSubscribers` subscriptions match it (seen "
    "through XPUB), but only until this many seconds after its first send; then it "
    "sends anyway, with a warning. The bound is per publisher (one per executor Python "
    "worker), so however many events, tasks and batches it sends, it waits no longer "
    "than this in all. Sending anyway is deliberate: a publisher cannot tell a late "
    "subscriber from one that never comes, and those that are there keep the batch; the "
    "driver's line for the batch is then a warning naming the topics.",
)

MIN_SUBSCRIBERS = Option(
    "minSubscribers",
    positive_int,
    "a positive integer",
    "1",
    "How many matching subscriptions `waitForSubscribers` waits for.",
)

SEND_HIGH_WATER_MARK = Option(
    "sendHighWaterMark",
    positive_int,
    "a positive number of messages",
    "100000",
    "Messages queued per peer (subscriber, or broker); when a queue is full a send waits "
    "(XPUB_NODROP: back-pressure, not loss).",
)

SEND_TIMEOUT = Option(
    "sendTimeout",
    non_negative_float,
    "a number of seconds",
    "60",
    "How long a send may wait on back-pressure before the task fails.",
)

SEND_CORE = Option(
    "sendCore",
    choice("auto", "native", "python"),
    "auto, native or python",
    None,
    "How a writer task sends: `native`, the compiled send loop (the format encodes each "
    "Arrow batch column-wise and C sends its messages without Python's lock), or "
    "`python`, an encoded row and a Python call per message; `auto` takes the compiled "
    "loop when it loads and otherwise logs once that it sends through Python. The wire "
    "bytes are the same. Requests (`ebus` with `service`) go through the EBUS client "
    "either way. Not set: the environment variable `SPARK_ZMQ_SEND_CORE` of the "
    "executor's Python worker, else `auto`.",
)

WRITER_OPTIONS: tuple[Option[Any], ...] = (
    WRITER_MODE,
    WRITER_MAX_MESSAGE_BYTES,
    WAIT_FOR_SUBSCRIBERS,
    MIN_SUBSCRIBERS,
    SEND_HIGH_WATER_MARK,
    SEND_TIMEOUT,
    SEND_CORE,
    *CURVE_OPTIONS,
)


# ---------------------------------------------------------------------------------------------
# Options of writers whose rows are requests that get answers (EBUS `service`); a format that
# has such a writer adds these to its writer options.

MAX_IN_FLIGHT = Option(
    "maxInFlight",
    positive_int,
    "a positive integer",
    "100",
    "Requests a task keeps waiting for an answer at once; further rows wait for answers.",
)

REPLY_PATH = Option(
    "replyPath",
    text,
    "a folder path",
    None,
    "Where the answers are written: one Parquet file per task, "
    "`<replyPath>/batchId=<n>/part-<partition>.parquet`, with columns `requestId`, "
    "`status` and `data` (JSON text). A retried task replaces its file. Default: not "
    "written.",
)

REQUEST_WRITER_OPTIONS: tuple[Option[Any], ...] = (
    MAX_IN_FLIGHT,
    REPLY_PATH,
)
