"""writeStream.format("zeroeq"): Spark publishes events that a Spark reader and a plain
wire-level subscriber receive; rows that cannot be sent follow `mode`."""

from __future__ import annotations

import pytest

from spark_zmq.protocols.zeroeq import PUBLISHER_SERVICE, event_id
from support.queries import wait_for_rows
from support.zeroeq import WireSubscriber, announced, start_query, start_writer, write_rows

pytestmark = pytest.mark.spark
A, B = "spark::test::A", "spark::test::B"
INPUT_SCHEMA = "event STRING, event_id STRING, payload STRING"


def test_spark_writer_reaches_a_spark_reader_and_a_late_wire_subscriber(
    spark, tmp_path, zeroconf, send_core
):
    inbox = tmp_path / "in"
    inbox.mkdir()
    session = f"w1-{send_core}"
    reader = start_query(spark, tmp_path, "written", session=session)
    write_rows(
        inbox,
        "1",
        [{"event": A, "payload": f"a/{i}"} for i in range(5)]
        + [{"event": A}, {"event_id": event_id(B).hex(), "payload": "b/0"}],
    )
    writer = start_writer(
        spark,
        tmp_path,
        inbox,
        session=session,
        registeredEvents=f"{A},{B}",
        waitForSubscribers="60",
        minSubscribers="2",
        sendCore=send_core,
    )
    subscriber = None
    try:
        # the writer's task has opened its publisher and waits for a second subscriber
        records = announced(zeroconf, PUBLISHER_SERVICE, session)
        subscriber = WireSubscriber(zeroconf, session, [A, B])  # connects late
        got = subscriber.receive(7)
        write_rows(inbox, "2", [{"event": B, "payload": "b/1"}])  # a second micro-batch
        got = subscriber.receive(8)
        rows = wait_for_rows(spark, "written", 8)
        # a task does not close its publisher: every one that sent is still announced (fails
        # otherwise). Which publisher sends a batch depends on which idle Python worker Spark
        # gives the task: each worker has its own, so two batches may come through two.
        announced(
            zeroconf, PUBLISHER_SERVICE, session, timeout=15, including={r.publisher for r in rows}
        )
    finally:
        writer.stop()
        reader.stop()
        if subscriber is not None:
            subscriber.close()
    expected = (
        [[event_id(A), b"a/%d" % i] for i in range(5)]
        + [[event_id(A)]]
        + [[event_id(B), b"b/0"], [event_id(B), b"b/1"]]
    )
    assert got == expected  # one frame for the empty event
    record = next(iter(records.values()))
    assert {
        "type",
        "instance",
        "user",
        "application",
        "session",
        "vocabulary",
        "vocabulary_request",
    } <= set(record.txt)
    assert record.txt["type"] == "ZeroEQ" and record.session == session
    assert record.vocabulary == {event_id(A), event_id(B)}
    assert record.instance_name.startswith("127.0.0.1:")
    assert sorted((r.event, bytes(r.payload)) for r in rows) == sorted(
        [(A, b"a/%d" % i) for i in range(5)] + [(A, b""), (B, b"b/0"), (B, b"b/1")]
    )


@pytest.mark.parametrize("mode", ["PERMISSIVE", "FAILFAST"])
def test_rows_that_cannot_be_sent_follow_mode(spark, tmp_path, zeroconf, mode, send_core):
    inbox = tmp_path / "in"
    inbox.mkdir()
    session = f"bad-{mode.lower()}-{send_core}"
    write_rows(
        inbox,
        "1",
        [
            {"event": A, "payload": "first"},
            {"event": "", "payload": "empty name"},
            {"event_id": "abc", "payload": "short id"},
            {"event": "spark::test::Unregistered", "payload": "not registered"},
            {"event": A, "payload": "x" * 500},
            {},
            {"event": A, "payload": "last"},
        ],
    )
    subscriber = WireSubscriber(zeroconf, session, [A])
    writer = start_writer(
        spark,
        tmp_path,
        inbox,
        {"availableNow": True},
        session=session,
        mode=mode,
        registeredEvents=A,
        maxMessageBytes="200",
        waitForSubscribers="60",
        sendCore=send_core,
    )
    try:
        if mode == "FAILFAST":
            with pytest.raises(
                Exception, match="row 2 of this task cannot be sent: empty event name"
            ):
                writer.awaitTermination(120)
            return
        assert [m[1] for m in subscriber.receive(2)] == [b"first", b"last"]
        writer.awaitTermination(120)
        assert writer.exception() is None
    finally:
        writer.stop()
        subscriber.close()


def test_writer_options_and_input_columns_are_checked(spark, tmp_path):
    inbox = tmp_path / "in"
    inbox.mkdir()
    write_rows(inbox, "1", [{"event": A}])
    frame = spark.readStream.schema("name STRING").json(str(inbox))
    with pytest.raises(Exception, match="need a column `event`"):
        frame.writeStream.format("zeroeq").option(
            "checkpointLocation", str(tmp_path / "c1")
        ).start().awaitTermination(60)
    frame = spark.readStream.schema(INPUT_SCHEMA).json(str(inbox))
    with pytest.raises(Exception, match="option 'waitForSubscribers' must be a number"):
        frame.writeStream.format("zeroeq").option("waitForSubscribers", "soon").option(
            "checkpointLocation", str(tmp_path / "c2")
        ).start().awaitTermination(60)


def test_wait_for_subscribers_bounds_a_publishers_whole_wait(spark, tmp_path, send_core):
    """No subscriber at all: a batch of 5 different events waits `waitForSubscribers` once
    (the publisher's window), not once per event (which took 5 x the option before)."""
    inbox = tmp_path / "in"
    inbox.mkdir()
    write_rows(inbox, "1", [{"event": f"spark::test::Lonely{i}", "payload": "x"} for i in range(5)])
    writer = start_writer(
        spark,
        tmp_path,
        inbox,
        {"availableNow": True},
        session=f"nobody-listens-{send_core}",
        waitForSubscribers="8",
        sendCore=send_core,
    )
    try:
        writer.awaitTermination(180)
        assert writer.exception() is None
        adding = max(
            progress["durationMs"]["addBatch"]
            for progress in writer.recentProgress
            if "addBatch" in progress["durationMs"]
        )
    finally:
        writer.stop()
    assert 8000 <= adding < 30000, adding  # per event, it was >= 40000


@pytest.mark.parametrize("bind", ["127.0.0.1", "*"])
def test_what_a_publisher_announces_for_each_bind_interface(bind):
    """The table of docs/formats/zeroeq.md, here with loopback alone to announce on: the
    instance name and the vocabulary address are loopback's address for both binds. Bound to
    ``*``, the host name was announced (which a subscriber must resolve), and before that the
    vocabulary server's own address, ``tcp://0.0.0.0:PORT``, which no subscriber can connect
    to. Other hosts: test_zeroeq_hosts.py."""
    from spark_zmq.protocols.zeroeq import Publisher

    publisher = Publisher("announce", host=bind, announce=False)
    try:
        txt = publisher.txt()
        assert publisher.bound_host == ("0.0.0.0" if bind == "*" else bind)
        assert publisher.instance_name == f"127.0.0.1:{publisher.port}"
        assert publisher.instance_names == {"lo": publisher.instance_name}
        assert txt["vocabulary_request"].startswith("tcp://127.0.0.1:")
        port = int(txt["vocabulary_request"].rsplit(":", 1)[1])
        assert port not in (0, publisher.port)
    finally:
        publisher.close()
