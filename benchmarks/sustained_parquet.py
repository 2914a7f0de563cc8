"""The highest rate that ``format("zeroeq")`` sustains into a Parquet table, and what
``minPartitions`` buys.

A publisher process behaves as every ZeroEQ publisher does by default: XPUB, send high-water
mark 1000, a message that finds the queue full is dropped at once (the compiled core's
``send_sequence`` with no patience; XPUB_NODROP turns the drop into EAGAIN so it is counted).
It sends 100-byte events at rate R for ``--duration`` seconds into a query that writes a Parquet
file sink (checkpoint, ``--trigger-ms`` trigger). After the publisher's last send, the table
(the files its ``_spark_metadata`` log commits) is watched until it holds every message the
publisher did not drop; then it is read back and its sequence numbers checked.

A rate is *bounded* when the table held every message the publisher did not drop, once, within
two triggers of the publisher's end (the backlog did not grow), and *sustained* when it is
bounded and nothing was lost (no drop at the publisher, every sequence number in the table).
The ladder of ``--rates`` is climbed while the backlog stays bounded, once per
``--min-partitions`` value, with ``--repeats`` trials per rate (a rate counts only if every
trial does); the sustained rate is the last of an unbroken run of sustained rates. The
publisher runs SCHED_FIFO (as root) so that what it drops is the receiving side's doing, not
its own wait for a core; each row gives its longest delay behind schedule (``late``).
In the same run, the same query into a cheap ``foreachBatch`` sink (payloads into the driver)
gives the no-gap rate that the Parquet figures are compared with.

Run: ``python benchmarks/sustained_parquet.py`` (it re-executes itself in a private network
namespace through ``scripts/netns.sh``; only 127.0.0.1 is used).
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from harness.hermetic import ensure_private_network
from harness.publisher import (
    PAYLOAD_BYTES,
    SUBSCRIBE_TIMEOUT,
    TICK_EVENT,
    PublisherProcess,
    PublishPlan,
    add_priority_argument,
    publisher_priority,
)
from harness.report import describe_publisher_priority
from harness.spark import payload_heads


@dataclass
class Row:
    """One trial: what was sent, dropped at the publisher, and what reached the sink."""

    sink: str
    rate: int
    sent: int = 0
    dropped: int = 0
    in_table: int = 0
    gaps: int = 0
    duplicates: int = 0
    gap_rows: int = 0
    late_ms: float = 0.0  # the publisher's longest delay behind its schedule
    catch_up: float | None = None  # seconds from the publisher's end to a complete sink
    batch_seconds: tuple[float, float] = (0.0, 0.0)  # micro-batch durations: median, max
    error: str = ""

    def bounded(self, bound: float) -> bool:
        """The sink held every message the publisher did not drop, once, within ``bound`` s
        of the publisher's end: its backlog stayed bounded."""
        in_time = self.catch_up is not None and self.catch_up <= bound
        return not self.error and in_time and self.duplicates == 0 and self.sent > 0

    def sustained(self, bound: float) -> bool:
        """Bounded, and no message lost anywhere (none dropped at the publisher either)."""
        return self.bounded(bound) and self.dropped == 0 and self.gaps == 0


# -- sinks ---------------------------------------------------------------------------------------


class Tally:
    """Counts of every sequence number seen, for gaps and duplicates."""

    def __init__(self, count: int) -> None:
        self.seen = np.zeros(count, np.int32)
        self.rows = self.gap_rows = 0
        self.lock = threading.Lock()

    def add(self, payload: Any) -> None:
        seqs, _, nulls = payload_heads(payload)  # nulls: gap rows (no payload)
        with self.lock:
            np.add.at(self.seen, seqs[(seqs >= 0) & (seqs < len(self.seen))], 1)
            self.rows += len(seqs)
            self.gap_rows += nulls

    def into(self, row: Row) -> None:
        row.in_table = int(np.count_nonzero(self.seen))
        row.gaps = len(self.seen) - row.in_table
        row.duplicates = int(np.clip(self.seen - 1, 0, None).sum())
        row.gap_rows = self.gap_rows


def committed_files(table: Path) -> list[str]:
    """The data files the file sink's ``_spark_metadata`` log commits (batches and compactions)."""
    paths: set[str] = set()
    for log in glob.glob(str(table / "_spark_metadata" / "*")):
        with open(log) as lines:
            for line in lines:
                if line.startswith("{"):
                    paths.add(json.loads(line)["path"].removeprefix("file:"))
    return sorted(paths)


def table_rows(files: list[str], known: dict[str, int]) -> int:
    """Rows of the committed files, from Parquet footers (each file read once)."""
    import pyarrow.parquet as pq

    for path in files:
        if path not in known:
            known[path] = pq.ParquetFile(path).metadata.num_rows
    return sum(known[p] for p in files)


