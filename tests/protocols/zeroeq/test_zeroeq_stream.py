"""End to end: real publishers, real ZeroConf discovery, real Spark streaming queries."""

from __future__ import annotations

import time

import pytest
import zmq

from spark_zmq.protocols.zeroeq import PUBLISHER_SERVICE, event_id
from spark_zmq.spool.layout import load_index
from support.common import wait_until
from support.queries import end_offset, rows_of, wait_for_rows
from support.sequences import ECHO
from support.zeroeq import start_query


def reader(spark, tmp_path, name, **options):
    stream = spark.readStream.format("zeroeq")
    options.setdefault("discoveryInterfaces", "127.0.0.1")
    options.setdefault("spoolPath", str(tmp_path / f"spool-{name}"))
    for key, value in options.items():
        stream = stream.option(key, value)
    return stream.load()


def test_three_publishers_two_sessions(spark, tmp_path, publishers):
    alice1, alice2, bob = publishers("alice"), publishers("alice"), publishers("bob")
    query = start_query(spark, tmp_path, "sessions", session="alice")
    try:
        alice1.wait_for_subscribers()
        alice2.wait_for_subscribers()
        sent = set()
        for i in range(50):
            for publisher in (alice1, alice2, bob):
                payload = f"{publisher.instance_name}/{i}".encode()
                publisher.publish(ECHO, payload)
                if publisher is not bob:
                    sent.add(payload)
        wait_for_rows(spark, "sessions", 100)
        query.processAllAvailable()
        rows = rows_of(spark, "sessions")
    finally:
        query.stop()
    payloads = [bytes(r.payload) for r in rows]
    assert sorted(payloads) == sorted(sent)
    assert bob.count_subscribers() == 0
    row = rows[0]
    assert row.session == "alice" and row.error is None and row.user and row.instance
    # the publisher's vocabulary takes ECHO's name when it first publishes it, and announces
    # it again: a segment written after capture has seen that carries the name (a CI run under
    # load flushed the first row only then)
    assert row.event_id == event_id(ECHO).hex() and row.event in (None, ECHO)
    assert row.publisher in (alice1.instance_name, alice2.instance_name)
    assert row.partition == row.publisher and row.endpoint == f"tcp://{row.publisher}"


def test_publisher_joining_late_and_one_leaving(spark, tmp_path, publishers):
    early = publishers("churn")
    query = start_query(spark, tmp_path, "churn", session="churn", events=ECHO)
    try:
        early.wait_for_subscribers()
        for i in range(20):
            early.publish(ECHO, b"early/%d" % i)
        late = publishers("churn")  # starts after the query
        late.wait_for_subscribers(timeout=20)
        for i in range(20):
            late.publish(ECHO, b"late/%d" % i)
            early.publish(ECHO, b"early/%d" % (20 + i))
        early.close()  # leaves mid-stream
        rows = wait_for_rows(spark, "churn", 60)
        # its partition is retired once its data was read
        wait_until(
            lambda: (
                late.instance_name in end_offset(query)
                and early.instance_name not in end_offset(query)
            ),
            timeout=30,
            what="the departed publisher's partition to be retired",
        )
        for i in range(5):
            late.publish(ECHO, b"late/%d" % (20 + i))
        rows = wait_for_rows(spark, "churn", 65)
    finally:
        query.stop()
    expected = {b"early/%d" % i for i in range(40)} | {b"late/%d" % i for i in range(25)}
    assert sorted(bytes(r.payload) for r in rows) == sorted(expected)
    assert {r.event for r in rows} == {ECHO}


