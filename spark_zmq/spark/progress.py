"""One progress line per micro-batch of a spark_zmq stream, from Spark's own progress reports.

``with_gap_count`` makes the query count the gap rows of each batch (rows whose ``error`` starts
with ``gap:``) as an observed metric; ``ProgressPrinter`` (a StreamingQueryListener) prints, per
batch: rows and rows/s, the spool backlog (rows captured and not yet planned: the source's
latest offsets minus the batch's end offsets), the partitions the source offers (its endpoints,
live or still being drained) and the batch's gaps. Nothing here reads data twice: the figures
come from the offsets the reader reports anyway.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any, TextIO

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryProgress,
)

from spark_zmq.spark.offsets import StreamOffset
from spark_zmq.spark.rows import GAP_PREFIX

#: name of the observed metric that carries the gap count
METRIC = "spark_zmq"


def with_gap_count(frame: DataFrame) -> DataFrame:
    """``frame`` with the per-batch count of gap rows observed under ``METRIC``."""
    gaps = F.sum(F.when(F.col("error").startswith(GAP_PREFIX), 1).otherwise(0)).alias("gaps")
    return frame.observe(METRIC, F.count(F.lit(1)).alias("rows"), gaps)


def _offsets(value: str | dict[str, Any] | None) -> dict[str, int]:
    """Each partition's offset in a progress event's offset (JSON text or a dict)."""
    if isinstance(value, str):
        value = json.loads(value)
    return StreamOffset.from_json(value).ends if isinstance(value, dict) else {}


def progress_line(progress: StreamingQueryProgress) -> str:
    """The line of one QueryProgressEvent's progress."""
    source = progress.sources[0] if progress.sources else None
    latest = _offsets(source.latestOffset) if source is not None else {}
    end = _offsets(source.endOffset) if source is not None else {}
    backlog = sum(max(0, int(v) - int(end.get(k, v))) for k, v in latest.items())
    metric = progress.observedMetrics.get(METRIC)
    gaps = metric["gaps"] if metric is not None and metric["gaps"] is not None else 0
    rate = progress.processedRowsPerSecond
    rate = 0.0 if rate is None or math.isnan(rate) else rate  # NaN for an empty batch
    return (
        f"batch {progress.batchId}: {progress.numInputRows} rows, "
        f"{rate:.0f} rows/s, backlog {backlog} rows, "
        f"{len(latest)} endpoints, {gaps} gaps"
    )


class ProgressPrinter(StreamingQueryListener):
    """Prints ``progress_line`` for every batch of every query of the session.

    Spark delivers listener events asynchronously, after the batch: a caller that must see a
    batch's line before it stops the query (or exits) waits until ``rows_printed`` counts it.
    """

    def __init__(
        self,
        out: TextIO = sys.stdout,
        line: Callable[[StreamingQueryProgress], str] = progress_line,
    ) -> None:
        self.out = out
        self.line = line
        #: input rows of the batches printed so far, of every query
        self.rows_printed = 0

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        print(f"query {event.name or event.id} started", file=self.out, flush=True)

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        print(self.line(event.progress), file=self.out, flush=True)
        self.rows_printed += event.progress.numInputRows

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        ending = f": {event.exception}" if event.exception else ""
        print(f"query {event.id} ended{ending}", file=self.out, flush=True)
