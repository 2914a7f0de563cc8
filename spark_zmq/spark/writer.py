"""The one generic stream writer: Spark's calls on one side, a protocol's publisher on the other.

``write`` runs in executor Python workers. Each worker keeps one publisher per format and option
set for its whole life (``_publishers``), so announcements and subscriber connections survive
from one micro-batch to the next. A task encodes its Arrow batches through the protocol,
applies ``mode`` to rows that cannot be sent, waits for subscribers if asked, and sends; the
publisher blocks on back-pressure rather than dropping. Its commit message carries its counts,
and ``commit`` on the driver logs the totals of the batch.

A task sends a batch in one of two ways (``sending``): encoded column-wise, through the
compiled send loop, or encoded row by row, a ``send`` per message (the Python path, the
fallback). Both send the same bytes and apply ``mode``, ``maxMessageBytes`` and
``waitForSubscribers`` the same way.

When the protocol opens a ``Requester`` instead (EBUS ``service``), each row is a request: a task
keeps at most ``maxInFlight`` of them waiting, applies ``mode`` to the outcomes (refused,
unanswered) and writes them to ``replyPath``. Request ids are named after the query, batch,
partition and row, so a retried task sends the same ids again.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from types import ModuleType
from typing import Generic, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from spark_zmq.errors import RowError
from spark_zmq.extras import require
from spark_zmq.log import configure_spark_worker_logging, logger
from spark_zmq.options import Options
from spark_zmq.protocols.arrow import distinct_rows, message_sizes, refuse_rows
from spark_zmq.protocols.contract import (
    ANSWERED,
    REFUSED,
    UNANSWERED,
    Encoded,
    EncodedBatch,
    Outcome,
    Requester,
    SinkProtocol,
    SinkPublisher,
)
from spark_zmq.spark.sending import ColumnSender, compiled_send_loop
from spark_zmq.stream_settings import WriterSettings

#: the format's writer settings
W = TypeVar("W")


class UnsendableRowError(RowError):
    """A row that cannot be sent, under ``mode=FAILFAST``."""


class FailedRequestError(RowError):
    """A request refused (under FAILFAST) or left unanswered (unless DROPMALFORMED)."""


@dataclass
class SendCounts(WriterCommitMessage):
    """What one task did."""

    publisher: str
    rows: int = 0
    sent: int = 0
    skipped: int = 0
    first_error: str | None = None
    #: outcomes of requests (writers whose rows are requests)
    answered: int = 0
    refused: int = 0
    unanswered: int = 0
    #: how the task's batches were sent: COMPILED, PYTHON or both (in that order)
    send_loops: tuple[str, ...] = ()
    #: topics sent while fewer than minSubscribers matched them (waitForSubscribers ran out)
    short_of_subscribers: tuple[str, ...] = ()

    def sent_by(self, loop: str) -> None:
        if loop not in self.send_loops:
            self.send_loops = tuple(sorted((*self.send_loops, loop)))


#: the send loops a task's batches go through (``spark_zmq.spark.sending``)
COMPILED, PYTHON = "compiled", "python"


_publishers: dict[tuple[str, str], SinkPublisher | Requester] = {}
_publishers_lock = threading.Lock()
#: id of a shared publisher -> end of its window for subscribers (see _wait_for_subscribers)
_wait_deadlines: dict[int, float] = {}
#: answers written to replyPath
REPLY_SCHEMA = pa.schema(
    [
        pa.field("requestId", pa.string()),
        pa.field("status", pa.string()),
        pa.field("data", pa.string()),
    ]
)


def shared_publisher(protocol: SinkProtocol[W], settings: W) -> SinkPublisher | Requester:
    """This process's publisher for the format and its writer settings (what shapes the
    publisher: the format's options, its socket's and CURVE's), opened on first use."""
    key = (protocol.name, repr(settings))
    with _publishers_lock:
        publisher = _publishers.get(key)
        if publisher is None:
            publisher = _publishers[key] = protocol.open_publisher(settings, application_name())
            logger.info("%s writer: publisher %s opened in process", protocol.name, publisher.name)
            if len(_publishers) == 1:
                atexit.register(close_publishers)
        return publisher


def application_name() -> str | None:
    """The Spark application's name, as a writer task sees it (a local property of its job);
    None outside a Spark task."""
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        return context.getLocalProperty("spark.app.name") if context is not None else None
    except Exception:  # outside Spark
        return None


