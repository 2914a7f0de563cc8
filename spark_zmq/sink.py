"""The one generic stream writer: Spark's calls on one side, a protocol's publisher on the other.

``write`` runs in executor Python workers. Each worker keeps one publisher per format and option
set for its whole life (``_publishers``), so announcements and subscriber connections survive
from one micro-batch to the next. A task encodes its Arrow batches through the protocol,
applies ``mode`` to rows that cannot be sent, waits for subscribers if asked, and sends; the
publisher blocks on back-pressure rather than dropping. Its commit message carries its counts,
and ``commit`` on the driver logs the totals of the batch.
"""

from __future__ import annotations

import atexit
import threading
import time
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from .log import logger
from .options import Options
from .protocols.base import Encoded, SinkProtocol, SinkPublisher


class UnsendableRowError(RuntimeError):
    """A row that cannot be sent, under ``mode=FAILFAST``."""


@dataclass
class SendCounts(WriterCommitMessage):
    """What one task did."""

    publisher: str
    rows: int = 0
    sent: int = 0
    skipped: int = 0
    first_error: str | None = None


#: generic writer options that shape a publisher's socket (others apply per task)
SOCKET_OPTIONS = ("sendHighWaterMark", "sendTimeout")
_publishers: dict[tuple, SinkPublisher] = {}
_publishers_lock = threading.Lock()


def shared_publisher(protocol: SinkProtocol, options: Options) -> SinkPublisher:
    """This process's publisher for the format and its writer options, opened on first use."""
    shaping = sorted(option.name for option in protocol.writer_options) + list(SOCKET_OPTIONS)
    key = (protocol.name, tuple((name, str(options[name])) for name in shaping))
    with _publishers_lock:
        publisher = _publishers.get(key)
        if publisher is None:
            publisher = _publishers[key] = protocol.open_publisher(options)
            logger.info("%s writer: publisher %s opened in process", protocol.name,
                        publisher.name)
            if len(_publishers) == 1:
                atexit.register(close_publishers)
        return publisher


def close_publishers() -> None:
    with _publishers_lock:
        for publisher in _publishers.values():
            publisher.close()
        _publishers.clear()


class ZmqStreamWriter(DataSourceStreamArrowWriter):
    """Generic micro-batch writer for any ``SinkProtocol``."""

    def __init__(self, protocol: SinkProtocol, options: Options) -> None:
        self.protocol = protocol
        self.options = options

    # -- executors -----------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SendCounts:
        publisher = shared_publisher(self.protocol, self.options)
        counts = SendCounts(publisher.name)
        checked: set[bytes] = set()
        for batch in iterator:
            encoded = self.protocol.encode(batch, self.options)
            self._check_rows(encoded, counts)
            counts.rows += batch.num_rows
            publisher.declare(encoded.names)
            for message, topic in zip(encoded.messages, encoded.topics):
                if message is None:
                    continue
                if topic not in checked:
                    checked.add(topic)
                    self._wait_for_subscribers(publisher, topic, encoded.names)
                publisher.send(message)
                counts.sent += 1
        if counts.skipped and self.options["mode"] == "PERMISSIVE":
            logger.warning("%s writer: %s skipped %d rows that cannot be sent; the first: %s",
                           self.protocol.name, publisher.name, counts.skipped, counts.first_error)
        return counts

    def _check_rows(self, encoded: Encoded, counts: SendCounts) -> None:
        """Mark rows over maxMessageBytes, then apply ``mode`` to every unsendable row."""
        limit = self.options["maxMessageBytes"]
        for index, message in enumerate(encoded.messages):
            if message is not None and sum(map(len, message)) > limit:
                size = sum(map(len, message))
                encoded.messages[index] = None
                encoded.errors[index] = (f"message of {size} bytes is over maxMessageBytes "
                                         f"({limit})")
        for index, error in enumerate(encoded.errors):
            if error is None:
                continue
            if self.options["mode"] == "FAILFAST":
                raise UnsendableRowError(
                    f"{self.protocol.name} writer: row {counts.rows + index + 1} of this "
                    f"task cannot be sent: {error} (mode=FAILFAST; mode=PERMISSIVE or "
                    f"DROPMALFORMED skips such rows)")
            counts.skipped += 1
            counts.first_error = counts.first_error or error

    def _wait_for_subscribers(self, publisher: SinkPublisher, topic: bytes,
                              names: dict[bytes, str | None]) -> None:
        wait, wanted = self.options["waitForSubscribers"], self.options["minSubscribers"]
        if not wait:
            return
        deadline = time.monotonic() + wait
        while publisher.subscribers(topic) < wanted:
            if time.monotonic() >= deadline:
                shown = names.get(topic) or topic.hex()
                logger.warning("%s writer: %s: fewer than %d subscribers to %s after %g s; "
                               "sending anyway", self.protocol.name, publisher.name, wanted,
                               shown, wait)
                return
            time.sleep(0.01)

    # -- driver --------------------------------------------------------------------------------

    def commit(self, messages: list[SendCounts | None], batchId: int) -> None:
        done = [m for m in messages if m is not None]
        sent = sum(m.sent for m in done)
        skipped = sum(m.skipped for m in done)
        publishers = sorted({m.publisher for m in done})
        line = (f"{self.protocol.name} writer: batch {batchId}: sent {sent} messages from "
                f"{len(done)} tasks through {', '.join(publishers) or 'no publisher'}")
        if skipped:
            first = next(m.first_error for m in done if m.first_error)
            line += f"; skipped {skipped} rows that cannot be sent (first: {first})"
        logger.info(line)

    def abort(self, messages: list[SendCounts | None], batchId: int) -> None:
        sent = sum(m.sent for m in messages if m is not None)
        logger.warning("%s writer: batch %d aborted after %d messages were sent (a retry "
                       "sends them again: ZeroMQ pub/sub cannot take them back)",
                       self.protocol.name, batchId, sent)
