"""How a read is cut into tasks: minPartitions (one partition's offset range read by several
tasks, with exactly the rows of one task, gap and malformed rows included once) and
maxPartitions (many partitions' ranges grouped into a few tasks, issue 46). Planning first (no
Spark), then real Spark reads of a spool, batch and stream.
"""

from __future__ import annotations

import json

import pytest

from spark_zmq.capture.buffer import spool_table
from spark_zmq.options import OptionError, parse_options
from spark_zmq.protocols.zeroeq import Publisher, ZeroEQ, event_id
from spark_zmq.spark.offsets import OffsetRange, group_ranges, plan_tasks, split_ranges
from spark_zmq.spool.index import Source
from spark_zmq.spool.writer import Spool
from spark_zmq.stream_options import MAX_PARTITIONS, MIN_PARTITIONS, READER_OPTIONS
from spark_zmq.testing.wire import bound_xpubs
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


def test_min_and_max_partitions_are_positive_integers_named_in_the_error():
    specs = READER_OPTIONS + ZeroEQ.reader_options
    for option in (MIN_PARTITIONS, MAX_PARTITIONS):
        given = {option.name.lower(): "4"}
        assert parse_options("zeroeq", specs, given).get(option) == 4
        assert parse_options("zeroeq", specs, {}).get(option) is None
        with pytest.raises(OptionError, match=option.name):
            parse_options("zeroeq", specs, {option.name: "0"})


# -- range grouping, without Spark ---------------------------------------------------------------


def test_ranges_are_grouped_whole_into_at_most_the_tasks_asked_for():
    planned = [OffsetRange(f"k{n:03d}", 0, 1 + n % 5) for n in range(100)]
    tasks = group_ranges(planned, 3)
    assert len(tasks) == 3
    assert sorted(r for task in tasks for r in task) == sorted(planned), "each range once, whole"
    assert group_ranges(list(reversed(planned)), 3) == tasks, "the order given does not matter"
    assert group_ranges(planned[:2], 3) == [[planned[0]], [planned[1]]], "fewer ranges: one each"


def test_a_busy_range_gets_a_task_of_its_own_and_the_quiet_ones_share():
    busy = OffsetRange("busy", 0, 100_000)
    quiet = [OffsetRange(f"q{n}", 0, 10) for n in range(50)]
    tasks = group_ranges([busy, *quiet], 2)
    assert [busy] in tasks
    assert len(next(task for task in tasks if task != [busy])) == 50


def test_min_partitions_splits_first_and_then_wins_over_max_partitions():
    whole = OffsetRange("a", 0, 100)
    assert len(plan_tasks([whole], 4, 2, {})) == 4  # one range cut in 4: 4 tasks, not 2
    many = [OffsetRange(f"k{n}", 0, 10) for n in range(20)]
    assert len(plan_tasks(many, None, 2, {})) == 2
    assert len(plan_tasks(many, 5, 2, {})) == 5


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


def test_a_task_decodes_runs_of_small_segments_at_once_and_keeps_offsets_sources_and_gaps(
    tmp_path,
):
    """A read task joins a range's segments (one message each, as a session of many quiet
    publishers leaves them) before decoding, only where they go on from each other under one
    source: the offsets, the endpoint of each row and retention's gap row come out as they
    were written."""
    from spark_zmq.spark.rows import SpoolRange, read_rows
    from spark_zmq.spool.index import Retention
    from spark_zmq.stream_settings import ReaderSettings

    root = str(tmp_path)
    spool = Spool(root, 1 << 30, retention=Retention(seconds=0))
    first, second = Source("tcp://10.9.9.9:1", {}), Source("tcp://10.9.9.9:2", {})
    for n in range(30):
        frames = [[event_id(ECHO), b"m-%02d" % n]]
        spool.append(KEY, first if n < 20 else second, spool_table(frames, [n], {}))
    spool.truncate(KEY, 5)  # retention deletes [0, 5) at the commit
    protocol = ZeroEQ()
    options = protocol.parse_reader_options({})
    settings = ReaderSettings.of(options, protocol.read_settings(options))
    rows = [
        row
        for batch in read_rows(
            protocol, settings.decoding, settings.rows, SpoolRange(root, KEY, 0, 30)
        )
        for row in batch.to_pylist()
    ]
    spool.close()
    assert [r["offset"] for r in rows] == [0, *range(5, 30)]
    assert rows[0]["error"].startswith("gap: 5 messages at offsets [0, 5)")
    assert [r["payload"] for r in rows[1:]] == [b"m-%02d" % n for n in range(5, 30)]
    assert [r["endpoint"] for r in rows[1:]] == ["tcp://10.9.9.9:1"] * 15 + [
        "tcp://10.9.9.9:2"
    ] * 10