def subscriber_wait_deadline(publisher: SinkPublisher, wait: float) -> float:
    """When ``publisher``'s window for subscribers to connect ends (``time.monotonic()``):
    ``wait`` seconds after the first call for it."""
    with _publishers_lock:
        return _wait_deadlines.setdefault(id(publisher), time.monotonic() + wait)


def close_publishers() -> None:
    with _publishers_lock:
        for publisher in _publishers.values():
            publisher.close()
        _publishers.clear()
        _wait_deadlines.clear()


class ZmqStreamWriter(DataSourceStreamArrowWriter, Generic[W]):
    """Generic micro-batch writer for any ``SinkProtocol``. Its settings, the generic
    writer's and the format's, are made here, once per query on the driver, and pickled to
    the tasks with it."""

    def __init__(self, protocol: SinkProtocol[W], options: Options) -> None:
        self.protocol = protocol
        self.settings = WriterSettings.of(options)
        self.format_settings = protocol.write_settings(options)

    # -- executors -----------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SendCounts:
        configure_spark_worker_logging()
        require(self.protocol.name, f"format({self.protocol.name!r})")
        publisher = shared_publisher(self.protocol, self.format_settings)
        if isinstance(publisher, Requester):
            return self._write_requests(publisher, iterator)
        counts = SendCounts(publisher.name)
        checked: set[bytes] = set()
        native = compiled_send_loop(self.settings.send_core)
        for batch in iterator:
            columns = self.protocol.encode_columns(batch, self.format_settings) if native else None
            if native is not None and columns is not None:
                self._send_columns(native, columns, publisher, counts, checked)
                counts.sent_by(COMPILED)
            else:
                encoded = self.protocol.encode(batch, self.format_settings)
                self._send_messages(encoded, publisher, counts, checked)
                counts.sent_by(PYTHON)
        self._warn_skipped(counts)
        return counts

    def _send_messages(
        self, encoded: Encoded, publisher: SinkPublisher, counts: SendCounts, checked: set[bytes]
    ) -> None:
        """The Python path: a ``send`` per message."""
        self._check_rows(encoded, counts)
        counts.rows += len(encoded.messages)
        publisher.declare(encoded.names)
        for message, topic in zip(encoded.messages, encoded.topics):
            if message is None or topic is None:
                continue
            if topic not in checked:
                checked.add(topic)
                self._wait_for_subscribers(publisher, topic, encoded.names, counts)
            publisher.send(message)
            counts.sent += 1

    def _send_columns(
        self,
        native: ModuleType,
        encoded: EncodedBatch,
        publisher: SinkPublisher,
        counts: SendCounts,
        checked: set[bytes],
    ) -> None:
        """The compiled loop: the same checks and waits as ``_send_messages``, per batch; the
        messages between two waits go out in runs of RUN_ROWS rows, each in one call."""
        encoded = self._check_columns(encoded, counts)
        sender = ColumnSender(native, encoded)
        counts.rows += len(encoded)
        publisher.declare(encoded.names)
        start = 0
        for first, topic in self._first_sends(encoded, checked):
            counts.sent += sender.send(publisher, start, first)
            self._wait_for_subscribers(publisher, topic, encoded.names, counts)
            start = first
        counts.sent += sender.send(publisher, start, len(encoded))

    def _write_requests(
        self, requester: Requester, iterator: Iterator[pa.RecordBatch]
    ) -> SendCounts:
        """Send each row as a request, at most maxInFlight waiting; judge and keep outcomes."""
        counts = SendCounts(requester.name)
        query, batch_id, partition = _task_names()
        waiting: deque[Future] = deque()
        outcomes: list[Outcome] = []
        for batch in iterator:
            encoded = self.protocol.encode(batch, self.format_settings)
            self._check_rows(encoded, counts)
            for index, message in enumerate(encoded.messages):
                if message is None:
                    continue
                while len(waiting) >= self.settings.max_in_flight:
                    outcomes.append(waiting.popleft().result())
                request_id = f"{query}/{batch_id}/{partition}/{counts.rows + index}"
                waiting.append(requester.request(message, request_id))
                counts.sent += 1
            counts.rows += batch.num_rows
        outcomes.extend(future.result() for future in waiting)
        self._warn_skipped(counts)
        self._judge(outcomes, counts)
        if self.settings.reply_path and outcomes:
            write_outcomes(self.settings.reply_path, batch_id, partition, outcomes)
        return counts

    def _judge(self, outcomes: list[Outcome], counts: SendCounts) -> None:
        """Count the outcomes; fail on the first one that ``mode`` does not let pass."""
        mode = self.settings.mode
        for outcome in outcomes:
            setattr(counts, outcome.kind, getattr(counts, outcome.kind) + 1)
            if outcome.kind == REFUSED and mode == "FAILFAST":
                raise FailedRequestError(
                    f"{self.protocol.name} writer: {outcome.detail} (mode=FAILFAST; "
                    f"PERMISSIVE or DROPMALFORMED record refused requests and go on)"
                )
            if outcome.kind == UNANSWERED and mode != "DROPMALFORMED":
                raise FailedRequestError(
                    f"{self.protocol.name} writer: {outcome.detail} (mode={mode}; "
                    f"DROPMALFORMED counts unanswered requests, records them in replyPath and "
                    f"goes on)"
                )
        if counts.unanswered:
            first = next(o for o in outcomes if o.kind == UNANSWERED)
            logger.warning(
                "%s writer: %d of %d requests got no answer (mode=DROPMALFORMED); the first: %s",
                self.protocol.name,
                counts.unanswered,
                len(outcomes),
                first.detail,
            )

    def _warn_skipped(self, counts: SendCounts) -> None:
        if counts.skipped and self.settings.mode == "PERMISSIVE":
            logger.warning(
                "%s writer: %s skipped %d rows that cannot be sent; the first: %s",
                self.protocol.name,
                counts.publisher,
                counts.skipped,
                counts.first_error,
            )

    def _check_rows(self, encoded: Encoded, counts: SendCounts) -> None:
        """Mark rows over maxMessageBytes, then apply ``mode`` to every unsendable row."""
        limit = self.settings.max_message_bytes
        for index, message in enumerate(encoded.messages):
            if message is not None and sum(map(len, message)) > limit:
                encoded.messages[index] = None
                encoded.errors[index] = _too_large(sum(map(len, message)), limit)
        unsendable = [(i, error) for i, error in enumerate(encoded.errors) if error is not None]
        if unsendable:
            self._skip(unsendable[0], len(unsendable), counts)

    def _check_columns(self, encoded: EncodedBatch, counts: SendCounts) -> EncodedBatch:
        """``_check_rows`` for a batch encoded column-wise: the batch to send (rows over
        maxMessageBytes refused)."""
        limit = self.settings.max_message_bytes
        sizes = message_sizes(encoded)
        over = np.flatnonzero(sizes > limit)
        if len(over):
            encoded = refuse_rows(encoded, over, [_too_large(int(sizes[i]), limit) for i in over])
        errors = encoded.errors
        if errors.null_count < len(errors):
            first = pc.index(pc.is_valid(errors), True).as_py()
            self._skip((first, errors[first].as_py()), len(errors) - errors.null_count, counts)
        return encoded

    def _skip(self, first: tuple[int, str], count: int, counts: SendCounts) -> None:
        """Apply ``mode`` to a batch's ``count`` unsendable rows, ``first`` (its index in the
        batch, and why) the first of them: fail on it, or count them all as skipped."""
        index, error = first
        if self.settings.mode == "FAILFAST":
            raise UnsendableRowError(
                f"{self.protocol.name} writer: row {counts.rows + index + 1} of this "
                f"task cannot be sent: {error} (mode=FAILFAST; mode=PERMISSIVE or "
                f"DROPMALFORMED skips such rows)"
            )
        counts.skipped += count
        counts.first_error = counts.first_error or error

    def _first_sends(self, encoded: EncodedBatch, checked: set[bytes]) -> list[tuple[int, bytes]]:
        """Where the batch first sends each topic that the task has not sent before (row,
        topic), in row order: ``waitForSubscribers`` waits there, as the Python path waits
        before the topic's first message. Adds them to ``checked``. Nothing without a wait."""
        if not self.settings.wait_for_subscribers:
            return []
        rows, topics = distinct_rows(encoded.topics)
        firsts = np.unique(rows, return_index=True)[1]
        new = [
            (int(first), topic)
            for first, (topic,) in zip(firsts, topics)
            if topic is not None and topic not in checked
        ]
        checked.update(topic for _, topic in new)
        return new

    def _wait_for_subscribers(
        self,
        publisher: SinkPublisher,
        topic: bytes,
        names: dict[bytes, str | None],
        counts: SendCounts,
    ) -> None:
        """Wait until ``minSubscribers`` subscriptions match ``topic``, but only within the
        publisher's window: ``waitForSubscribers`` seconds from its first wait. Subscribers
        get that long to connect after a publisher appears; however many events, tasks and
        batches follow, a publisher waits no longer than that in all.

        When the window ends short of them the rows are sent anyway: a publisher cannot tell
        a subscriber that is late from one that never comes, and the subscribers that are
        there must not lose the batch. The task warns, and the driver's line for the batch
        names the topic (``counts``)."""
        wait, wanted = self.settings.wait_for_subscribers, self.settings.min_subscribers
        if not wait:
            return
        deadline = subscriber_wait_deadline(publisher, wait)
        while publisher.subscribers(topic) < wanted:
            if time.monotonic() >= deadline:
                shown = names.get(topic) or topic.hex()
                counts.short_of_subscribers += (shown,)
                logger.warning(
                    "%s writer: %s: fewer than %d subscribers to %s when its "
                    "waitForSubscribers window (%g s from its first send) ended; "
                    "sending anyway",
                    self.protocol.name,
                    publisher.name,
                    wanted,
                    shown,
                    wait,
                )
                return
            time.sleep(0.01)

    # -- driver --------------------------------------------------------------------------------

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        configure_spark_worker_logging()
        done = [m for m in messages if isinstance(m, SendCounts)]
        sent = sum(m.sent for m in done)
        skipped = sum(m.skipped for m in done)
        publishers = sorted({m.publisher for m in done})
        loops = sorted({loop for m in done for loop in m.send_loops})
        line = (
            f"{self.protocol.name} writer: batch {batchId}: sent {sent} messages from "
            f"{len(done)} tasks through {', '.join(publishers) or 'no publisher'}"
        )
        if loops:
            line += f" ({' and '.join(loops)} send loop{'s' if len(loops) > 1 else ''})"
        if any(m.answered or m.refused or m.unanswered for m in done):
            line += "; " + ", ".join(
                f"{sum(getattr(m, kind) for m in done)} {kind}"
                for kind in (ANSWERED, REFUSED, UNANSWERED)
            )
        if skipped:
            first = next(m.first_error for m in done if m.first_error)
            line += f"; skipped {skipped} rows that cannot be sent (first: {first})"
        short = sorted({topic for m in done for topic in m.short_of_subscribers})
        if short:
            line += (
                f"; sent to fewer than minSubscribers ({self.settings.min_subscribers}) "
                f"subscribers after waitForSubscribers ran out: {', '.join(short[:5])}"
                + (f" and {len(short) - 5} more" if len(short) > 5 else "")
            )
        logger.log(logging.WARNING if short else logging.INFO, line)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        configure_spark_worker_logging()
        sent = sum(m.sent for m in messages if isinstance(m, SendCounts))
        logger.warning(
            "%s writer: batch %d aborted after %d messages were sent (a retry "
            "sends them again: ZeroMQ pub/sub cannot take them back)",
            self.protocol.name,
            batchId,
            sent,
        )