def test_restart_from_checkpoint_delivers_captured_rows_exactly_once(spark, tmp_path, publishers):
    publisher = publishers("restart")
    sink, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    spool = tmp_path / "spool"

    def start(spool=spool, **options):
        return (
            reader(
                spark,
                tmp_path,
                "restart",
                session="restart",
                spoolPath=str(spool),
                maxRecordsPerTrigger="10",
                **options,
            )
            .writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="1 second")
            .start()
        )

    def sink_count():
        try:
            return spark.read.parquet(str(sink)).count()
        except Exception:  # no file written yet
            return 0

    first = start()
    try:
        publisher.wait_for_subscribers()
        for i in range(200):
            publisher.publish(ECHO, b"%d" % i)
        # all 200 captured, far fewer processed (10 per second) when the query stops
        wait_until(
            lambda: (index := load_index(str(spool), publisher.instance_name)) and index.end == 200,
            timeout=30,
            what="200 messages in the spool",
        )
        wait_until(lambda: sink_count() >= 10, what="a first batch in the sink")
    finally:
        first.stop()
    assert 10 <= sink_count() < 200
    wait_until(lambda: publisher.count_subscribers() == 0, what="the first run to disconnect")

    second = start()
    try:
        publisher.wait_for_subscribers()
        for i in range(200, 260):
            publisher.publish(ECHO, b"%d" % i)
        wait_until(lambda: sink_count() >= 260, timeout=120, what="260 rows in the sink")
        second.processAllAvailable()
    finally:
        second.stop()
    table = spark.read.parquet(str(sink)).select("payload", "partition", "offset", "error")
    rows = table.collect()
    # the restart's one gap row: the time capture did not run, in which nothing was published
    (gap,) = [r for r in rows if r.error is not None]
    assert gap.error.startswith("gap: capture of partition ") and "was not running" in gap.error
    events = [r for r in rows if r.error is None]
    assert sorted(int(r.payload) for r in events) == list(range(260))
    assert len({(r.partition, r.offset) for r in rows}) == 261

    # The checkpoint's offsets name messages of that spool only: restarted on another (a
    # driver on a host whose local spoolPath is empty), the query would skip this spool's
    # first 261 offsets with no gap row. It fails, saying so, whatever failOnDataLoss says.
    for fail in ("false", "true"):
        elsewhere = start(tmp_path / "elsewhere", failOnDataLoss=fail)
        try:
            wait_until(lambda q=elsewhere: q.exception() is not None, what="the query to fail")
        finally:
            elsewhere.stop()
        error = str(elsewhere.exception())
        assert "the checkpoint's offsets were taken in spool " in error
        assert "(its spool.json)" in error and "start with a new checkpoint" in error


MALFORMED = {
    "short-id": lambda p: p.send_frames([b"short-id", b"payload"]),
    "three-frames": lambda p: p.send_frames([event_id(ECHO), b"a", b"b"]),
    "oversize": lambda p: p.publish(ECHO, b"x" * 2000),
}


def publish_malformed(publisher, kinds, reader_comes_back: bool = True):
    """``reader_comes_back`` False: the query fails on the gap (failOnDataLoss), and its
    capture may be gone before it was seen again, so "after" is not waited for."""
    publisher.wait_for_subscribers()
    publisher.publish(ECHO, b"before")
    for kind in kinds:
        MALFORMED[kind](publisher)
    if "oversize" in kinds and reader_comes_back:  # zmq drops the connection; wait for it
        time.sleep(1.0)
        publisher.wait_for_subscribers()
    publisher.publish(ECHO, b"after")


