"""Capture without Spark: nothing received is lost at shutdown, gaps at the spool bound are
counted and recorded, and SIGTERM (how Spark ends the reader) writes what was received."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime

import pytest
import zmq

from spark_zmq.capture.buffer import BURST, MAX_SEGMENT_ROWS
from spark_zmq.capture.drops import REPORT_SECONDS
from spark_zmq.capture.loop import Capture
from spark_zmq.protocols.contract import Endpoint, StaticDiscovery
from spark_zmq.protocols.zeroeq import MEERKAT, Publisher, event_id
from spark_zmq.spool.layout import load_index
from spark_zmq.spool.reader import read_range
from spark_zmq.spool.writer import Spool
from spark_zmq.testing.logs import logged, logged_warnings
from spark_zmq.testing.wire import bound_xpubs
from support.common import wait_until

ECHO = "zeroeq::test::Echo"
SUBSCRIPTIONS = (b"", event_id(MEERKAT))


def start_capture(tmp_path, publisher, max_bytes=1 << 30, flush_interval=0.05):
    spool = Spool(str(tmp_path / "spool"), max_bytes)
    capture = Capture(spool, max_message_bytes=1 << 20, flush_interval=flush_interval, name="test")
    capture.start()
    endpoint = Endpoint(publisher.instance_name, publisher.address, {}, SUBSCRIPTIONS)
    StaticDiscovery([endpoint]).start(capture)
    publisher.wait_for_subscribers(timeout=10)
    return spool, capture


def spooled(root, key):
    """(frames, fault) of every message the partition holds."""
    index = load_index(root, key)
    rows = []
    for _, _, table in read_range(root, key, index.start, index.end):
        rows += zip(table.column("frames").to_pylist(), table.column("fault").to_pylist())
    return rows


def test_close_writes_what_was_received(tmp_path):
    publisher = Publisher("", announce=False)
    spool, capture = start_capture(tmp_path, publisher, flush_interval=600.0)
    key = publisher.instance_name
    try:
        for i in range(100):
            publisher.publish(ECHO, b"%d" % i)
        wait_until(lambda: capture.received().get(key) == 100, timeout=10, what="100 received")
        assert load_index(spool.root, key).end == 0  # still only in capture's buffer
    finally:
        with logged() as lines:
            capture.close()
        spool.close()
        publisher.close()
    assert [frames[1] for frames, _ in spooled(spool.root, key)] == [b"%d" % i for i in range(100)]
    # one line says what this capture received
    assert f"test: capture stopped; 100 messages received from 1 endpoint ({key} 100)" in lines


def test_capture_reads_more_endpoints_than_zmq_s_default_socket_limit(tmp_path):
    """400 endpoints: three zmq sockets each (its own and its monitor's pair) are 1,200, over
    the 1,023 a zmq context allows by default (capture refused the 342nd endpoint with 'Too
    many open files'). Each publisher's one message is in its partition."""
    context = zmq.Context()
    context.set(zmq.MAX_SOCKETS, 1000)
    pubs, keys = bound_xpubs(context, 400)
    spool = Spool(str(tmp_path / "spool"), 1 << 30)
    capture = Capture(spool, max_message_bytes=1 << 20, flush_interval=0.1, name="test")
    capture.start()
    try:
        with logged_warnings() as warnings:
            StaticDiscovery([Endpoint(k, f"tcp://{k}", {}, (b"",)) for k in keys]).start(capture)
            for pub in pubs:
                assert pub.poll(60_000), f"no subscription from capture: {warnings[:3]}"
                pub.recv()
        for key, pub in zip(keys, pubs, strict=True):
            pub.send(key.encode())
        wait_until(
            lambda: all(load_index(spool.root, k).end == 1 for k in keys),
            timeout=60,
            what="a message in each partition",
        )
    finally:
        capture.close()
        spool.close()
        context.destroy(linger=0)
    assert all(spooled(spool.root, k) == [([k.encode()], None)] for k in keys)


def test_an_endpoint_over_the_process_s_open_file_limit_is_refused_naming_it(tmp_path):
    """With a hard limit of 160 open files (which capture cannot raise), the endpoints beyond
    it are refused, each with a message that names the limit and how to raise it, before zmq
    runs out (where it may abort the process); capture goes on with the others (before, the
    refusal's own spool write failed too and stopped capture for every endpoint)."""
    script = textwrap.dedent(
        f"""
        import resource, sys, time, zmq
        resource.setrlimit(resource.RLIMIT_NOFILE, (160, 160))
        from spark_zmq.capture.loop import Capture
        from spark_zmq.protocols.contract import Endpoint, StaticDiscovery
        from spark_zmq.spool.writer import Spool
        from spark_zmq.testing.logs import logged_warnings
        spool = Spool({str(tmp_path / "spool")!r}, 1 << 30)
        capture = Capture(spool, max_message_bytes=1 << 20, flush_interval=0.1, name="test")
        capture.start()
        keys = [f"127.0.0.1:{{port}}" for port in range(20001, 20061)]
        with logged_warnings() as warnings:
            StaticDiscovery([Endpoint(k, f"tcp://{{k}}", {{}}, (b"",)) for k in keys]).start(
                capture
            )
            time.sleep(3)
        capture.close()
        spool.close()
        print("\\n".join(warnings))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    refused = [line for line in done.stdout.splitlines() if "refused" in line]
    assert refused, done.stdout
    assert "its limit of 160 open files" in refused[0] and "ulimit -Hn" in refused[0], refused[0]
    assert len(refused) < 60, "the endpoints within the limit are read"
    assert "stopped by an error" not in done.stdout, done.stdout


def test_close_takes_what_its_peer_sent_before_it(tmp_path, core):
    """A stop right after a burst: the messages zmq had not yet handed over (still in the I/O
    threads or the kernel) are taken before the socket closes (``loop.STOP_QUIET_SECONDS``),
    not dropped with it, so that none is lost outside the gap a restart dates from the stop.
    The burst is what each core takes well within ``STOP_LINGER_SECONDS`` on a loaded machine
    (the Python loop took 8,192 of 20,000 in CI before the stop's bound; the compiled core
    took 19,704 of 20,000 in one CI run, where the stop's bound came first)."""
    count = 10_000 if core == "native" else 5_000
    pub = zmq.Context.instance().socket(zmq.XPUB)
    pub.setsockopt(zmq.SNDHWM, 0)  # every message queued: none dropped on the sending side
    pub.setsockopt(zmq.LINGER, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    spool = Spool(str(tmp_path / "spool"), 1 << 30)
    capture = Capture(spool, max_message_bytes=1 << 20, flush_interval=600.0, name="test")
    capture.start()
    key = f"127.0.0.1:{port}"
    StaticDiscovery([Endpoint(key, f"tcp://{key}", {}, (b"",))]).start(capture)
    try:
        assert pub.poll(10_000), "no subscription from capture"
        pub.recv()
        for i in range(count):
            pub.send(b"%d" % i)
        capture.close()  # at once: many of them are still on their way
    finally:
        capture.close()
        spool.close()
        pub.close()
    assert [frames[0] for frames, _ in spooled(spool.root, key)] == [
        b"%d" % i for i in range(count)
    ]


def varied_messages(count: int) -> list[list[bytes]]:
    """Messages of 1 to 4 frames, empty frames among them, now and then a 300 KiB one."""
    messages = []
    for i in range(count):
        frames = [b"%d" % i, b"", b"x" * (i % 7)][: 1 + i % 3]
        if i % 5000 == 17:
            frames.append(bytes(range(256)) * 1200)
        messages.append(frames)
    return messages


def test_every_frame_arrives_as_sent_and_a_full_buffer_is_written_at_once(tmp_path, core):
    """Frames of every size and count arrive byte for byte in order; a buffer that reaches
    a segment's rows (MAX_SEGMENT_ROWS) is written before any flush is due."""
    sender = zmq.Context.instance().socket(zmq.XPUB)  # it sees the subscription arrive
    sender.setsockopt(zmq.SNDHWM, 0)
    sender.setsockopt(zmq.LINGER, 0)
    port = sender.bind_to_random_port("tcp://127.0.0.1")
    key = f"127.0.0.1:{port}"
    spool = Spool(str(tmp_path / "spool"), 1 << 30)
    capture = Capture(spool, max_message_bytes=1 << 20, flush_interval=600.0, name="test")
    assert capture.core == core
    capture.start()
    StaticDiscovery([Endpoint(key, f"tcp://{key}")]).start(capture)
    messages = varied_messages(MAX_SEGMENT_ROWS + 5000)
    try:
        assert sender.poll(10_000) and sender.recv() == b"\x01"  # subscribed to everything
        for frames in messages:
            sender.send_multipart(frames)
        wait_until(
            lambda: capture.received().get(key) == len(messages), timeout=60, what="all received"
        )
        # written when full (a burst may take it past the mark), not at a flush
        first = load_index(spool.root, key).segments[0]
        assert MAX_SEGMENT_ROWS <= first.count < MAX_SEGMENT_ROWS + BURST
    finally:
        capture.close()
        spool.close()
        sender.close()
    rows = spooled(spool.root, key)
    assert [fault for _, fault in rows] == [None] * len(messages)
    assert [frames for frames, _ in rows] == messages


def test_an_endpoint_that_leaves_is_read_until_its_peer_disconnects(tmp_path):
    """Discovery reports a peer gone (its goodbye) before the last messages it sent arrive:
    those are kept, and the partition is retired once the peer has closed."""
    publisher = Publisher("", announce=False)
    spool, capture = start_capture(tmp_path, publisher)
    key = publisher.instance_name
    payloads = [b"%05d" % i + b"." * 20_000 for i in range(500)]
    try:
        for payload in payloads:
            publisher.publish(ECHO, payload)
        capture.endpoint_left(key)  # the goodbye overtakes the data
        publisher.close()  # lingers until all is sent
        wait_until(
            lambda: load_index(spool.root, key).retired,
            timeout=10,
            what="the partition to be retired",
        )
    finally:
        capture.close()
        spool.close()
    assert [frames[1] for frames, _ in spooled(spool.root, key)] == payloads


def test_changed_subscriptions_apply_to_the_live_socket(tmp_path):
    """A management request changes what a publisher's socket subscribes to: the connection
    stays (no reconnect, no gap), and only the new subscriptions' messages arrive."""
    publisher = Publisher("", announce=False)
    spool, capture = start_capture(tmp_path, publisher)
    key, other = publisher.instance_name, "zeroeq::test::Other"
    try:
        publisher.publish(ECHO, b"echo 1")
        wait_until(lambda: capture.received().get(key) == 1, what="the first message")
        capture.endpoint_joined(
            Endpoint(
                key, publisher.address, {"note": "changed"}, (event_id(other), event_id(MEERKAT))
            )
        )
        publisher.wait_for_subscribers(1, event=other, timeout=10)
        wait_until(lambda: publisher.count_subscribers(ECHO) == 0, what="ECHO unsubscribed")
        publisher.publish(ECHO, b"echo 2")
        publisher.publish(other, b"other 1")
        wait_until(lambda: capture.received().get(key) == 2, what="the second message")
        capture.sync()
    finally:
        capture.close()
        spool.close()
        publisher.close()
    rows = spooled(spool.root, key)
    assert [(frames[1], fault) for frames, fault in rows] == [(b"echo 1", None), (b"other 1", None)]


def test_spool_bound_drops_are_counted_and_recorded(tmp_path):
    publisher = Publisher("", announce=False)
    spool, capture = start_capture(tmp_path, publisher, max_bytes=1)
    key = publisher.instance_name
    try:
        publisher.publish(ECHO, b"first")  # fits: the spool is empty
        wait_until(lambda: load_index(spool.root, key).end == 1, what="the first message")
        for i in range(50):  # the spool is full now
            publisher.publish(ECHO, b"lost %d" % i)
        wait_until(lambda: capture.received().get(key) == 51, what="51 received")
        capture.sync()
        assert load_index(spool.root, key).end == 1
        spool.truncate(key, 1)  # Spark committed: room again
        publisher.publish(ECHO, b"after")
        wait_until(lambda: capture.received().get(key) == 52, what="52 received")
        capture.sync()
    finally:
        capture.close()
        spool.close()
        publisher.close()
    rows = spooled(spool.root, key)
    assert [(frames[1:], fault is None) for frames, fault in rows[-1:]] == [([b"after"], True)]
    # one gap row, or one a second if the drops lasted longer (drops.REPORT_SECONDS)
    assert all(frames == [] and "reached maxSpoolBytes (1 bytes)" in f for frames, f in rows[:-1])
    assert dropped_counts(rows) and sum(dropped_counts(rows)) == 50
    assert load_index(spool.root, key).dropped == 50


def dropped_counts(rows) -> list[int]:
    """What each drop episode's gap row counts."""
    return [
        int(m.group(1))
        for _, fault in rows
        if fault and (m := re.match(r"gap: (\d+) messages dropped between ", fault))
    ]


def test_drops_that_go_on_are_reported_at_growing_intervals_and_logged_once(tmp_path):
    """Spark commits what it read only when a new offset lets it plan the next micro-batch:
    a drop episode that waited for room could wait for good. One that lasts gets its gap row
    after REPORT_SECONDS, written over the bound; the next begins and waits twice as long. The
    log says when drops began and when the partition was written again, not each gap row."""
    publisher = Publisher("", announce=False)
    spool, capture = start_capture(tmp_path, publisher, max_bytes=1)
    key = publisher.instance_name
    try:
        with logged_warnings() as lines:
            publisher.publish(ECHO, b"first")  # fits: the spool is empty
            wait_until(lambda: load_index(spool.root, key).end == 1, what="the first message")
            for i in range(80):  # 4 s of drops: the spool is at its bound
                publisher.publish(ECHO, b"lost %d" % i)
                time.sleep(0.05)
            wait_until(lambda: capture.received().get(key) == 81, what="81 received")
            capture.sync()
            before = spooled(spool.root, key)  # "first" and the gap rows over the bound
            spool.truncate(key, len(before))  # Spark committed (at the bound: deleted)
            publisher.publish(ECHO, b"after")
            wait_until(lambda: capture.received().get(key) == 82, what="82 received")
            capture.sync()
    finally:
        capture.close()
        spool.close()
        publisher.close()
    rows = spooled(spool.root, key)
    assert rows[-1] == ([rows[-1][0][0], b"after"], None)
    assert sum(dropped_counts(before) + dropped_counts(rows)) == 80
    assert load_index(spool.root, key).dropped == 80
    # written while dropping: after 1 s, then after 2 s more (a third would come 4 s later)
    lasted = [until - since for since, until in gap_times(before)]
    assert 1 <= len(lasted) <= 2 and len(dropped_counts(rows)) == 1, (lasted, rows)
    assert all(t >= REPORT_SECONDS * 2**i - 0.01 for i, t in enumerate(lasted)), lasted
    dropping = [line for line in lines if "dropping new messages" in line]
    assert len(dropping) == 1, lines
    ended = [line for line in lines if re.search(r"gap: \d+ messages dropped", line)]
    assert len(ended) == 1 and f"with the {len(lasted)} gap rows before it, 80 messages" in ended[0]


def gap_times(rows) -> list[tuple[float, float]]:
    """(from, to) in seconds of each drop episode's gap row."""
    found = []
    for _, fault in rows:
        if fault and (m := re.match(r"gap: \d+ messages dropped between (\S+) and (\S+) ", fault)):
            found.append(tuple(datetime.fromisoformat(t).timestamp() for t in m.groups()))
    return found


SIGTERM_CHILD = textwrap.dedent("""
    import sys, time
    from spark_zmq.options import parse_options
    from spark_zmq.stream_options import READER_OPTIONS
    from spark_zmq.protocols.zeroeq import ZeroEQ
    from spark_zmq.spark.reader import ZmqStreamReader
    protocol = ZeroEQ()
    options = parse_options("zeroeq", READER_OPTIONS + protocol.reader_options, {
        "publishers": sys.argv[1], "spoolPath": sys.argv[2], "flushIntervalMs": "600000"})
    reader = ZmqStreamReader(protocol, options)
    reader.initialOffset()          # starts capture, as Spark's first call does
    print("ready", flush=True)
    time.sleep(600)                 # like the runner, blocked until Spark sends SIGTERM
""")


def test_sigterm_writes_what_was_received(tmp_path):
    publisher = Publisher("", announce=False)
    spool = tmp_path / "spool"
    child = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_CHILD, f"127.0.0.1:{publisher.port}", str(spool)],
        stdout=subprocess.PIPE,
        text=True,
    )
    key = publisher.instance_name
    try:
        assert child.stdout.readline().strip() == "ready"
        publisher.wait_for_subscribers(timeout=10)
        for i in range(300):
            publisher.publish(ECHO, b"%d" % i)
        wait_until(lambda: load_index(str(spool), key) is not None, what="the partition")
        time.sleep(0.5)  # the child receives within microseconds; it flushes only on exit
        assert load_index(str(spool), key).end == 0
        child.send_signal(signal.SIGTERM)
        assert child.wait(30) == 128 + signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
        publisher.close()
    frames = [f for f, _ in spooled(str(spool), key)]
    assert [f[1] for f in frames] == [b"%d" % i for i in range(300)]


@pytest.mark.parametrize("gap_row_written", [True, False], ids=["gap-row-written", "gap-row-owed"])
def test_latest_starts_before_what_this_run_captures(tmp_path, gap_row_written):
    """startingOffsets=latest skips what an earlier run left in the spool and the gap row of
    the time between the runs (before this new query), never what this run received before
    Spark's first offset call. The gap row is written with a partition's first flush: either
    that flush came before the query's first offset call (the row is skipped) or it comes
    after (the row is waived, never written); both orders happen in a real query."""
    from spark_zmq.options import parse_options
    from spark_zmq.protocols.zeroeq import ZeroEQ
    from spark_zmq.spark.offsets import StreamOffset
    from spark_zmq.spark.reader import ZmqStreamReader
    from spark_zmq.stream_options import READER_OPTIONS

    publisher = Publisher("", announce=False)
    key = publisher.instance_name
    protocol = ZeroEQ()
    given = {"publishers": key, "spoolPath": str(tmp_path / "spool"), "startingOffsets": "latest"}
    if not gap_row_written:
        given["flushIntervalMs"] = "600000"  # only the first offset call flushes
    options = parse_options("zeroeq", READER_OPTIONS + protocol.reader_options, given)
    try:
        for run, count in ((1, 5), (2, 3)):
            reader = ZmqStreamReader(protocol, options)
            capture = reader._started()._capture  # connects before the first offset call
            publisher.wait_for_subscribers()
            for i in range(count):
                publisher.publish(ECHO, b"run %d/%d" % (run, i))
            wait_until(
                lambda capture=capture, count=count: capture.received().get(key) == count,
                what="messages received",
            )
            if gap_row_written:
                capture.sync()
            initial = reader.initialOffset()
            start = StreamOffset.from_json(initial).ends
            end = StreamOffset.from_json(reader.latestOffset(initial, None)).ends
            if run == 1:
                assert (start, end) == ({key: 0}, {key: 5})
            elif gap_row_written:  # the gap row of the time between the runs at 5, skipped
                assert (start, end) == ({key: 6}, {key: 9})
            else:  # waived before it was written: run 2's messages follow run 1's
                assert (start, end) == ({key: 5}, {key: 8})
            reader.stop()
            wait_until(lambda: publisher.count_subscribers() == 0, what="disconnect")
    finally:
        publisher.close()
    rows = spooled(str(tmp_path / "spool"), key)
    assert [frames[1] for frames, fault in rows if fault is None] == [
        b"run %d/%d" % (run, i) for run, count in ((1, 5), (2, 3)) for i in range(count)
    ]
    assert len([fault for _, fault in rows if fault is not None]) == int(gap_row_written)


def test_the_stop_line_names_the_endpoints_that_received_most_and_counts_the_others():
    from spark_zmq.capture.loop import NAMED_IN_STOP_LINE, _received_text

    received = {f"h:{port}": port % 10 for port in range(1000, 1000 + NAMED_IN_STOP_LINE + 3)}
    assert _received_text({}) == "no endpoint was read"
    assert _received_text(received) == (
        f"{sum(received.values())} messages received from {len(received)} endpoints "
        "(h:1007 7, h:1006 6, h:1005 5, h:1004 4, h:1003 3 and 3 more)"
    )


def test_flush_interval_auto_lengthens_with_the_endpoints_within_bounds():
    """``flushIntervalMs=auto`` (the option's default, None in the settings): every 100 ms up
    to 50 endpoints, 2 ms an endpoint beyond, at most 1 s; a number is taken as it is."""
    from spark_zmq.capture.loop import auto_flush_interval
    from spark_zmq.options import OptionError, parse_options
    from spark_zmq.stream_options import FLUSH_INTERVAL_MS
    from spark_zmq.stream_settings import _seconds

    assert [auto_flush_interval(n) for n in (0, 1, 50)] == [0.1, 0.1, 0.1]
    assert auto_flush_interval(300) == pytest.approx(0.6)
    assert auto_flush_interval(1000) == auto_flush_interval(5000) == 1.0
    parsed = parse_options("zeroeq", (FLUSH_INTERVAL_MS,), {})
    assert _seconds(parsed.get(FLUSH_INTERVAL_MS)) is None
    parsed = parse_options("zeroeq", (FLUSH_INTERVAL_MS,), {"flushIntervalMs": "250"})
    assert _seconds(parsed.get(FLUSH_INTERVAL_MS)) == 0.25
    with pytest.raises(OptionError, match="flushIntervalMs"):
        parse_options("zeroeq", (FLUSH_INTERVAL_MS,), {"flushIntervalMs": "soon"})
