"""The delivery contract through real Spark queries: gap rows are not malformed rows (``mode``
never touches them, ``failOnDataLoss`` decides), batch reads of a spool with
startingOffsets/endingOffsets, and minRecordsPerTrigger with maxTriggerDelay."""

from __future__ import annotations

import json
import os
import time

import pytest

from spark_zmq.capture.loop import Capture
from spark_zmq.protocols.contract import Endpoint, StaticDiscovery
from spark_zmq.protocols.zeroeq import MEERKAT, Publisher, event_id
from spark_zmq.spark.offsets import StreamOffset
from spark_zmq.spool.layout import load_index, segment_paths
from spark_zmq.spool.writer import Spool
from support.common import wait_until

ECHO = "zeroeq::test::Echo"
MAX_MESSAGE_BYTES = 1024


def capture_into(root: str, publisher: Publisher, send, max_spool_bytes: int = 1 << 30) -> None:
    """Run capture (the driver's loop, real zmq) on ``publisher`` while ``send`` publishes."""
    spool = Spool(root, max_spool_bytes)
    capture = Capture(spool, max_message_bytes=MAX_MESSAGE_BYTES, flush_interval=0.05)
    capture.start()
    endpoint = Endpoint(publisher.instance_name, publisher.address, {}, (b"", event_id(MEERKAT)))
    StaticDiscovery([endpoint]).start(capture)
    try:
        publisher.wait_for_subscribers(timeout=10)
        send(publisher)
        capture.sync()
    finally:
        capture.close()
        spool.close()


