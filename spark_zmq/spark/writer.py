"""The one generic stream writer: Spark's calls on one side, a protocol's publisher on the other.

``write`` runs in executor Python workers. Each worker keeps one publisher per format and option
set for its whole life (``publishers``), so announcements and subscriber connections survive
from one micro-batch to the next. A task encodes its Arrow batches through the protocol,
applies ``mode`` to rows that cannot be sent, waits for subscribers if asked, and sends; the
publisher blocks on back-pressure rather than dropping. Its commit message carries its counts,
and ``commit`` on the driver logs the totals of the batch.

A task sends a batch in one of two ways (``sending``): encoded column-wise, through the
compiled send loop, or encoded row by row, a ``send`` per message (the Python path, the
fallback). Both send the same bytes and apply ``mode``, ``maxMessageBytes`` and
``waitForSubscribers`` the same way.

When the protocol opens a ``Requester`` instead (EBUS ``service``), each row is a request
(``requests``). What ``mode`` does with rows and outcomes, and what a task counts: ``write_mode``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import ModuleType
from typing import Generic, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from spark_zmq.extras import require
from spark_zmq.log import configure_spark_worker_logging, logger
from spark_zmq.native import SEND, choose
from spark_zmq.options import Options
from spark_zmq.protocols.contract import (
    ANSWERED,
    REFUSED,
    UNANSWERED,
    Encoded,
    EncodedBatch,
    Requester,
    SinkProtocol,
    SinkPublisher,
)
from spark_zmq.spark.publishers import first_sends, shared_publisher, wait_for_subscribers
from spark_zmq.spark.requests import write_requests
from spark_zmq.spark.sending import ColumnSender
from spark_zmq.spark.write_mode import COMPILED, PYTHON, RowMode, SendCounts
from spark_zmq.stream_settings import WriterSettings

#: the format's writer settings
W = TypeVar("W")


class ZmqStreamWriter(DataSourceStreamArrowWriter, Generic[W]):
    """Generic micro-batch writer for any ``SinkProtocol``. Its settings, the generic
    writer's and the format's, are made here, once per query on the driver, and pickled to
    the tasks with it."""

    def __init__(self, protocol: SinkProtocol[W], options: Options) -> None:
        self.protocol = protocol
        self.settings = WriterSettings.of(options)
        self.format_settings = protocol.write_settings(options)
        self.row_mode = RowMode(protocol.name, self.settings.mode, self.settings.max_message_bytes)

    # -- executors -----------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SendCounts:
        configure_spark_worker_logging()
        require(self.protocol.name, f"format({self.protocol.name!r})")
        publisher = shared_publisher(self.protocol, self.format_settings)
        if isinstance(publisher, Requester):
            return write_requests(
                publisher,
                iterator,
                lambda batch: self.protocol.encode(batch, self.format_settings),
                self.row_mode,
                self.settings.max_in_flight,
                self.settings.reply_path,
            )
        counts = SendCounts(publisher.name)
        checked: set[bytes] = set()
        native = choose(SEND, self.settings.send_core)
        for batch in iterator:
            columns = self.protocol.encode_columns(batch, self.format_settings) if native else None
            if native is not None and columns is not None:
                self._send_columns(native, columns, publisher, counts, checked)
                counts.sent_by(COMPILED)
            else:
                encoded = self.protocol.encode(batch, self.format_settings)
                self._send_messages(encoded, publisher, counts, checked)
                counts.sent_by(PYTHON)
        self.row_mode.warn_skipped(counts)
        return counts

    def _send_messages(
        self, encoded: Encoded, publisher: SinkPublisher, counts: SendCounts, checked: set[bytes]
    ) -> None:
        """The Python path: a ``send`` per message."""
        self.row_mode.check_rows(encoded, counts)
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
        encoded = self.row_mode.check_columns(encoded, counts)
        sender = ColumnSender(native, encoded)
        counts.rows += len(encoded)
        publisher.declare(encoded.names)
        start = 0
        firsts = first_sends(encoded, checked) if self.settings.wait_for_subscribers else []
        for first, topic in firsts:
            counts.sent += sender.send(publisher, start, first)
            self._wait_for_subscribers(publisher, topic, encoded.names, counts)
            start = first
        counts.sent += sender.send(publisher, start, len(encoded))

    def _wait_for_subscribers(
        self,
        publisher: SinkPublisher,
        topic: bytes,
        names: dict[bytes, str | None],
        counts: SendCounts,
    ) -> None:
        """``publishers.wait_for_subscribers``, if asked; a topic whose window ran out is
        warned about and named in ``counts`` (the driver's line for the batch names it)."""
        wait, wanted = self.settings.wait_for_subscribers, self.settings.min_subscribers
        if not wait or wait_for_subscribers(publisher, topic, wanted, wait):
            return
        shown = names.get(topic) or topic.hex()
        counts.short_of_subscribers += (shown,)
        logger.warning(
            "%s writer: %s: fewer than %d subscribers to %s when its waitForSubscribers "
            "window (%g s from its first send) ended; sending anyway",
            self.protocol.name,
            publisher.name,
            wanted,
            shown,
            wait,
        )

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
