"""The generic writer's two send loops, called as Spark's executors call ``write`` but without
Spark, so that one test runs both on the same rows: the compiled loop (``sendCore=native``)
and the Python path send the same messages, count the same rows and fail the same way. The
queries through Spark run both loops in tests/protocols/*/."""

from __future__ import annotations

import logging
import threading
import time

import pyarrow as pa
import pytest
import zmq

from spark_zmq.options import parse_options
from spark_zmq.protocols.zeroeq import ZeroEQ, event_id
from spark_zmq.spark.publishers import close_publishers, shared_publisher
from spark_zmq.spark.write_mode import COMPILED, PYTHON, SendCounts, UnsendableRowError
from spark_zmq.spark.writer import ZmqStreamWriter
from spark_zmq.stream_options import WRITER_OPTIONS

A, B, C = "loops::A", "loops::B", "loops::C"
SCHEMA = pa.schema([("event", pa.string()), ("event_id", pa.string()), ("payload", pa.binary())])


def writer(session: str, **options: str) -> ZmqStreamWriter:
    protocol = ZeroEQ()
    given = {"session": session, "discoveryInterfaces": "127.0.0.1", **options}
    return ZmqStreamWriter(
        protocol, parse_options("zeroeq", WRITER_OPTIONS + protocol.writer_options, given)
    )


@pytest.fixture
def subscribed():
    """A SUB that subscribes to everything, connected to the publisher that a writer of the
    session (with the test's socket options) uses in this process."""
    sockets = []

    def connect(session: str, **options: str) -> zmq.Socket:
        made = writer(session, **options)
        publisher = shared_publisher(made.protocol, made.format_settings)
        sock = zmq.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(publisher.publisher.address)  # type: ignore[union-attr]
        sockets.append(sock)
        deadline = time.monotonic() + 10
        while publisher.subscribers(event_id(A)) < 1:  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the subscription did not arrive"
            time.sleep(0.01)
        return sock

    yield connect
    for sock in sockets:
        sock.close(0)
    close_publishers()


def receive_all(sock: zmq.Socket) -> list[list[bytes]]:
    got = []
    while sock.poll(500):
        got.append(sock.recv_multipart())
    return got


def batches() -> list[pa.RecordBatch]:
    """Three batches of good and unsendable rows; the second is a slice (arrays with an
    offset); events B and C first appear in the middle of a batch."""
    first = [
        {"event": A, "payload": b"a0"},
        {"event": A, "payload": b""},  # the empty event: one frame
        {"event": "", "payload": b"empty name"},
        {"event": B, "payload": b"b0"},
        {"event": A, "payload": b"x" * 300},  # over maxMessageBytes
    ]
    second = [{"event": "filler", "payload": b"not in the batch"}] + [
        {"event_id": event_id(B).hex(), "payload": b"b1"},
        {"event_id": "not hex", "payload": b"bad id"},
        {"event": C, "payload": b"c0"},
        {},
    ]
    third = [{"event": C, "payload": b"c%d" % i} for i in range(1, 2500)]
    return [
        pa.RecordBatch.from_pylist(first, schema=SCHEMA),
        pa.RecordBatch.from_pylist(second, schema=SCHEMA).slice(1),
        pa.RecordBatch.from_pylist(third, schema=SCHEMA),
    ]


def expected_messages() -> list[list[bytes]]:
    return (
        [[event_id(A), b"a0"], [event_id(A)], [event_id(B), b"b0"]]
        + [[event_id(B), b"b1"], [event_id(C), b"c0"]]
        + [[event_id(C), b"c%d" % i] for i in range(1, 2500)]
    )


@pytest.mark.parametrize("mode", ["PERMISSIVE", "DROPMALFORMED"])
def test_both_loops_send_the_same_messages_and_counts(subscribed, mode):
    options = {"mode": mode, "maxMessageBytes": "200", "waitForSubscribers": "5"}
    sock = subscribed(f"loops-{mode}", **options)
    results: dict[str, tuple[SendCounts, list[list[bytes]]]] = {}
    for core in ("python", "native"):
        counts = writer(f"loops-{mode}", sendCore=core, **options).write(iter(batches()))
        results[core] = counts, receive_all(sock)

    (by_python, got_python), (by_native, got_native) = results["python"], results["native"]
    assert got_python == got_native == expected_messages()
    assert by_python.send_loops == (PYTHON,) and by_native.send_loops == (COMPILED,)
    for counts in (by_python, by_native):
        assert (counts.rows, counts.sent, counts.skipped) == (2508, 2504, 4)
        assert counts.first_error == "empty event name"


