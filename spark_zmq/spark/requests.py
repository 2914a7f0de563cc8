"""The writer's request path: with a format that opens a ``Requester`` (EBUS ``service``), each
row is a request. A task keeps at most ``maxInFlight`` of them waiting, applies ``mode`` to the
outcomes (refused, unanswered) and writes them to ``replyPath``. Request ids are named after the
query, batch, partition and row, so a retried task sends the same ids again.
"""

from __future__ import annotations

import os
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import pyarrow as pa
import pyarrow.parquet as pq

from spark_zmq.protocols.contract import Encoded, Outcome, Requester
from spark_zmq.spark.write_mode import RowMode, SendCounts

#: answers written to replyPath
REPLY_SCHEMA = pa.schema(
    [
        pa.field("requestId", pa.string()),
        pa.field("status", pa.string()),
        pa.field("data", pa.string()),
    ]
)


def write_requests(
    requester: Requester,
    batches: Iterator[pa.RecordBatch],
    encode: Callable[[pa.RecordBatch], Encoded],
    row_mode: RowMode,
    max_in_flight: int,
    reply_path: str | None,
) -> SendCounts:
    """Send each row as a request, at most ``max_in_flight`` waiting; judge and keep outcomes."""
    counts = SendCounts(requester.name)
    query, batch_id, partition = _task_names()
    waiting: deque[Future] = deque()
    outcomes: list[Outcome] = []
    for batch in batches:
        encoded = encode(batch)
        row_mode.check_rows(encoded, counts)
        for index, message in enumerate(encoded.messages):
            if message is None:
                continue
            while len(waiting) >= max_in_flight:
                outcomes.append(waiting.popleft().result())
            request_id = f"{query}/{batch_id}/{partition}/{counts.rows + index}"
            waiting.append(requester.request(message, request_id))
            counts.sent += 1
        counts.rows += batch.num_rows
    outcomes.extend(future.result() for future in waiting)
    row_mode.warn_skipped(counts)
    row_mode.judge(outcomes, counts)
    if reply_path and outcomes:
        write_outcomes(reply_path, batch_id, partition, outcomes)
    return counts


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
