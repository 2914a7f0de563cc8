"""Options of the generic stream writer, shared by every format, and of writers whose rows are
requests. Each is defined once (see ``spark_zmq.options``)."""

from __future__ import annotations

from typing import Any

from spark_zmq.options import (
    Option,
    byte_size,
    choice,
    non_negative_float,
    positive_int,
    text,
)
from spark_zmq.stream_options.curve import CURVE_OPTIONS
from spark_zmq.stream_options.reader import MODES

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