@pytest.mark.parametrize("core", ["python", "native"])
def test_failfast_names_the_same_row_on_both_loops(subscribed, core):
    options = {"mode": "FAILFAST", "maxMessageBytes": "200"}
    sock = subscribed("loops-failfast", **options)
    rows = batches()
    with pytest.raises(UnsendableRowError) as failure:
        writer("loops-failfast", sendCore=core, **options).write(iter(rows))
    assert str(failure.value) == (
        "zeroeq writer: row 3 of this task cannot be sent: empty event name (mode=FAILFAST; "
        "mode=PERMISSIVE or DROPMALFORMED skips such rows)"
    )
    assert receive_all(sock) == []  # nothing of the failing batch went out

    good = rows[2].slice(0, 3)  # then the failing row is the task's row 6
    with pytest.raises(UnsendableRowError, match="row 6 of this task cannot be sent: empty"):
        writer("loops-failfast", sendCore=core, **options).write(iter([good, rows[0]]))
    assert receive_all(sock) == [[event_id(C), b"c%d" % i] for i in range(1, 4)]


@pytest.mark.parametrize("core", ["python", "native"])
def test_a_new_event_in_the_middle_of_a_batch_waits_for_its_subscriber(core):
    """B's first message waits until B has a subscriber, as the Python path waits before it:
    the subscriber subscribes to B only after A's messages arrived, so a loop that sent B
    without waiting would have sent it to nobody."""
    made = writer(f"loops-wait-{core}", sendCore=core, waitForSubscribers="30")
    publisher = shared_publisher(made.protocol, made.format_settings)
    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, event_id(A))
    sock.connect(publisher.publisher.address)  # type: ignore[union-attr]
    rows = [{"event": A, "payload": b"a0"}, {"event": A, "payload": b"a1"}]
    rows += [{"event": B, "payload": b"b0"}, {"event": B, "payload": b"b1"}]
    done: list[SendCounts] = []
    task = threading.Thread(
        target=lambda: done.append(made.write(iter([pa.RecordBatch.from_pylist(rows, SCHEMA)])))
    )
    try:
        task.start()
        got = [sock.recv_multipart() for _ in range(2) if sock.poll(20_000)]
        sock.setsockopt(zmq.SUBSCRIBE, event_id(B))
        got += [sock.recv_multipart() for _ in range(2) if sock.poll(20_000)]
        task.join(30)
    finally:
        sock.close(0)
        close_publishers()
    assert got == [[event_id(r["event"]), r["payload"]] for r in rows]
    assert done and done[0].sent == 4


@pytest.mark.parametrize("core", ["python", "native"])
def test_rows_sent_short_of_min_subscribers_are_named_on_the_driver(core, caplog):
    """When waitForSubscribers runs out below minSubscribers the rows are sent anyway (a
    publisher cannot tell a late subscriber from one that never comes, and those that are
    there must not lose the batch); the task's counts name the topic, and the driver's line
    for the batch is a warning that names it."""
    made = writer(f"loops-short-{core}", sendCore=core, waitForSubscribers="0.3")
    rows = [{"event": A, "payload": b"a0"}, {"event": B, "payload": b"b0"}]
    try:
        counts = made.write(iter([pa.RecordBatch.from_pylist(rows, SCHEMA)]))
    finally:
        close_publishers()
    assert counts.sent == 2 and set(counts.short_of_subscribers) == {A, B}
    with caplog.at_level(logging.INFO, logger="spark_zmq"):
        made.commit([counts], 7)
    (line,) = [r for r in caplog.records if "batch 7" in r.getMessage()]
    assert line.levelno == logging.WARNING
    assert "fewer than minSubscribers (1) subscribers" in line.getMessage()
    assert A in line.getMessage() and B in line.getMessage()


def test_writers_with_other_curve_keys_get_a_publisher_of_their_own():
    """A Python worker shares one publisher per format and everything that shapes it: CURVE
    keys too, so that a query with keys of its own never sends through a socket opened with
    another query's keys (or with none)."""
    _, secret = zmq.curve_keypair()
    plain = writer("loops-curve")
    curved = writer("loops-curve", curveSecretKey=secret.decode())
    try:
        first = shared_publisher(plain.protocol, plain.format_settings)
        second = shared_publisher(curved.protocol, curved.format_settings)
        assert second is not first
        assert shared_publisher(curved.protocol, curved.format_settings) is second
        assert shared_publisher(plain.protocol, plain.format_settings) is first
    finally:
        close_publishers()