def read_task(
    root: str, ranges: list[tuple[str, int, int]], listings=None, **options: str
) -> list[dict]:
    """The rows of one read task of ``ranges`` (key, start, end) of the spool at ``root``;
    ``listings``: each range's segments as a planner saw them (None: the task loads indexes)."""
    from spark_zmq.spark.rows import ReadTask, SpoolRange, read_rows
    from spark_zmq.stream_settings import ReaderSettings

    protocol = ZeroEQ()
    parsed = protocol.parse_reader_options(options)
    settings = ReaderSettings.of(parsed, protocol.read_settings(parsed))
    listings = listings or [None] * len(ranges)
    task = ReadTask(
        tuple(
            SpoolRange(root, key, start, end, listing=listing)
            for (key, start, end), listing in zip(ranges, listings, strict=True)
        )
    )
    return [
        row
        for batch in read_rows(protocol, settings.decoding, settings.rows, task)
        for row in batch.to_pylist()
    ]


def test_a_task_of_many_partitions_decodes_them_together_as_each_alone(tmp_path, caplog):
    """A task decodes the runs of all its partitions in one call (``decode_runs``): each
    row still has its own partition's offsets, endpoint and metadata columns, the event names
    of its own publisher's vocabulary and its own subscription's filter; a malformed message
    dropped under DROPMALFORMED is logged for its own partition."""
    root = str(tmp_path)
    spool = Spool(root, 1 << 30)
    other = "zeroeq::test::Other"
    sources = {
        "10.9.9.9:1": Source("tcp://10.9.9.9:1", {"instance": "a", "session": "s"}),
        "10.9.9.9:2": Source(
            "tcp://10.9.9.9:2",
            {"instance": "b", "names": json.dumps({event_id(other).hex(): "b's name"})},
        ),
        "10.9.9.9:3": Source(  # subscribed to Echo alone (Meerkat)
            "tcp://10.9.9.9:3", {"instance": "c", "events": event_id(ECHO).hex()}
        ),
    }
    for flush in range(3):
        for n, (key, source) in enumerate(sources.items()):
            frames = [[event_id(ECHO), b"%s-%d" % (key.encode(), flush)], [event_id(other), b"o"]]
            if key == "10.9.9.9:2" and flush == 1:
                frames[1] = [b"short"]  # malformed: offset 3 of partition 2
            spool.append(key, source, spool_table(frames, [n, n], {}))
    spool.close()
    ranges = [(key, 0, 6) for key in sources]

    together = read_task(root, ranges)
    alone = [row for part in ranges for row in read_task(root, [part])]

    assert together == alone
    assert [(r["partition"], r["offset"]) for r in together if r["instance"] == "c"] == [
        ("10.9.9.9:3", offset) for offset in (0, 2, 4)
    ], "partition 3's publisher sends Other too, outside its subscription"
    named = {
        (r["partition"], r["event"]) for r in together if r["event_id"] == event_id(other).hex()
    }
    assert named == {("10.9.9.9:1", None), ("10.9.9.9:2", "b's name")}
    assert {r["endpoint"] for r in together} == {s.endpoint for s in sources.values()}
    assert [r["offset"] for r in together if r["error"]] == [3]
    caplog.clear()
    dropped = read_task(root, ranges, mode="DROPMALFORMED")
    assert len(dropped) == len(together) - 1
    lines = [r.getMessage() for r in caplog.records if "malformed messages of" in r.getMessage()]
    assert lines == [
        "zeroeq: dropped 1 malformed messages of partition 10.9.9.9:2 in offsets [0, 6)"
    ]


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


