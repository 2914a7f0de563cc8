"""Messages that a peer makes too large for capture, on both receive cores: a message over
maxMessageBytes in all (each frame under it) or over maxMessageParts is dropped whole, the next
one is read from its first frame, and each run of dropped messages is one gap row with its
count; the bound of a buffer counts frames as well as bytes; and a socket whose receive fails
costs its own connection a gap row and a new socket, while the others keep flowing.

The peers are raw pyzmq sockets written here."""

from __future__ import annotations

import re
import time

import pytest
import zmq

from spark_zmq.capture import buffer as buffer_module
from spark_zmq.capture import receiving
from spark_zmq.capture.loop import Capture
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.spool.layout import load_index
from spark_zmq.spool.reader import read_range
from spark_zmq.spool.writer import Spool
from spark_zmq.testing.logs import logged_warnings
from support.common import wait_until

#: zeroeq::test::Echo's 16-byte wire id (the fact sheet's test vector)
ECHO = bytes.fromhex("dddb197182000e88e3986e01f92e2e28")
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


class RawPeer:
    """A publisher: a bare XPUB on loopback, which sees subscriptions arrive."""

    def __init__(self) -> None:
        self.sock = zmq.Context.instance().socket(zmq.XPUB)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.LINGER, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.key = f"127.0.0.1:{port}"
        self.sent = 0

    def wait_subscribed(self, to: bytes = b"") -> None:
        """Until a subscription that ``to`` matches arrives."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.sock.poll(1000):
                subscription = self.sock.recv()
                if subscription[:1] == b"\x01" and to.startswith(subscription[1:]):
                    return
        raise AssertionError(f"no subscriber for {to!r} at {self.key}")

    def send(self, *messages: list[bytes]) -> None:
        for frames in messages:
            self.sock.send_multipart(frames)
            self.sent += 1

    def close(self) -> None:
        self.sock.close(0)


def start_capture(
    tmp_path, peers, flush_interval=600.0, max_message_bytes=1 << 20, **bounds
) -> tuple[Spool, Capture]:
    spool = Spool(str(tmp_path / "spool"), 1 << 30)
    capture = Capture(
        spool,
        flush_interval=flush_interval,
        name="test",
        max_message_bytes=max_message_bytes,
        **bounds,
    )
    capture.start()
    for key, socket_type in peers:
        capture.endpoint_joined(Endpoint(key, f"tcp://{key}", socket_type=socket_type))
    return spool, capture


def spooled(root, key):
    """(frames, fault) of every row the partition holds, and the rows of each segment."""
    index = load_index(root, key)
    rows, segments = [], []
    for _, _, table in read_range(root, key, index.start, index.end):
        rows += zip(table.column("frames").to_pylist(), table.column("fault").to_pylist())
        segments.append(table.num_rows)
    return rows, segments


def good(i: int) -> list[bytes]:
    return [b"good", b"%d" % i]


WIDE = [b"w" * 1000] * 300  # every frame at maxMessageBytes, 300,000 bytes in all
MANY = [b""] * 5000  # no bytes, 5000 parts
AT_BYTES = [b"x" * 500, b"y" * 500]  # 1000 bytes: at the bound, kept
AT_PARTS = [b"p"] + [b""] * 999  # 1000 parts: at the bound, kept


def gap_pattern(key: str, count: int, largest_bytes: int, largest_parts: int) -> str:
    messages = "1 message" if count == 1 else f"{count} messages"
    return (
        rf"gap: {messages} of tcp://{re.escape(key)} over maxMessageBytes \(1000 bytes\) / "
        rf"maxMessageParts \(1000\) (was|were) dropped by capture between {TIME} and {TIME} "
        rf"\(largest: {largest_bytes} bytes in {largest_parts} parts\)$"
    )


def test_messages_over_their_bounds_are_dropped_whole_one_gap_row_per_run(tmp_path, core):
    """Good messages arrive once each, intact and in order, between gap rows at the places of
    the messages dropped: one row per run of them, with its count and its largest message;
    nothing of a dropped message is stored. Logged once."""
    peer = RawPeer()
    first_part = [good(0), WIDE, good(1), MANY, good(2)]
    second_part = [
        [b"a" * 600, b"b" * 600],
        WIDE,
        [b""] * 1001,
        good(3),
        AT_BYTES,
        AT_PARTS,
        good(4),
        MANY,
    ]
    with logged_warnings() as warnings:
        spool, capture = start_capture(
            tmp_path, [(peer.key, zmq.SUB)], max_message_bytes=1000, max_message_parts=1000
        )
        try:
            peer.wait_subscribed()
            for part in (first_part, second_part):
                peer.send(*part)
                wait_until(
                    lambda: capture.received().get(peer.key) == peer.sent,
                    timeout=30,
                    what="every message taken from the socket",
                )
                capture.sync()  # a flush: its gap rows are made and logged
            capture.check()
        finally:
            capture.close()
            spool.close()
            peer.close()
    rows, _ = spooled(spool.root, peer.key)
    kept = [frames for frames, fault in rows if fault is None]
    assert kept == [good(0), good(1), good(2), good(3), AT_BYTES, AT_PARTS, good(4)]
    gaps = [(index, fault) for index, (frames, fault) in enumerate(rows) if fault is not None]
    assert all(rows[index][0] == [] for index, _ in gaps), "a gap row holds no frames"
    assert [index for index, _ in gaps] == [1, 3, 5, 10]
    expected = [(1, 300_000, 300), (1, 0, 5000), (3, 300_000, 300), (1, 0, 5000)]
    for (_, text), (count, nbytes, parts) in zip(gaps, expected, strict=True):
        assert re.match(gap_pattern(peer.key, count, nbytes, parts), text), text
    about_it = [line for line in warnings if peer.key in line]
    assert len(about_it) == 1, about_it  # the episode's first line; the next within a minute
    assert (
        "sent 2 messages over maxMessageBytes (1000 bytes) / maxMessageParts (1000)"
        in (about_it[0])
    )


def test_a_buffer_is_written_at_its_bound_in_bytes_counting_frames_too(tmp_path, core, monkeypatch):
    """Messages of 1000 empty frames hold no bytes, yet their offsets take room: a buffer's
    bound (here 100,000 bytes) counts 4 bytes per frame and 12 per row, so it is written each
    time 25 such messages are in, well before any flush is due."""
    monkeypatch.setattr(buffer_module, "MAX_SEGMENT_BYTES", 100_000)  # the Python core's
    monkeypatch.setattr(receiving, "MAX_SEGMENT_BYTES", 100_000)  # the compiled core's
    peer = RawPeer()
    spool, capture = start_capture(tmp_path, [(peer.key, zmq.SUB)])
    empty = [b""] * 1000
    try:
        peer.wait_subscribed()
        peer.send(*[empty] * 60)
        wait_until(lambda: capture.received().get(peer.key) == 60, what="60 messages")
        capture.sync()
    finally:
        capture.close()
        spool.close()
        peer.close()
    rows, segments = spooled(spool.root, peer.key)
    assert [frames for frames, _ in rows] == [empty] * 60
    full = -(-100_000 // (1000 * 4 + 12))  # 25: the message that reaches the bound is in
    assert segments == [full, full, 60 - 2 * full]  # two written full, the rest at sync


def test_a_socket_whose_receive_fails_costs_only_its_own_connection(tmp_path, core):
    """A REQ socket cannot receive before it sent (zmq says EFSM): an endpoint read through
    one fails at every receive (it is never ready, so capture receives from it when it stops,
    taking what each socket still holds). Each failure is a gap row of its own partition and
    a new socket, logged once; the good publisher beside it loses nothing."""
    peer = RawPeer()
    replier = zmq.Context.instance().socket(zmq.REP)
    replier.setsockopt(zmq.LINGER, 0)
    failing = f"127.0.0.1:{replier.bind_to_random_port('tcp://127.0.0.1')}"
    with logged_warnings() as warnings:
        spool, capture = start_capture(
            tmp_path, [(failing, zmq.REQ), (peer.key, zmq.SUB)], flush_interval=0.05
        )
        try:
            peer.wait_subscribed()
            for i in range(100):
                peer.send(good(i))
                time.sleep(0.01)  # a second of flushes
            wait_until(lambda: capture.received().get(peer.key) == 100, what="100 messages")
            capture.sync()
            capture.check()
        finally:
            capture.close()
            spool.close()
            peer.close()
            replier.close(0)
    good_rows, _ = spooled(spool.root, peer.key)
    assert good_rows == [(good(i), None) for i in range(100)]
    failed_rows, _ = spooled(spool.root, failing)
    assert len(failed_rows) >= 1, "a failure, a gap row"
    cause = rf"errno {zmq.EFSM}, {re.escape(zmq.strerror(zmq.EFSM))}"
    for frames, fault in failed_rows:
        assert frames == [] and re.match(
            rf"gap: receiving from tcp://{re.escape(failing)} failed at {TIME} \({cause}\); "
            rf"capture opened a new socket",
            fault,
        ), fault
    about_it = [line for line in warnings if failing in line]
    assert len(about_it) == 1 and "opens a new socket" in about_it[0], about_it


@pytest.mark.spark
@pytest.mark.parametrize("core", ["native"], indirect=True)
def test_a_query_sees_one_gap_row_for_a_run_of_messages_over_the_bounds(
    spark, tmp_path, core, contained
):
    """Through a Spark query: a ZeroEQ publisher's good events arrive once each, and the run of
    two events over maxMessageBytes and maxMessageParts between them is one gap row.

    On the default receive loop only: how each loop drops such a run and counts it in one gap
    row is checked on both, without Spark, by
    ``test_messages_over_their_bounds_are_dropped_whole_one_gap_row_per_run``; what the query
    adds (the gap row reaches the table, the good events once each) does not depend on it."""
    peer = RawPeer()
    query = (
        spark.readStream.format("zeroeq")
        .options(
            publishers=peer.key,
            spoolPath=str(tmp_path / "spool"),
            maxMessageBytes="1000",
            maxMessageParts="100",
            # a run is one row per flush at most: flushes (here only at the batches, every 2 s)
            # must not fall between the two messages, sent within a millisecond
            flushIntervalMs="600000",
            captureCore=core,
        )
        .load()
        .writeStream.format("memory")
        .queryName("over_bounds")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="2 seconds")
        .start()
    )
    try:
        messages = [
            [ECHO, b"0"],
            [ECHO, b"1"],
            [ECHO] + [b"w" * 900] * 3,  # 2716 bytes in 4 parts
            [ECHO] + [b""] * 200,  # 16 bytes in 201 parts
            [ECHO, b"2"],
        ]
        peer.wait_subscribed(ECHO)
        peer.send(*messages)
        wait_until(
            lambda: spark.sql(
                "select * from over_bounds where cast(payload as string) = '2'"
            ).count(),
            timeout=120,
            what="the last good event",
        )
        query.processAllAvailable()
        rows = spark.sql("select payload, error from over_bounds").collect()
    finally:
        query.stop()
        peer.close()
    assert sorted(bytes(r.payload) for r in rows if r.error is None) == [b"0", b"1", b"2"]
    gaps = [r.error for r in rows if r.error is not None]
    # one row for the run, or two if a flush (a micro-batch's) fell between its messages
    pattern = re.compile(
        rf"gap: (\d+) messages? of tcp://{re.escape(peer.key)} over maxMessageBytes \(1000 "
        rf"bytes\) / maxMessageParts \(100\) (?:was|were) dropped by capture between .* "
        rf"\(largest: (\d+) bytes in (\d+) parts\)"
    )
    found = [pattern.fullmatch(text) for text in gaps]
    assert gaps and all(found), gaps
    assert sum(int(m.group(1)) for m in found if m) == 2, gaps
    assert {(m.group(2), m.group(3)) for m in found if m} >= {("2716", "4")}, gaps