@pytest.mark.parametrize("mode", ["PERMISSIVE", "DROPMALFORMED"])
def test_malformed_messages_kept_or_dropped(spark, tmp_path, publishers, mode):
    publisher = publishers("bad-" + mode)
    name = "malformed_" + mode.lower()
    query = start_query(
        spark, tmp_path, name, session="bad-" + mode, mode=mode, maxMessageBytes="1024"
    )
    try:
        publish_malformed(publisher, list(MALFORMED))
        expected = 5 if mode == "PERMISSIVE" else 3  # the gap row stays under DROPMALFORMED
        wait_until(
            lambda: any(bytes(r.payload or b"") == b"after" for r in rows_of(spark, name)),
            what="the last message",
        )
        query.processAllAvailable()
        rows = sorted(rows_of(spark, name), key=lambda r: r.offset)
    finally:
        query.stop()
    assert len(rows) == expected
    assert [bytes(r.payload) for r in (rows[0], rows[-1])] == [b"before", b"after"]
    gap = rows[-2]
    assert gap.payload is None and gap.error.startswith("gap: ")
    assert "maxMessageBytes (1024 bytes)" in gap.error
    if mode == "PERMISSIVE":
        short, three = rows[1:3]
        assert bytes(short.payload) == b"short-idpayload"
        assert "2 frames of 8, 7 bytes" in short.error
        assert short.event_id is None
        assert bytes(three.payload) == event_id(ECHO) + b"ab" and "3 frames" in three.error
    assert all(r.error is None for r in (rows[0], rows[-1]))


@pytest.mark.parametrize(
    "kind, words",
    [
        ("short-id", "2 frames of 8, 7 bytes"),
        ("three-frames", "3 frames of 16, 1, 1 bytes"),
    ],
)
def test_malformed_message_fails_a_failfast_query(spark, tmp_path, publishers, kind, words):
    publisher = publishers("failfast-" + kind)
    query = start_query(
        spark,
        tmp_path,
        "failfast_" + kind.replace("-", "_"),
        session="failfast-" + kind,
        mode="FAILFAST",
        maxMessageBytes="1024",
    )
    try:
        publish_malformed(publisher, [kind])
        with pytest.raises(Exception) as info:
            query.awaitTermination(60)
            raise AssertionError("the query did not fail")
    finally:
        query.stop()
    message = str(info.value)
    assert "zeroeq: malformed message in partition" in message and words in message
    assert "mode=FAILFAST" in message


@pytest.mark.parametrize("fail_on_data_loss", [False, True])
def test_a_dropped_connection_is_a_gap_row_that_only_fail_on_data_loss_fails_on(
    spark, tmp_path, publishers, fail_on_data_loss
):
    """Under FAILFAST, a message over maxMessageBytes (zmq drops the connection: data lost, not
    a malformed message) is delivered as a gap row; failOnDataLoss=true fails the query."""
    session = f"lossy-{fail_on_data_loss}".lower()
    publisher = publishers(session)
    name = session.replace("-", "_")
    query = start_query(
        spark,
        tmp_path,
        name,
        session=session,
        mode="FAILFAST",
        maxMessageBytes="1024",
        failOnDataLoss=str(fail_on_data_loss).lower(),
    )
    try:
        publish_malformed(publisher, ["oversize"], reader_comes_back=not fail_on_data_loss)
        if fail_on_data_loss:
            with pytest.raises(Exception) as info:
                query.awaitTermination(60)
                raise AssertionError("the query did not fail")
            message = str(info.value)
            assert f"zeroeq: data lost in partition {publisher.instance_name}" in message
            assert "maxMessageBytes (1024 bytes)" in message and "failOnDataLoss=true" in message
            return
        wait_until(
            lambda: any(bytes(r.payload or b"") == b"after" for r in rows_of(spark, name)),
            what="the last message",
        )
        rows = sorted(rows_of(spark, name), key=lambda r: r.offset)
    finally:
        query.stop()
    assert [bytes(r.payload) if r.payload else r.error[:4] for r in rows] == [
        b"before",
        "gap:",
        b"after",
    ]


@pytest.mark.parametrize(
    "options, words",
    [
        ({"mode": "LENIENT"}, "zeroeq: option 'mode' must be one of PERMISSIVE, DROPMALFORMED"),
        ({"sesion": "x"}, "zeroeq: unknown option 'sesion'. Did you mean 'session'?"),
        (
            {"maxRecordsPerTrigger": "-5"},
            "option 'maxRecordsPerTrigger' must be a positive integer",
        ),
        ({"publishers": "nohost"}, "option 'publishers' must be comma-separated host:port"),
    ],
)
def test_invalid_options_fail_when_the_query_is_defined(spark, tmp_path, options, words):
    with pytest.raises(Exception) as info:
        reader(spark, tmp_path, "invalid", **options)
    assert words in str(info.value)


