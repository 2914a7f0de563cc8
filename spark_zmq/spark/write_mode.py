"""What a writer task counts, and what ``mode`` does with rows that cannot be sent (malformed,
over ``maxMessageBytes``) and with requests that were refused or got no answer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc
from pyspark.sql.datasource import WriterCommitMessage

from spark_zmq.errors import RowError
from spark_zmq.log import logger
from spark_zmq.protocols.arrow import message_sizes, refuse_rows
from spark_zmq.protocols.contract import REFUSED, UNANSWERED, Encoded, EncodedBatch, Outcome

#: the send loops a task's batches go through (``spark_zmq.spark.sending``)
COMPILED, PYTHON = "compiled", "python"


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


@dataclass(frozen=True)
class RowMode:
    """``mode`` (PERMISSIVE, DROPMALFORMED, FAILFAST) and ``maxMessageBytes`` of a writer of
    format ``format_name``, applied to a task's rows and outcomes."""

    format_name: str
    mode: str
    max_message_bytes: int

    def check_rows(self, encoded: Encoded, counts: SendCounts) -> None:
        """Mark rows over maxMessageBytes, then apply ``mode`` to every unsendable row."""
        limit = self.max_message_bytes
        for index, message in enumerate(encoded.messages):
            if message is not None and sum(map(len, message)) > limit:
                encoded.messages[index] = None
                encoded.errors[index] = _too_large(sum(map(len, message)), limit)
        unsendable = [(i, error) for i, error in enumerate(encoded.errors) if error is not None]
        if unsendable:
            self._skip(unsendable[0], len(unsendable), counts)

    def check_columns(self, encoded: EncodedBatch, counts: SendCounts) -> EncodedBatch:
        """``check_rows`` for a batch encoded column-wise: the batch to send (rows over
        maxMessageBytes refused)."""
        limit = self.max_message_bytes
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
        if self.mode == "FAILFAST":
            raise UnsendableRowError(
                f"{self.format_name} writer: row {counts.rows + index + 1} of this "
                f"task cannot be sent: {error} (mode=FAILFAST; mode=PERMISSIVE or "
                f"DROPMALFORMED skips such rows)"
            )
        counts.skipped += count
        counts.first_error = counts.first_error or error

    def warn_skipped(self, counts: SendCounts) -> None:
        if counts.skipped and self.mode == "PERMISSIVE":
            logger.warning(
                "%s writer: %s skipped %d rows that cannot be sent; the first: %s",
                self.format_name,
                counts.publisher,
                counts.skipped,
                counts.first_error,
            )

    def judge(self, outcomes: list[Outcome], counts: SendCounts) -> None:
        """Count the outcomes; fail on the first one that ``mode`` does not let pass."""
        for outcome in outcomes:
            setattr(counts, outcome.kind, getattr(counts, outcome.kind) + 1)
            if outcome.kind == REFUSED and self.mode == "FAILFAST":
                raise FailedRequestError(
                    f"{self.format_name} writer: {outcome.detail} (mode=FAILFAST; "
                    f"PERMISSIVE or DROPMALFORMED record refused requests and go on)"
                )
            if outcome.kind == UNANSWERED and self.mode != "DROPMALFORMED":
                raise FailedRequestError(
                    f"{self.format_name} writer: {outcome.detail} (mode={self.mode}; "
                    f"DROPMALFORMED counts unanswered requests, records them in replyPath and "
                    f"goes on)"
                )
        if counts.unanswered:
            first = next(o for o in outcomes if o.kind == UNANSWERED)
            logger.warning(
                "%s writer: %d of %d requests got no answer (mode=DROPMALFORMED); the first: %s",
                self.format_name,
                counts.unanswered,
                len(outcomes),
                first.detail,
            )


def _too_large(size: int, limit: int) -> str:
    return f"message of {size} bytes is over maxMessageBytes ({limit})"