# -- trials --------------------------------------------------------------------------------------


def run_trial(spark: Any, args: argparse.Namespace, sink: str, rate: int, parts: int) -> Row:
    """One rate into one sink: publisher -> zeroeq query -> Parquet or foreachBatch."""
    row = Row(sink, rate)
    count = int(rate * args.duration)
    folder = Path(tempfile.mkdtemp(prefix="sustained-"))
    context = multiprocessing.get_context("spawn")
    # the compiled send loop, dropping at once at the send high-water mark (1000)
    nice, realtime = publisher_priority(args.publisher_nice)
    plan = PublishPlan(count, float(rate), native=True, nice=nice, realtime=realtime)
    publisher = PublisherProcess(context, plan)
    tally, query = Tally(count), None
    try:
        reader = (
            spark.readStream.format("zeroeq")
            .option("publishers", publisher.address)
            .option("spoolPath", str(folder / "spool"))
        )
        if parts > 1:
            reader = reader.option("minPartitions", str(parts))
        writer = reader.load().writeStream.option("checkpointLocation", str(folder / "ckpt"))
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
        if sink == "foreachBatch":
            writer = writer.foreachBatch(
                lambda df, _: tally.add(df.select("payload").toArrow().column(0))
            )
            query = writer.start()
        else:
            query = writer.format("parquet").start(str(folder / "table"))
        sent = publisher.result(SUBSCRIBE_TIMEOUT + 3 * count / rate)
        row.sent, row.dropped, ended = sent.sent, sent.dropped, sent.ended
        row.late_ms = sent.late_ms
        table = folder / "table" if sink == "parquet" else None
        row.catch_up = wait_complete(query, table, tally, row.sent - row.dropped, ended, args)
        row.batch_seconds = batch_seconds(query)
        if sink == "parquet":
            import pyarrow.parquet as pq

            for path in committed_files(folder / "table"):
                tally.add(pq.read_table(path, columns=["payload"]).column("payload"))
    except Exception as exc:  # a failed query is a result of the trial
        row.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        if query is not None:
            query.stop()
        publisher.finish()
        shutil.rmtree(folder, ignore_errors=True)
    tally.into(row)
    return row


def wait_complete(
    query: Any, table: Path | None, tally: Tally, expected: int, ended: float, args: Any
) -> float | None:
    """Seconds from the publisher's last send until the sink (the Parquet ``table``, else the
    ``foreachBatch`` tally) holds ``expected`` rows; None when not within ``--drain`` s."""
    known: dict[str, int] = {}
    deadline = ended + args.drain
    while time.time() < deadline:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        rows = tally.rows if table is None else table_rows(committed_files(table), known)
        if rows >= expected:
            return max(0.0, time.time() - ended)
        time.sleep(0.05)
    return None


def batch_seconds(query: Any) -> tuple[float, float]:
    """Median and longest micro-batch (trigger execution) of the query's recent progress:
    above the trigger interval, the backlog grows."""
    took = [p["durationMs"].get("triggerExecution", 0) / 1000 for p in query.recentProgress]
    took = [t for t in took if t > 0] or [0.0]
    return float(np.median(took)), max(took)


def climb(spark: Any, args: Any, sink: str, parts: int, bound: float) -> tuple[int, int]:
    """(highest sustained rate, highest bounded rate) of the ladder, climbing while the sink's
    backlog stays bounded: under CPU contention capture may lose messages at rates the sink
    keeps up with, and the sink's own limit is still worth knowing. Prints a row per rate."""
    sustained = bounded = 0
    streak = True  # every rate so far was sustained: the step-up search for it goes on
    for rate in args.rates:
        rows = [run_trial(spark, args, sink, rate, parts) for _ in range(args.repeats)]
        for row in rows:
            print_row(row, parts, bound)
        if not all(row.bounded(bound) for row in rows):
            break
        bounded = rate
        streak = streak and all(row.sustained(bound) for row in rows)
        sustained = rate if streak else sustained
    return sustained, bounded


def print_row(row: Row, parts: int, bound: float) -> None:
    catch = "-" if row.catch_up is None else f"{row.catch_up:.2f}"
    verdict = "sustained" if row.sustained(bound) else "bounded" if row.bounded(bound) else "FAIL"
    print(
        f"{row.sink:<12} {parts:>5} {row.rate:>8,} {row.sent:>11,} {row.dropped:>9,} "
        f"{row.in_table:>11,} {row.gaps:>9,} {row.duplicates:>5,} {row.gap_rows:>4} "
        f"{row.late_ms:>6.1f} "
        f"{catch:>8} {row.batch_seconds[0]:>5.2f} {row.batch_seconds[1]:>5.2f} "
        f"{verdict} {row.error}",
        flush=True,
    )