def _too_large(size: int, limit: int) -> str:
    return f"message of {size} bytes is over maxMessageBytes ({limit})"


def _task_names() -> tuple[str, str, int]:
    """(query id, batch id, partition) of the running Spark task. Request ids and answer files
    are named after them, so a retried task sends the same ids (a broker that answered them
    lately answers again from its cache) and replaces its own answer file."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # not in a Spark task (a direct call)
        return uuid.uuid4().hex, "0", 0
    return (
        context.getLocalProperty("sql.streaming.queryId") or uuid.uuid4().hex,
        context.getLocalProperty("streaming.sql.batchId") or "0",
        context.partitionId(),
    )


def write_outcomes(root: str, batch_id: str, partition: int, outcomes: list[Outcome]) -> str:
    """Write one task's answers as ``<root>/batchId=<n>/part-<partition>.parquet``, atomically
    (a hidden temporary file renamed), so readers never see half a file; returns the path."""
    folder = os.path.join(root, f"batchId={batch_id}")
    os.makedirs(folder, exist_ok=True)
    name = f"part-{partition:05d}.parquet"
    table = pa.table(
        [
            pa.array([o.request_id for o in outcomes], pa.string()),
            pa.array([o.status for o in outcomes], pa.string()),
            pa.array([o.data for o in outcomes], pa.string()),
        ],
        schema=REPLY_SCHEMA,
    )
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    pq.write_table(table, temporary)
    os.replace(temporary, os.path.join(folder, name))
    return os.path.join(folder, name)