@pytest.mark.parametrize(
    "options, words",
    [
        ({"discoveryInterfaces": "nosuchif0"}, "discoveryInterfaces: no interface 'nosuchif0'"),
        ({"spoolPath": "/proc/version/spool"}, "as a spool folder (option spoolPath)"),
    ],
)
def test_unusable_environment_fails_the_query_with_a_clear_error(spark, tmp_path, options, words):
    query = start_query(spark, tmp_path, "unusable", **options)
    try:
        with pytest.raises(Exception) as info:
            query.awaitTermination(60)
            raise AssertionError("the query did not fail")
    finally:
        query.stop()
    assert words in str(info.value)


def test_available_now_ends_and_max_records_per_trigger_caps_batches(spark, tmp_path, publishers):
    one, two = publishers("bounded"), publishers("bounded")
    spool = str(tmp_path / "spool")
    # a first query captures 160 messages but plans no batch after its first (empty) one
    capturing = start_query(
        spark,
        tmp_path,
        "capturing",
        session="bounded",
        spoolPath=spool,
        trigger={"processingTime": "1 hour"},
    )
    try:
        one.wait_for_subscribers()
        two.wait_for_subscribers()
        for i in range(100):
            one.publish(ECHO, b"one/%d" % i)
        for i in range(60):
            two.publish(ECHO, b"two/%d" % i)
        wait_until(
            lambda: sum(load_index(spool, p.instance_name).end for p in (one, two)) == 160,
            what="160 messages in the spool",
        )
    finally:
        capturing.stop()
    bounded = start_query(
        spark,
        tmp_path,
        "bounded",
        session="bounded",
        spoolPath=spool,
        startingOffsets="earliest",
        maxRecordsPerTrigger="50",
        trigger={"availableNow": True},
    )
    try:
        assert bounded.awaitTermination(120), "an availableNow query must end by itself"
        sizes = [p["numInputRows"] for p in bounded.recentProgress if p["numInputRows"]]
    finally:
        bounded.stop()
    rows = rows_of(spark, "bounded")
    assert sizes == [50, 50, 50, 10]
    assert len(rows) == 160 and len({bytes(r.payload) for r in rows}) == 160


def test_publisher_speaks_the_shipped_wire_format(zeroconf, publishers):
    """Our demo publisher, checked at the wire level against the fact sheet."""
    publisher = publishers("wire", application="wire-test")
    info = zeroconf.get_service_info(
        PUBLISHER_SERVICE, f"{publisher.instance_name}.{PUBLISHER_SERVICE}", 3000
    )
    txt = {k.decode(): v.decode() for k, v in info.properties.items()}
    assert txt["Type"] == "ZeroEQ" and txt["Session"] == "wire"
    assert txt["Application"] == "wire-test" and txt["User"] and ":" in txt["Instance"]
    sub = zmq.Context.instance().socket(zmq.SUB)
    try:
        sub.setsockopt(zmq.SUBSCRIBE, event_id(ECHO))
        sub.setsockopt(zmq.SUBSCRIBE, event_id("zeroeq::Meerkat"))
        sub.connect(f"tcp://{publisher.instance_name}")
        publisher.wait_for_subscribers()
        publisher.publish(ECHO, b"payload")
        publisher.publish(ECHO)
        assert sub.poll(5000)
        assert sub.recv_multipart() == [event_id(ECHO), b"payload"]
        assert sub.poll(5000)
        assert sub.recv_multipart() == [event_id(ECHO)]
    finally:
        sub.close(0)
