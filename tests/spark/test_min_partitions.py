"""minPartitions: one partition's offset range read by several tasks, with exactly the rows of
one task (gap and malformed rows included once). Range splitting first (no Spark), then real
Spark reads of a spool, batch and stream."""

from __future__ import annotations

import pytest

from spark_zmq.capture.buffer import spool_table
from spark_zmq.options import OptionError, parse_options
from spark_zmq.protocols.zeroeq import Publisher, ZeroEQ, event_id
from spark_zmq.spark.offsets import OffsetRange, split_ranges
from spark_zmq.spool.index import Source
from spark_zmq.spool.writer import Spool
from spark_zmq.stream_options import MIN_PARTITIONS, READER_OPTIONS
from support.common import wait_until

ECHO = "zeroeq::test::Echo"
KEY = "10.9.9.9:1"


# -- range splitting, without Spark --------------------------------------------------------------


def covers_exactly(whole: OffsetRange, pieces: list[OffsetRange]) -> bool:
    """The pieces are contiguous, in order, non-empty, and cover ``whole``."""
    bounds = [whole.start] + [p.end for p in pieces]
    return (
        all(p.key == whole.key for p in pieces)
        and [p.start for p in pieces] == bounds[:-1]
        and bounds[-1] == whole.end
        and all(p.size > 0 for p in pieces)
    )


def test_no_split_without_the_option_or_with_enough_ranges():
    planned = [OffsetRange("a", 0, 100), OffsetRange("b", 5, 9)]
    assert split_ranges(planned, None, {}) == planned
    assert split_ranges(planned, 2, {}) == planned


def test_one_range_is_cut_into_near_equal_contiguous_pieces():
    whole = OffsetRange("a", 10, 110)
    pieces = split_ranges([whole], 3, {})
    assert covers_exactly(whole, pieces)
    assert sorted(p.size for p in pieces) == [33, 33, 34]


def test_pieces_follow_each_range_s_share_of_the_total_as_kafka_s():
    big, small = OffsetRange("a", 0, 900), OffsetRange("b", 0, 100)
    pieces = split_ranges([big, small], 4, {})
    assert covers_exactly(big, [p for p in pieces if p.key == "a"])
    assert covers_exactly(small, [p for p in pieces if p.key == "b"])
    assert len([p for p in pieces if p.key == "a"]) == 4  # ceil(900 / 1000 * 4)
    assert len([p for p in pieces if p.key == "b"]) == 1  # ceil(100 / 1000 * 4)


def test_never_more_pieces_than_offsets():
    whole = OffsetRange("a", 7, 9)
    pieces = split_ranges([whole], 5, {})
    assert pieces == [OffsetRange("a", 7, 8), OffsetRange("a", 8, 9)]


def test_no_cut_below_the_first_retained_offset():
    """Offsets below the first retained one were deleted and are read as one gap row per range:
    the first piece holds all of them, so that row comes once."""
    whole = OffsetRange("a", 0, 100)
    pieces = split_ranges([whole], 4, {"a": 60})
    assert covers_exactly(whole, pieces) and len(pieces) == 4
    assert pieces[0].start == 0 and all(p.start >= 60 for p in pieces[1:])
    assert split_ranges([whole], 4, {"a": 100}) == [whole]  # all deleted: one piece


def test_min_partitions_is_a_positive_integer_named_in_the_error():
    specs = READER_OPTIONS + ZeroEQ.reader_options
    assert parse_options("zeroeq", specs, {"minpartitions": "4"}).get(MIN_PARTITIONS) == 4
    assert parse_options("zeroeq", specs, {}).get(MIN_PARTITIONS) is None
    with pytest.raises(OptionError, match="minPartitions"):
        parse_options("zeroeq", specs, {"minPartitions": "0"})


# -- through Spark -------------------------------------------------------------------------------


def spool_with_faults(root: str) -> None:
    """One partition of 300 messages in three segments; offset 150 is a gap row (capture's
    fault), offset 151 a malformed message (one frame, no payload)."""
    spool = Spool(root, 1 << 30)
    source = Source("tcp://10.9.9.9:1", {})
    for segment in range(3):
        frames = [[event_id(ECHO), b"m-%03d" % (segment * 100 + i)] for i in range(100)]
        faults = {}
        if segment == 1:
            frames[50], faults = [], {50: "gap: 7 messages lost (test)"}
            frames[51] = [b"short"]
        spool.append(KEY, source, spool_table(frames, [0] * 100, faults))
    spool.close()


@pytest.mark.spark
def test_a_batch_read_split_into_tasks_gives_the_same_rows_gap_row_once(spark, tmp_path):
    root = str(tmp_path / "spool")
    spool_with_faults(root)

    def read(**options: str):
        frame = spark.read.format("zeroeq").option("spoolPath", root).options(**options).load()
        rows = frame.select("offset", "payload", "error").orderBy("offset").collect()
        return frame.rdd.getNumPartitions(), [tuple(r) for r in rows]

    tasks_one, whole = read()
    tasks_split, split = read(minPartitions="4")
    assert (tasks_one, tasks_split) == (1, 4)
    assert split == whole
    assert [r[0] for r in split] == list(range(300)), "every offset once"
    gap_rows = [r for r in split if r[2] is not None and r[2].startswith("gap:")]
    assert [r[0] for r in gap_rows] == [150]
    malformed = [r for r in split if r[2] is not None and not r[2].startswith("gap:")]
    assert [r[0] for r in malformed] == [151]


@pytest.mark.spark
def test_a_stream_reads_each_micro_batch_with_min_partitions_tasks(spark, tmp_path):
    """A stream from one publisher with minPartitions=3: every micro-batch of n messages is read
    by min(3, n) tasks, and the sink gets each message once."""
    publisher = Publisher("", announce=False)
    seen: list[tuple[int, int]] = []  # (read tasks, rows) per micro-batch
    payloads: list[bytes] = []

    def sink(frame, batch_id):
        rows = frame.select("payload").collect()
        seen.append((frame.rdd.getNumPartitions(), len(rows)))
        payloads.extend(bytes(r.payload) for r in rows)

    query = (
        spark.readStream.format("zeroeq")
        .option("publishers", f"127.0.0.1:{publisher.port}")
        .option("spoolPath", str(tmp_path / "spool"))
        .option("minPartitions", "3")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    events = [b"event-%04d" % i for i in range(1000)]
    try:
        publisher.wait_for_subscribers(timeout=60)
        for event in events:
            publisher.publish(ECHO, event)
        wait_until(lambda: len(payloads) >= 1000, timeout=60, what="the 1000 events")
        query.processAllAvailable()
    finally:
        query.stop()
        publisher.close()
    assert sorted(payloads) == events
    assert seen and all(tasks == min(3, rows) for tasks, rows in seen), seen
    assert any(tasks == 3 for tasks, _ in seen)