@pytest.mark.spark
def test_hundreds_of_publishers_are_read_by_max_partitions_tasks_each_message_once(spark, tmp_path):
    """Issue 46: 200 wire-level ZeroEQ publishers (an XPUB each, in this process) read with
    maxPartitions=3: every micro-batch, however many endpoints it holds rows of, is 3 read
    tasks at most (the plan Spark runs: the batch's RDD partitions), and the sink gets every
    message once, each in its publisher's partition."""
    import zmq

    sockets, addresses = bound_xpubs(zmq.Context.instance(), 200)
    seen: list[tuple[int, int, int]] = []  # (read tasks, rows, partitions) per micro-batch
    rows: list[tuple[str, bytes]] = []

    def sink(frame, batch_id):
        got = frame.select("partition", "payload").collect()
        seen.append((frame.rdd.getNumPartitions(), len(got), len({r.partition for r in got})))
        rows.extend((r.partition, bytes(r.payload)) for r in got)

    query = (
        spark.readStream.format("zeroeq")
        .option("publishers", ",".join(addresses))
        .option("spoolPath", str(tmp_path / "spool"))
        .option("maxPartitions", "3")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    sent = []
    try:
        for socket in sockets:  # a subscription from the reader's SUB: it is connected
            assert socket.poll(60_000), "the reader did not subscribe to every publisher"
            socket.recv()
        for round_ in range(5):
            for address, socket in zip(addresses, sockets, strict=True):
                payload = b"%s-%d" % (address.encode(), round_)
                socket.send_multipart([event_id(ECHO), payload])
                sent.append((address, payload))
        wait_until(lambda: len(rows) >= len(sent), timeout=120, what="the 1,000 events")
        query.processAllAvailable()
    finally:
        query.stop()
        for socket in sockets:
            socket.close()
    assert sorted(rows) == sorted(sent), "each message once, in its publisher's partition"
    assert all(tasks <= 3 for tasks, _, _ in seen), seen
    assert max(partitions for _, _, partitions in seen) > 3, seen  # grouped, not one each


def timeless(rows: list[dict]) -> list[dict]:
    """``rows`` without the receive times of gap rows (the time of the read that made them)."""
    return [{**r, "received_at": None} if r["payload"] is None else r for r in rows]


def test_a_task_given_the_planners_listings_reads_what_one_loading_the_indexes_reads(
    tmp_path, monkeypatch
):
    """The planner hands each range its segments as it saw them (``Spool.listing`` where
    capture runs on the driver, ``SnapshotReader.listing`` elsewhere): the task then loads no
    index (``load_index`` fails here if it does) and reads the same rows, retention's gap row
    included. Segments that retention deleted after the listing was made read as one gap row."""
    from spark_zmq.spool import reader as spool_reader
    from spark_zmq.spool.index import Retention
    from spark_zmq.spool.reader import SnapshotReader

    root = str(tmp_path)
    spool = Spool(root, 1 << 30, retention=Retention(seconds=0))
    keys = ["10.9.9.9:1", "10.9.9.9:2", "10.9.9.9:3"]
    for flush in range(6):
        for key in keys:
            frames = [[event_id(ECHO), b"%s-%d-%d" % (key.encode(), flush, n)] for n in range(3)]
            spool.append(key, Source(f"tcp://{key}", {}), spool_table(frames, [flush] * 3, {}))
    spool.truncate(keys[0], 6)  # retention deletes [0, 6) of the first at the commit
    ranges = [(keys[0], 3, 18), (keys[1], 3, 12), (keys[2], 12, 18)]
    snapshots = SnapshotReader(root)
    snapshots.snapshot()
    for listings in (
        [spool.listing(*r) for r in ranges],
        [snapshots.listing(*r) for r in ranges[1:]],
    ):
        assert all(listing is not None for listing in listings)
        wanted = ranges[-len(listings) :]
        loaded = read_task(root, wanted)
        with monkeypatch.context() as patched:
            patched.setattr(spool_reader, "load_index", None)  # a call fails
            assert timeless(read_task(root, wanted, listings)) == timeless(loaded)
    assert loaded[0]["offset"] == 3 and loaded[1]["error"] is None
    first = read_task(root, ranges[:1])
    assert first[0]["error"].startswith("gap: 3 messages at offsets [3, 6)")
    listing = spool.listing(keys[1], 0, 18)
    spool.truncate(keys[1], 9)  # deleted after the listing: [0, 9) is a gap row
    rows = read_task(root, [(keys[1], 0, 18)], [listing])
    assert rows[0]["offset"] == 0 and rows[0]["error"].startswith("gap: 9 messages at offsets")
    assert [r["offset"] for r in rows if r["error"] is None] == list(range(9, 18))
    spool.close()
