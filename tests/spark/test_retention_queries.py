"""Retention through real Spark queries: what a stream committed stays in its spool for batch
reads and for new streams with ``startingOffsets=earliest`` (Kafka-like), until retention
deletes it."""

from __future__ import annotations

import json

import pytest

from spark_zmq.capture.buffer import spool_table
from spark_zmq.protocols.zeroeq import Publisher, event_id
from spark_zmq.spool.index import Source
from spark_zmq.spool.writer import Spool
from support.common import wait_until

pytestmark = pytest.mark.spark
ECHO = "zeroeq::test::Echo"


def memory_stream(spark, publisher: Publisher, root: str, name: str, checkpoint: str, **options):
    reader = (
        spark.readStream.format("zeroeq")
        .option("publishers", f"127.0.0.1:{publisher.port}")
        .option("spoolPath", root)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def payloads(spark, sql: str) -> list[bytes]:
    return [bytes(r.payload) for r in spark.sql(sql).collect()]


def test_a_batch_read_after_a_stream_committed_everything_returns_all_it_streamed(spark, tmp_path):
    """A stream of 200 events, all committed; a batch read of its spool while it runs, and one
    after it stopped, return all 200 (the history), not only what was left uncommitted."""
    root = str(tmp_path / "spool")
    publisher = Publisher("", announce=False)
    query = memory_stream(spark, publisher, root, "history", str(tmp_path / "checkpoint"))
    try:
        publisher.wait_for_subscribers(timeout=60)
        for i in range(200):
            publisher.publish(ECHO, b"event-%03d" % i)

        # the sink has a batch's rows before the query reports that batch's progress
        wait_until(
            lambda: (
                len(payloads(spark, "select payload from history")) >= 200
                and query.lastProgress is not None
            ),
            timeout=60,
            what="the 200 events in the sink and the query's progress",
        )
        last = query.lastProgress["batchId"]

        def committed() -> bool:
            # Spark commits a micro-batch when it plans the next one: keep data coming
            publisher.publish(ECHO, b"tick")
            return query.lastProgress["batchId"] >= last + 2

        wait_until(committed, timeout=60, what="the 200 events committed")
        streamed = payloads(spark, "select payload from history")
        # a batch read of the spool while the stream captures into it
        during = spark.read.format("zeroeq").option("spoolPath", root).load()
        assert {b"event-%03d" % i for i in range(200)} <= {
            bytes(r.payload) for r in during.collect()
        }
    finally:
        query.stop()
        publisher.close()
    events = [b"event-%03d" % i for i in range(200)]
    assert [p for p in streamed if p != b"tick"] == events
    rows = spark.read.format("zeroeq").option("spoolPath", root).load().orderBy("offset").collect()
    assert [bytes(r.payload) for r in rows if bytes(r.payload) != b"tick"] == events
    assert all(r.error is None for r in rows), "no gap row"


def test_a_new_stream_reads_the_retained_history_from_earliest_each_message_once(spark, tmp_path):
    """An earlier query committed 3 messages of a partition (kept by retention): a new stream
    (new checkpoint) with startingOffsets=earliest reads them, once, like Kafka's earliest."""
    root = str(tmp_path / "spool")
    earlier = Spool(root, 1 << 30)
    frames = [[event_id(ECHO), b"old-%d" % i] for i in range(3)]
    earlier.append("10.9.9.9:1", Source("tcp://10.9.9.9:1", {}), spool_table(frames, [0] * 3, {}))
    earlier.truncate("10.9.9.9:1", 3)  # the earlier query committed them
    earlier.close()
    publisher = Publisher("", announce=False)
    live = f"127.0.0.1:{publisher.port}"
    query = memory_stream(
        spark,
        publisher,
        root,
        "earliest_history",
        str(tmp_path / "checkpoint"),
        startingOffsets="earliest",
    )
    try:
        publisher.wait_for_subscribers(timeout=60)
        publisher.publish(ECHO, b"new")

        def left() -> bool:
            publisher.publish(ECHO, b"tick")
            progress = query.lastProgress
            end = progress["sources"][0]["endOffset"] if progress else None
            offsets = json.loads(end) if isinstance(end, str) else (end or {})
            return "10.9.9.9:1" not in offsets and live in offsets

        wait_until(left, timeout=60, what="the earlier partition read and left the offsets")
        query.processAllAvailable()
        read = payloads(spark, "select payload from earliest_history")
    finally:
        query.stop()
        publisher.close()
    assert sorted(p for p in read if p != b"tick") == [b"new", b"old-0", b"old-1", b"old-2"]