def sink_rate(spark: Any, parts: int, count: int) -> float:
    """Messages per second that a batch read of a spool of ``count`` events writes into Parquet
    with ``minPartitions=parts``: the read tasks' work in a micro-batch (decode, Arrow to the
    JVM, Parquet), without capture or a publisher competing for the cores. Best of two."""
    from spark_zmq.capture.buffer import spool_table
    from spark_zmq.protocols.zeroeq import event_id
    from spark_zmq.spool.index import Source
    from spark_zmq.spool.writer import Spool

    folder = Path(tempfile.mkdtemp(prefix="sink-rate-"))
    spool = Spool(str(folder / "spool"), 1 << 40)
    topic, pad = event_id(TICK_EVENT), bytes(PAYLOAD_BYTES - 8)
    for first in range(0, count, 65536):
        n = min(65536, count - first)
        frames = [[topic, (first + i).to_bytes(8, "big") + pad] for i in range(n)]
        spool.append(
            "127.0.0.1:1", Source("tcp://127.0.0.1:1", {}), spool_table(frames, [0] * n, {})
        )
    spool.close()
    best = 0.0
    try:
        for _ in range(2):
            reader = spark.read.format("zeroeq").option("spoolPath", str(folder / "spool"))
            start = time.perf_counter()
            reader.option("minPartitions", str(parts)).load().write.mode("overwrite").parquet(
                str(folder / "table")
            )
            best = max(best, count / (time.perf_counter() - start))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="20000,30000,40000,50000,60000,70000,85000,100000")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of publishing")
    parser.add_argument("--trigger-ms", type=int, default=1000)
    parser.add_argument("--min-partitions", default="1,2", help="values of minPartitions")
    parser.add_argument("--drain", type=float, default=60.0, help="most seconds to wait after")
    add_priority_argument(parser)
    parser.add_argument("--repeats", type=int, default=1, help="trials per rate")
    parser.add_argument("--sink-count", type=int, default=2_000_000, help="0: no sink rate")
    parser.add_argument("--no-ladder", action="store_true", help="the sink rate only")
    parser.add_argument("--no-cheap", action="store_true", help="skip the foreachBatch ladder")
    args = parser.parse_args()
    args.rates = [int(float(r)) for r in args.rates.split(",")]
    ensure_private_network(__file__)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # children are stopped on exit
    os.environ.setdefault("SPARK_ZMQ_LOG_LEVEL", "WARNING")
    from spark_zmq.spark.session import loopback_session

    spark = loopback_session("sustained_parquet benchmark", log_level="ERROR")
    bound = 2 * args.trigger_ms / 1000
    print(
        f"{args.duration:.0f} s per rate, {PAYLOAD_BYTES}-byte events, "
        f"trigger {args.trigger_ms} ms; sustained: no gap, and complete within {bound:.1f} s "
        f"of the publisher's end; publisher {describe_publisher_priority(args.publisher_nice)}; "
        f"{args.repeats} trial(s) per rate; late: the publisher's longest delay behind its "
        "schedule, ms",
        flush=True,
    )
    print(
        f"{'sink':<12} {'tasks':>5} {'rate':>8} {'sent':>11} {'dropped':>9} {'in table':>11} "
        f"{'gaps':>9} {'dups':>5} {'gapR':>4} {'late':>6} {'catchup':>8} {'b.med':>5} "
        f"{'b.max':>5}"
    )
    partitions = [int(p) for p in args.min_partitions.split(",")]
    for parts in partitions if args.sink_count else ():
        rate = sink_rate(spark, parts, args.sink_count)
        print(f"sink alone (batch read into Parquet), minPartitions={parts}: {rate:,.0f} msg/s")
    results: dict[str, tuple[int, int]] = {}
    if not args.no_cheap and not args.no_ladder:
        results["foreachBatch"] = climb(spark, args, "foreachBatch", 1, bound)
    for parts in partitions if not args.no_ladder else ():
        results[f"parquet, minPartitions={parts}"] = climb(spark, args, "parquet", parts, bound)
    cheap = results.get("foreachBatch", (0, 0))
    for name, (sustained, bounded) in results.items():
        ratio = ""
        if cheap != (0, 0) and name != "foreachBatch":
            shares = sustained / max(cheap[0], 1), bounded / max(cheap[1], 1)
            ratio = f" ({shares[0]:.2f} and {shares[1]:.2f} of foreachBatch's)"
        print(f"{name}: sustained (no gap) {sustained:,} msg/s, bounded {bounded:,} msg/s{ratio}")
    spark.stop()


if __name__ == "__main__":
    main()