@pytest.fixture(scope="module")
def spool(tmp_path_factory):
    """Two partitions captured from real publishers:

    - ``malformed``: before, a message with a 7-byte event id (malformed), after;
    - ``gaps``: before, a message over maxMessageBytes (zmq drops the connection: a gap row),
      after, a tail of 3,000; then its last segment, of 100 sent once the tail is in the spool,
      is cut short on disk (a damaged segment: gap rows).
    """
    root = str(tmp_path_factory.mktemp("contract") / "spool")
    bad, lossy = Publisher("", announce=False), Publisher("", announce=False)

    def malformed(p):
        p.publish(ECHO, b"before")
        p.send_frames([b"short-id", b"payload"])
        p.publish(ECHO, b"after")
        wait_until(lambda: load_index(root, p.instance_name).end == 3, what="3 spooled")

    def gaps(p):
        p.publish(ECHO, b"before")
        p.publish(ECHO, b"x" * (2 * MAX_MESSAGE_BYTES))
        time.sleep(1.0)  # zmq dropped the connection; wait until capture is back
        p.wait_for_subscribers(timeout=10)
        p.publish(ECHO, b"after")
        wait_until(lambda: load_index(root, p.instance_name).end >= 3, what="3 spooled")
        for i in range(3000):
            p.publish(ECHO, b"tail-%04d" % i + b"." * 200)
        settled(lambda: load_index(root, p.instance_name).end)
        for i in range(100):  # the last segment, which a crash cuts short below
            p.publish(ECHO, b"last-%04d" % i + b"." * 200)

    try:
        capture_into(root, bad, malformed)
        capture_into(root, lossy, gaps)
    finally:
        bad.close()
        lossy.close()
    index = load_index(root, lossy.instance_name)
    last = index.segments[-1]
    path = next(p for p in segment_paths(root, lossy.instance_name, last) if os.path.exists(p))
    with open(path, "r+b") as f:  # a crash cut the last segment short
        f.truncate(os.path.getsize(path) // 2)
    return {"root": root, "malformed": bad.instance_name, "gaps": lossy.instance_name}


def settled(end) -> int:
    """``end()`` once it has not moved for half a second (capture flushes every 50 ms here)."""
    last, since = end(), time.monotonic()
    while time.monotonic() - since < 0.5:
        time.sleep(0.05)
        if (now := end()) != last:
            last, since = now, time.monotonic()
    return last


def batch_read(spark, spool, **options):
    reader = spark.read.format("zeroeq").option("spoolPath", spool["root"])
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(reader.load().collect(), key=lambda r: (r.partition, r.offset))


def kinds(rows, key):
    """Each row of partition ``key`` as ok / malformed / gap."""
    out = []
    for row in rows:
        if row.partition != key:
            continue
        if row.error is None:
            out.append("ok")
        else:
            out.append("gap" if row.error.startswith("gap:") else "malformed")
    return out


def squeeze(seq):
    """Runs of equal items as one: ['ok', 'gap', 'gap', 'ok'] -> ['ok', 'gap', 'ok']."""
    return [x for i, x in enumerate(seq) if i == 0 or seq[i - 1] != x]


def test_a_permissive_batch_read_delivers_malformed_and_gap_rows(spark, spool):
    rows = batch_read(spark, spool)
    assert kinds(rows, spool["malformed"]) == ["ok", "malformed", "ok"]
    gaps = kinds(rows, spool["gaps"])
    assert squeeze(gaps[:4]) == ["ok", "gap", "ok"], "the dropped connection is one gap row"
    assert gaps[-1] == "gap", "the damaged segment's lost messages are gap rows"
    assert len(gaps) == load_index(spool["root"], spool["gaps"]).end, "one row per offset"
    dropped = next(r for r in rows if r.partition == spool["gaps"] and r.error)
    assert dropped.payload is None and "maxMessageBytes (1024 bytes)" in dropped.error
    damaged = [r for r in rows if r.partition == spool["gaps"] and r.error][-1]
    assert "is damaged" in damaged.error and damaged.payload is None


def test_dropmalformed_drops_malformed_rows_and_keeps_every_gap_row(spark, spool):
    permissive = batch_read(spark, spool)
    rows = batch_read(spark, spool, mode="DROPMALFORMED")
    assert kinds(rows, spool["malformed"]) == ["ok", "ok"]
    assert kinds(rows, spool["gaps"]) == kinds(permissive, spool["gaps"])


def test_failfast_fails_on_a_malformed_row_but_not_on_a_gap_row(spark, spool):
    with pytest.raises(Exception) as info:
        batch_read(spark, spool, mode="FAILFAST")
    message = str(info.value)
    assert "zeroeq: malformed message in partition " + spool["malformed"] in message
    assert "at offset 1" in message and "mode=FAILFAST" in message

    only_gaps = json.dumps({spool["malformed"]: -1})  # that partition: nothing (latest)
    rows = batch_read(spark, spool, mode="FAILFAST", startingOffsets=only_gaps)
    assert "gap" in kinds(rows, spool["gaps"]) and not kinds(rows, spool["malformed"])


@pytest.mark.parametrize("mode", ["PERMISSIVE", "DROPMALFORMED", "FAILFAST"])
def test_fail_on_data_loss_fails_at_the_first_gap_in_every_mode(spark, spool, mode):
    only_gaps = json.dumps({spool["malformed"]: -1})
    with pytest.raises(Exception) as info:
        batch_read(spark, spool, mode=mode, failOnDataLoss="true", startingOffsets=only_gaps)
    message = str(info.value)
    assert f"zeroeq: data lost in partition {spool['gaps']} at offset 1 from " in message
    assert "maxMessageBytes (1024 bytes)" in message and "failOnDataLoss=true" in message
    if mode == "FAILFAST":  # it fails on the malformed row of the other partition (above)
        return
    no_gaps = json.dumps({spool["gaps"]: 0})  # that partition: nothing (ends at its start)
    rows = batch_read(spark, spool, mode=mode, failOnDataLoss="true", endingOffsets=no_gaps)
    expected = ["ok", "ok"] if mode == "DROPMALFORMED" else ["ok", "malformed", "ok"]
    assert kinds(rows, spool["malformed"]) == expected and not kinds(rows, spool["gaps"])


BOUND = 16 << 10


@pytest.fixture(scope="module")
def bounded_spool(tmp_path_factory):
    """A partition whose messages met the spool's bound (BOUND): what was written before, then
    a drop episode of 5 messages, ended by a gap row."""
    root = str(tmp_path_factory.mktemp("bounded") / "spool")
    publisher = Publisher("", announce=False)
    written = 0

    def over_the_bound(p):
        nonlocal written
        key = p.instance_name
        while written == 0 or load_index(root, key).nbytes < BOUND:
            # one message a flush, so that each is written while the spool is under its bound
            p.publish(ECHO, b"%04d" % written + b"." * 900)
            written += 1
            wait_until(lambda n=written: load_index(root, key).end == n, what=f"{written} spooled")
        for i in range(5):  # the partition holds the whole bound now: dropped
            p.publish(ECHO, b"dropped-%d" % i)
        time.sleep(0.5)

    try:
        capture_into(root, publisher, over_the_bound, max_spool_bytes=BOUND)
    finally:
        publisher.close()
    return {"root": root, "key": publisher.instance_name, "written": written}


@pytest.mark.parametrize("mode", ["PERMISSIVE", "DROPMALFORMED", "FAILFAST"])
def test_a_drop_episode_at_the_spools_bound_is_a_gap_row_in_every_mode(spark, bounded_spool, mode):
    written = bounded_spool["written"]
    rows = batch_read(spark, bounded_spool, mode=mode)
    assert kinds(rows, bounded_spool["key"]) == ["ok"] * written + ["gap"]
    assert rows[-1].payload is None and rows[-1].error.startswith("gap: 5 messages dropped ")
    assert f"reached maxSpoolBytes ({BOUND} bytes)" in rows[-1].error
    with pytest.raises(Exception) as info:
        batch_read(spark, bounded_spool, mode=mode, failOnDataLoss="true")
    lost = f"zeroeq: data lost in partition {bounded_spool['key']} at offset {written} "
    assert lost in str(info.value)


def test_starting_and_ending_offsets_choose_ranges_per_partition(spark, spool):
    key = spool["malformed"]
    rows = batch_read(
        spark,
        spool,
        startingOffsets=json.dumps({key: 1}),
        endingOffsets=json.dumps({key: 2, spool["gaps"]: 1}),
    )
    assert {(r.partition, r.offset) for r in rows} == {(key, 1), (spool["gaps"], 0)}
    assert batch_read(spark, spool, startingOffsets="latest") == []


@pytest.mark.parametrize(
    "options, words",
    [
        ({"startingOffsets": '{"nobody": 0}'}, "names partitions the spool does not hold: nobody"),
        ({"startingOffsets": "[1, 2]"}, "option 'startingOffsets' must be earliest, latest, or"),
        ({"endingOffsets": "earliest"}, "option 'endingOffsets' must be latest, or JSON"),
        ({"spoolPath": ""}, "set option 'spoolPath' to that folder"),
        ({"spoolPath": "/nonexistent/spool"}, "'/nonexistent/spool' (option spoolPath) does not"),
    ],
)
def test_a_batch_read_with_wrong_options_says_which(spark, spool, options, words):
    with pytest.raises(Exception) as info:
        batch_read(spark, {**spool, "root": options.pop("spoolPath", spool["root"])}, **options)
    assert words in str(info.value)


def test_an_offset_the_spool_no_longer_holds_is_an_error_naming_the_range(spark, spool):
    end = load_index(spool["root"], spool["malformed"]).end
    with pytest.raises(Exception) as info:
        batch_read(spark, spool, endingOffsets=json.dumps({spool["malformed"]: end + 5}))
    assert (
        f"offset {end + 5} of partition {spool['malformed']}, but the spool holds [0, {end})"
        in (str(info.value))
    )


def test_ending_offsets_in_a_stream_is_refused(spark, tmp_path):
    stream = (
        spark.readStream.format("zeroeq")
        .option("publishers", "127.0.0.1:1")
        .option("spoolPath", str(tmp_path / "spool"))
        .option("endingOffsets", "latest")
    )
    with pytest.raises(Exception) as info:
        query = stream.load().writeStream.format("memory").queryName("ending").start()
        try:
            query.awaitTermination(30)
        finally:
            query.stop()
    assert "option 'endingOffsets' applies to batch reads (spark.read) only" in str(info.value)


def test_min_records_per_trigger_waits_for_rows_but_not_past_max_trigger_delay(spark, tmp_path):
    """A slow publisher (20 messages a second) into a parquet sink: with minRecordsPerTrigger=25
    and triggers every 200 ms, every micro-batch Spark runs has at least 25 rows (the reader's
    unchanged offset plans none). When the reader waits, and maxTriggerDelay, is checked without
    Spark: tests/spark/test_reader_planning.py."""
    publisher = Publisher("", announce=False)

    def rows_in(sink) -> int:
        try:
            return spark.read.parquet(str(sink)).count()
        except Exception as exc:  # the folder before the first file: no schema to read yet
            if "UNABLE_TO_INFER_SCHEMA" in str(exc) or "PATH_NOT_FOUND" in str(exc):
                return 0
            raise

    def run(name, **limits):
        sink = tmp_path / f"sink-{name}"
        stream = (
            spark.readStream.format("zeroeq")
            .option("publishers", f"127.0.0.1:{publisher.port}")
            .option("spoolPath", str(tmp_path / f"spool-{name}"))
        )
        for key, value in limits.items():
            stream = stream.option(key, value)
        query = (
            stream.load()
            .writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            publisher.wait_for_subscribers(timeout=60)
            for i in range(120):
                publisher.publish(ECHO, b"%d" % i)
                time.sleep(0.05)
            wait_until(lambda: rows_in(sink) >= 90, timeout=120, what="90 rows in the sink")
            sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        finally:
            query.stop()
            wait_until(lambda: publisher.count_subscribers() == 0, what="the query to disconnect")
        return sizes

    try:
        waiting = run("min", minRecordsPerTrigger="25", maxTriggerDelay="10m")
    finally:
        publisher.close()
    # 120 messages over 6 s: without the minimum, triggers every 200 ms make batches of about 4
    assert waiting and min(waiting) >= 25, waiting


def test_the_default_spool_says_what_it_means_for_restarts(tmp_path, monkeypatch):
    import tempfile

    from spark_zmq.options import parse_options
    from spark_zmq.protocols.zeroeq import ZeroEQ
    from spark_zmq.spark.reader import ZmqStreamReader
    from spark_zmq.stream_options import READER_OPTIONS
    from spark_zmq.testing.logs import logged_warnings

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    publisher = Publisher("", announce=False)
    protocol = ZeroEQ()
    given = {"publishers": f"127.0.0.1:{publisher.port}"}
    reader = ZmqStreamReader(
        protocol, parse_options("zeroeq", READER_OPTIONS + protocol.reader_options, given)
    )
    try:
        with logged_warnings() as lines:
            reader.initialOffset()
    finally:
        reader.stop()
        publisher.close()
    assert reader.spool_path.startswith(str(tmp_path))
    assert any(
        f"option spoolPath is not set: spooling to {reader.spool_path}" in line
        and "exactly-once only while that folder lives" in line
        and "set spoolPath to durable storage" in line
        for line in lines
    ), lines


@pytest.mark.parametrize("starting", ["earliest"])
def test_partitions_an_earlier_run_left_open_are_read_to_their_end_and_leave(
    spark, tmp_path, starting
):
    """A spool holds a partition of an earlier run whose endpoint is gone (the run ended
    without retiring it): a new query reads it once, and then it leaves the offsets, so it is
    not counted as a live endpoint; the live publisher's partition stays. (startingOffsets=latest,
    which skips it, and the offsets of both cases are checked without Spark:
    tests/spark/test_reader_planning.py.)"""
    from spark_zmq.capture.buffer import spool_table
    from spark_zmq.spool.index import Source

    root = str(tmp_path / "spool")
    earlier = Spool(root, 1 << 30)
    frames = [[event_id(ECHO), b"old-%d" % i] for i in range(3)]
    earlier.append("10.9.9.9:1", Source("tcp://10.9.9.9:1", {}), spool_table(frames, [0] * 3, {}))
    earlier.close()
    publisher = Publisher("", announce=False)
    query = (
        spark.readStream.format("zeroeq")
        .option("publishers", f"127.0.0.1:{publisher.port}")
        .option("spoolPath", root)
        .option("startingOffsets", starting)
        .load()
        .writeStream.format("memory")
        .queryName(f"leftovers_{starting}")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        publisher.wait_for_subscribers(timeout=60)
        publisher.publish(ECHO, b"new")

        def offsets(which: str = "endOffset"):
            progress = query.lastProgress
            end = progress["sources"][0][which] if progress else None
            return json.loads(end) if isinstance(end, str) else (end or {})

        live = f"127.0.0.1:{publisher.port}"

        def left() -> bool:
            # Spark commits a batch when it plans the next one with data: keep data coming
            publisher.publish(ECHO, b"tick")
            return "10.9.9.9:1" not in offsets() and live in offsets()

        wait_until(left, timeout=60, what="the earlier run's partition to leave the offsets")
        query.processAllAvailable()
        # what the progress reports (the progress lines' endpoints): the live partition only
        reported = StreamOffset.from_json(offsets("latestOffset")).ends
        assert set(reported) == {live}, query.lastProgress["sources"][0]
        rows = spark.sql(f"select partition, payload from leftovers_{starting}").collect()
    finally:
        query.stop()
        publisher.close()
    payloads = sorted(bytes(r.payload) for r in rows if bytes(r.payload) != b"tick")
    old = [b"old-0", b"old-1", b"old-2"] if starting == "earliest" else []
    assert payloads == [b"new", *old], "each once"
    assert load_index(root, "10.9.9.9:1").retired


def test_a_second_live_query_on_a_spool_fails_naming_the_spool_and_its_holder(spark, tmp_path):
    publisher = Publisher("", announce=False)
    root = str(tmp_path / "spool")

    def start(name):
        return (
            spark.readStream.format("zeroeq")
            .option("publishers", f"127.0.0.1:{publisher.port}")
            .option("spoolPath", root)
            .load()
            .writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}"))
            .start()
        )

    first = start("holder")
    try:
        publisher.wait_for_subscribers(timeout=60)
        second = start("intruder")
        try:
            with pytest.raises(Exception) as info:
                second.awaitTermination(90)
                raise AssertionError("the second query did not fail")
        finally:
            second.stop()
        assert first.isActive and first.exception() is None
    finally:
        first.stop()
        publisher.close()
    message = str(info.value)
    assert f"spool folder {root} is in use by another running query (process " in message
    assert "give each query its own option spoolPath" in message
