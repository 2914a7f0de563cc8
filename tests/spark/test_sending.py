"""The writer's compiled send loop (``spark_zmq.spark.sending``) over real sockets, without
Spark: what reaches a SUB is frame for frame what the batch's rows say, back-pressure ends in
the publisher's own timeout error, and a signal during a blocked send is handled. The writer
queries that use it are in tests/protocols/*/ (on both send paths)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pyarrow as pa
import pytest
import zmq
from hypothesis import given
from hypothesis import strategies as st

from spark_zmq.errors import OptionError
from spark_zmq.native import SEND, choose, load
from spark_zmq.protocols.contract import EncodedBatch
from spark_zmq.protocols.xpub import SendTimeout, XPubSender
from spark_zmq.spark.sending import RUN_ROWS, ColumnSender, frame_column
from support.fuzzing import fuzz

TOPIC = b"t"


@pytest.fixture(scope="module")
def native():
    return load(SEND)  # must load here: an ImportError fails the tests


def connected(
    context: zmq.Context,
    send_hwm: int = 1000,
    send_timeout: float | None = None,
    receive_hwm: int | None = None,
    receive_buffer: int | None = None,
) -> tuple[XPubSender, zmq.Socket]:
    """An XPUB publisher (the writers' own class) bound on loopback and a SUB subscribed to
    everything, the subscription seen by the publisher before this returns."""
    publisher = XPubSender(
        "tcp://127.0.0.1:*",
        send_hwm=send_hwm,
        send_timeout=send_timeout,
        bind=True,
        context=context,
    )
    subscriber = context.socket(zmq.SUB)
    if receive_hwm is not None:
        subscriber.setsockopt(zmq.RCVHWM, receive_hwm)
    if receive_buffer is not None:
        subscriber.setsockopt(zmq.RCVBUF, receive_buffer)
    subscriber.setsockopt(zmq.LINGER, 0)
    subscriber.setsockopt(zmq.SUBSCRIBE, b"")
    subscriber.connect(publisher.address)
    deadline = time.monotonic() + 10
    while publisher.subscribers(b"") < 1:
        assert time.monotonic() < deadline, "the subscription did not arrive"
        time.sleep(0.01)
    return publisher, subscriber


@pytest.fixture
def pair():
    """``connected`` with a subscriber that queues without bound."""
    context = zmq.Context()
    publisher, subscriber = connected(context, receive_hwm=0)
    yield publisher, subscriber
    subscriber.close(0)
    publisher.socket.close(0)
    context.term()


def receive(subscriber: zmq.Socket, count: int) -> list[list[bytes]]:
    got = []
    while len(got) < count and subscriber.poll(5000):
        got.append(subscriber.recv_multipart())
    return got


def batch_of(messages: list[list[bytes] | None], width: int, skip: int = 0) -> EncodedBatch:
    """An EncodedBatch of ``messages`` (None: a row not sent) with ``width`` frame columns,
    each array sliced after ``skip`` leading rows of filler, so that offsets are not 0."""
    filler: list[list[bytes] | None] = [[b"filler"]] * skip
    rows = filler + messages
    columns = [
        pa.array([m[k] if m is not None and k < len(m) else None for m in rows], pa.binary())
        for k in range(width)
    ]
    errors = pa.array([None if m is not None else "unsendable" for m in rows], pa.string())
    return EncodedBatch(
        [c.slice(skip) for c in columns], errors.slice(skip), columns[0].slice(skip)
    )


frames = st.binary(max_size=70)
messages = st.lists(st.one_of(st.none(), st.lists(frames, min_size=1, max_size=4)), max_size=40)


@fuzz(60)
@given(rows=messages, skip=st.integers(0, 3))
def test_what_arrives_is_frame_for_frame_what_the_rows_say_60_examples(native, rows, skip):
    context = zmq.Context()
    publisher, subscriber = connected(context)
    try:
        encoded = batch_of(rows, 4, skip)
        expected = [m for m in rows if m is not None]
        assert list(encoded.messages(0, len(encoded))) == expected
        sent = ColumnSender(native, encoded).send(publisher, 0, len(encoded))
        assert sent == len(expected)
        assert receive(subscriber, sent) == expected
        assert not subscriber.poll(20)
    finally:
        subscriber.close(0)
        publisher.socket.close(0)
        context.term()


def test_runs_of_a_large_batch_and_a_part_of_it_arrive_in_order(native, pair):
    publisher, subscriber = pair
    count = 3 * RUN_ROWS + 17
    rows = [[TOPIC, b"%d" % i] if i % 5 else [TOPIC] for i in range(count)]
    encoded = batch_of(rows, 2)
    sender = ColumnSender(native, encoded)
    assert sender.send(publisher, 10, count - 10) == count - 20
    assert receive(subscriber, count - 20) == rows[10 : count - 10]


def test_back_pressure_beyond_the_send_timeout_raises_the_publishers_timeout_error(native):
    context = zmq.Context()
    publisher, subscriber = connected(
        context, send_hwm=10, send_timeout=0.3, receive_hwm=10, receive_buffer=4096
    )
    try:
        encoded = batch_of([[TOPIC, bytes(10_000)]] * 5000, 2)
        started = time.monotonic()
        with pytest.raises(SendTimeout, match=r"stayed blocked for 0\.3 s"):
            ColumnSender(native, encoded).send(publisher, 0, len(encoded))
        assert time.monotonic() - started >= 0.3
    finally:
        subscriber.close(0)
        publisher.socket.close(0)
        context.term()


def blocked_publisher(context: zmq.Context) -> tuple[XPubSender, zmq.Socket]:
    """A publisher whose subscriber does not read: its sends block (no send timeout)."""
    return connected(context, send_hwm=10, receive_hwm=10, receive_buffer=4096)


class Alarm(Exception):
    pass


@pytest.mark.timeout(60)
def test_a_signal_handler_that_raises_ends_a_blocked_send(native):
    context = zmq.Context()
    publisher, subscriber = blocked_publisher(context)

    def ring(signum, frame):
        raise Alarm()

    previous = signal.signal(signal.SIGALRM, ring)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(Alarm):
            ColumnSender(native, batch_of([[TOPIC, bytes(10_000)]] * 5000, 2)).send(
                publisher, 0, 5000
            )
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        subscriber.close(0)
        publisher.socket.close(0)
        context.term()


@pytest.mark.timeout(60)
def test_a_blocked_send_goes_on_after_a_signal_handler_returns(native):
    """Every message arrives exactly once although a signal interrupts the blocked sends
    (several times: the handler rearms the timer until the reader starts)."""
    context = zmq.Context()
    publisher, subscriber = blocked_publisher(context)
    rings: list[float] = []

    def ring(signum, frame):
        rings.append(time.monotonic())
        if len(rings) < 3:
            signal.setitimer(signal.ITIMER_REAL, 0.2)

    rows = [[TOPIC, b"%06d" % i + bytes(5000)] for i in range(2000)]
    got: list[list[bytes]] = []
    reader = threading.Thread(
        target=lambda: (time.sleep(1.0), got.extend(receive(subscriber, 2000)))
    )
    previous = signal.signal(signal.SIGALRM, ring)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        reader.start()
        assert ColumnSender(native, batch_of(rows, 2)).send(publisher, 0, 2000) == 2000
        reader.join(30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        subscriber.close(0)
        publisher.socket.close(0)
        context.term()
    assert len(rings) == 3
    assert got == rows


def test_a_closed_socket_is_refused_before_any_send(native, pair):
    publisher, _ = pair
    publisher.socket.close(0)
    with pytest.raises(zmq.ZMQError, match="closed"):
        ColumnSender(native, batch_of([[TOPIC]], 1)).send(publisher, 0, 1)


def test_frame_columns_must_be_binary():
    with pytest.raises(TypeError, match="must be of type binary, not string"):
        frame_column(pa.array(["text"]))


def test_the_send_core_is_chosen_by_option_then_environment(monkeypatch, native):
    monkeypatch.setenv(SEND.variable, "python")
    assert choose(SEND) is None
    assert choose(SEND, "native") is native
    monkeypatch.setenv(SEND.variable, "auto")
    assert choose(SEND) is native
    assert choose(SEND, "python") is None
    monkeypatch.setenv(SEND.variable, "fast")
    with pytest.raises(OptionError, match="SPARK_ZMQ_SEND_CORE='fast' is not one of auto"):
        choose(SEND)
    with pytest.raises(OptionError, match="sendCore='fast' is not one of auto"):
        choose(SEND, "fast")


#: where the send module does not import: what each choice gives, and the log (stderr)
WITHOUT_SEND_MODULE = textwrap.dedent("""
    import json, sys
    sys.modules["spark_zmq.native.send"] = None
    from spark_zmq.log import configure_logging
    configure_logging("INFO")
    from spark_zmq.native import RECEIVE, SEND, NativeUnavailable, choose
    seen = {"auto": [choose(SEND) for _ in range(2)], "receive": choose(RECEIVE).__name__}
    try:
        choose(SEND, "native")
    except NativeUnavailable as exc:
        seen["native"] = [isinstance(exc, ImportError), str(exc)]
    print(json.dumps(seen))
""")


def test_where_the_send_module_does_not_load_writers_take_the_python_path_and_say_so_once():
    """auto falls back with one log line per process, native refuses naming the option and the
    module, and capture's compiled core still loads: each module is loaded on its own."""
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_SEND_MODULE], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.splitlines()[-1])
    assert seen["auto"] == [None, None]
    assert seen["receive"] == "spark_zmq.native.receive"
    assert seen["native"] == [
        True,
        "sendCore=native: the compiled send loop is not available: spark_zmq.native.send does "
        "not import: import of spark_zmq.native.send halted; None in sys.modules",
    ]
    fallback = "writers send through their Python path: the compiled send loop is not available"
    assert run.stderr.count(fallback) == 1, run.stderr
