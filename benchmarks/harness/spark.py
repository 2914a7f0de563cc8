"""The connector's side of a trial: the run's Spark session, ``format("zeroeq")`` into a
``foreachBatch`` sink that checks every sequence number and times each row's latency."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from harness.publisher import HEAD, SUBSCRIBE_TIMEOUT, PublisherGroup
from harness.receivers import describe_missing
from harness.trials import Bench, Trial, publish_plans

MS = 1e6


def start_spark(name: str = "zeroeq_rate benchmark") -> Any:
    """One local session for the whole run, bound to loopback, quiet."""
    # capture logs every endpoint join at INFO; the benchmark's output is on stdout
    os.environ.setdefault("SPARK_ZMQ_LOG_LEVEL", "WARNING")
    from spark_zmq.spark.session import loopback_session

    return loopback_session(name, log_level="ERROR")


@contextlib.contextmanager
def spark_session(name: str = "zeroeq_rate benchmark") -> Iterator[Any]:
    """The run's one Spark session; stopped (with any query left) however the run ends."""
    spark = start_spark(name)
    try:
        yield spark
    finally:
        for query in spark.streams.active:
            stop_query(query)
        spark.stop()


def payload_heads(payload: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """Sequence numbers and send times of an Arrow binary column, vectorised (a Python loop per
    row would slow the sink, and so the query, at the rates measured), plus the number of rows
    that carry no benchmark payload (null: a gap row from capture; or too short)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sequences, sent_ns, invalid = [], [], 0
    for chunk in payload.chunks:
        valid = pc.and_(pc.is_valid(chunk), pc.greater_equal(pc.binary_length(chunk), HEAD.size))
        valid = pc.fill_null(valid, False)
        kept = chunk.filter(valid)
        invalid += len(chunk) - len(kept)
        if not len(kept):
            continue
        width = np.int64 if pa.types.is_large_binary(kept.type) else np.int32
        starts = np.frombuffer(kept.buffers()[1], dtype=width)[
            kept.offset : kept.offset + len(kept)
        ]
        data = np.frombuffer(kept.buffers()[2], dtype=np.uint8)
        heads: np.ndarray = data[starts.astype(np.int64)[:, None] + np.arange(HEAD.size)]
        words = heads.view(">u8")  # (rows, 2): sequence number, send time
        sequences.append(words[:, 0].astype(np.int64))
        sent_ns.append(words[:, 1].astype(np.int64))
    if not sequences:
        return np.empty(0, np.int64), np.empty(0, np.int64), invalid
    return np.concatenate(sequences), np.concatenate(sent_ns), invalid


class BatchCollector:
    """The ``foreachBatch`` sink: counts every sequence number and records per-row latency.

    Latency is taken once the batch's payloads are in the driver's hands (after ``toArrow``),
    i.e. when the rows have really reached the sink, not when Spark merely planned the batch.
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self.seen = np.zeros(count, dtype=np.int32)
        self.out_of_range = 0
        self.invalid = 0
        self.rows = 0
        self.latencies: list[np.ndarray] = []
        self._lock = threading.Lock()

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        table = batch_df.select("payload").toArrow()
        arrived = time.time_ns()
        sequences, sent_ns, invalid = payload_heads(table.column("payload"))
        inside = (sequences >= 0) & (sequences < self.count)
        with self._lock:
            np.add.at(self.seen, sequences[inside], 1)
            self.out_of_range += int((~inside).sum())
            self.invalid += invalid
            self.rows += table.num_rows
            self.latencies.append(arrived - sent_ns)

    @property
    def unique(self) -> int:
        with self._lock:
            return int(np.count_nonzero(self.seen))

    @property
    def duplicates(self) -> int:
        with self._lock:
            return int(np.clip(self.seen - 1, 0, None).sum())

    def latency_ms(self) -> tuple[float, float] | None:
        with self._lock:
            if not self.latencies:
                return None
            values = np.concatenate(self.latencies) / MS
        p50, p99 = np.percentile(values, [50, 99])
        return float(p50), float(p99)


def bounded_call(call: Callable[[], None], timeout: float) -> bool:
    """Run a blocking Spark call in a helper thread; False if it did not finish in time (the
    caller then stops the query, which releases the call)."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as exc:  # the query failed: re-raised below
            errors.append(exc)

    thread = threading.Thread(target=target, name="processAllAvailable", daemon=True)
    thread.start()
    thread.join(max(0.0, timeout))
    if errors:
        raise errors[0]
    return not thread.is_alive()


def drain_query(query: Any, collector: BatchCollector, timeout: float) -> None:
    """After the publisher is done: let the query process what capture has, until every
    sequence number arrived or a full ``processAllAvailable`` pass brings nothing new."""
    deadline = time.monotonic() + timeout
    rows_before = -1
    while collector.unique < collector.count and time.monotonic() < deadline:
        if not bounded_call(query.processAllAvailable, deadline - time.monotonic()):
            return
        if collector.rows == rows_before:
            return
        rows_before = collector.rows


def run_connector_trial(
    bench: Bench, rate: float, receiver: str = "connector", duration: float | None = None
) -> Trial:
    """Publisher processes (``bench.publishers``) -> ``format("zeroeq")`` -> ``foreachBatch``.
    Each publisher binds first (the query needs its port) but sends nothing until the query's
    capture has subscribed."""
    duration = duration or bench.duration
    plans = publish_plans(bench, rate, duration)
    trial = Trial(receiver, rate, sum(plan.count for plan in plans))
    collector = BatchCollector(trial.planned)
    folder = Path(tempfile.mkdtemp(prefix="trial-", dir=bench.workdir))
    publisher = query = None
    try:
        publisher = PublisherGroup(bench.context, plans)
        query = (
            bench.spark.readStream.format("zeroeq")
            .option("publishers", publisher.addresses)
            .option("spoolPath", str(folder / "spool"))
            .options(**admission(bench))
            .options(**dict(bench.reader_options))
            .load()
            .writeStream.foreachBatch(collector)
            .option("checkpointLocation", str(folder / "checkpoint"))
            .trigger(processingTime=f"{bench.trigger_ms} milliseconds")
            .start()
        )
        trial.record_publisher(publisher.result(SUBSCRIBE_TIMEOUT + 10 * duration + 30))
        time.sleep(0.5)
        drain_query(query, collector, 60.0 + 5 * duration)
    except Exception as exc:  # a failed query or child is a trial result, not a crash
        trial.error = error_text(exc)
    finally:
        if query is not None:
            stop_query(query)
        if publisher is not None:
            publisher.finish()
        if bench.settle is not None:
            bench.settle()
        shutil.rmtree(folder, ignore_errors=True)
    record_delivery(trial, collector)
    return trial


def admission(bench: Bench) -> dict[str, str]:
    """The connector query's capture core and admission options, those the run sets."""
    options = {} if bench.core is None else {"captureCore": bench.core}
    if bench.max_records_per_trigger > 0:
        options["maxRecordsPerTrigger"] = str(bench.max_records_per_trigger)
    return options


def error_text(exc: Exception) -> str:
    """A failed trial's error, one line."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def record_delivery(trial: Trial, collector: BatchCollector) -> None:
    """What the sink saw, into the trial's row."""
    trial.received, trial.duplicates = collector.unique, collector.duplicates
    trial.invalid = collector.invalid + collector.out_of_range
    trial.latency_ms = collector.latency_ms()
    trial.missing = describe_missing(collector.seen > 0)


def stop_query(query: Any) -> None:
    """Stop and surface nothing: a failure was already recorded, and the run must go on."""
    with contextlib.suppress(Exception):
        query.stop()
