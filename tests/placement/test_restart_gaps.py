"""Issue 33: a query that stops or crashes and starts again on the same checkpoint and spool
leaves no unmarked hole. Every message it did not capture falls within the span of a gap row of
its partition (the time capture was not running), and none is delivered twice.

The crash is a SIGKILL of the whole spark-submit process group (driver JVM, Python workers and
the reader's capture together), in local mode, while a publisher sends numbered messages.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from spark_zmq.spool.reader import read_snapshot
from spark_zmq.testing.logs import logged_warnings
from support.common import ROOT, wait_until
from support.holders import threads_here
from support.jobs import LOOPBACK_CONF, SPARK_SUBMIT
from support.sequences import ECHO

#: messages per second the publisher sends
RATE = 200
#: ms a message may take from the publisher's clock reading to capture's receive (same host):
#: one published just before the time a gap row starts at can arrive after it, and be lost
IN_FLIGHT_MS = 5
#: options of both runs besides the app's own (session, spoolPath, capture)
APP_OPTIONS = {"leaseTimeout": "3", "captureIdleTimeout": "20"}
GAP_SPAN = re.compile(r"^gap: .* between (\S+Z) and (\S+Z) \(")


class TimedSender:
    """Publishes 0, 1, 2, ... at RATE per second, noting when (wall clock, ms) each was sent."""

    def __init__(self, publisher) -> None:
        self.publisher = publisher
        self.sent_at: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0 / RATE):
            self.sent_at.append(time.time_ns() // 1_000_000)
            self.publisher.publish(ECHO, b"%d" % (len(self.sent_at) - 1))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return len(self.sent_at)


def submit(control: Path, spool: Path, sink: Path, session: str, placement: str):
    """The restarting query app under spark-submit (local mode), in a process group of its own."""
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    command = [str(SPARK_SUBMIT), "--master", "local[2]"]
    for setting in LOOPBACK_CONF:
        command += ["--conf", setting]
    control.mkdir()
    app = ROOT / "tests" / "apps" / "restarting_query.py"
    options = [f"capture={placement}", *(f"{k}={v}" for k, v in APP_OPTIONS.items())]
    job = subprocess.Popen(
        [*command, str(app), str(control), str(spool), str(sink), session, "1", *options],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True).start()
    return job, lines


def start_query(spark, spool: Path, sink: Path, session: str, placement: str):
    """The same query as the app's, in this process's session."""
    options = dict(APP_OPTIONS, session=session, capture=placement, spoolPath=str(spool))
    return (
        spark.readStream.format("zeroeq")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(sink) + "_checkpoint")
        .trigger(processingTime="1 second")
        .start()
    )


#: the last error of reading the table, for a failure's message
READ_ERRORS: dict[str, str] = {}


def table_rows(spark, sink: Path) -> list:
    if not (sink / "_spark_metadata").is_dir():
        return []
    try:
        table = spark.read.parquet(str(sink))
        return table.select("partition", "payload", "error", "received_at").collect()
    except Exception as exc:  # nothing committed yet
        READ_ERRORS[str(sink)] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return []


def numbers(rows) -> list[int]:
    return [int(row.payload) for row in rows if row.error is None]


def ms(text: str) -> int:
    """A gap row's UTC time as ms since the epoch."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def check_every_lost_message_is_in_a_gap(rows, key: str, sent_at: list[int]) -> list:
    """No number twice; each one missing after the first delivered was sent within the span
    of a gap row of ``key``. Returns the gap rows' spans (ms)."""
    got = numbers(rows)
    assert len(got) == len(set(got)), "messages delivered twice"
    spans = []
    for row in rows:
        if row.error is not None and row.error.startswith("gap:"):
            assert row.partition == key and row.payload is None, row
            match = GAP_SPAN.match(row.error)
            assert match, row.error
            spans.append((ms(match.group(1)), ms(match.group(2))))
    # before the first run's capture connected, nothing was captured yet: not lost to a restart
    missing = sorted(set(range(min(got), len(sent_at))) - set(got))
    unmarked = [
        n for n in missing if not any(t1 - IN_FLIGHT_MS <= sent_at[n] <= t2 for t1, t2 in spans)
    ]
    print(f"{len(sent_at)} sent, {len(missing)} missing, gap spans {spans}")
    assert not unmarked, f"{len(unmarked)} lost outside every gap row: {unmarked[:20]}"
    return spans


@pytest.mark.jvms  # the first run is a spark-submit job
@pytest.mark.parametrize("placement", ["driver", "executors"])
def test_a_killed_query_restarted_marks_every_lost_message_with_a_gap_row(
    spark, tmp_path, publishers, placement
):
    """Killed with SIGKILL under spark-submit, restarted in this process on the same
    checkpoint and spool."""
    session = f"killed-{placement}"
    publisher = publishers(session)
    spool, sink = tmp_path / "spool", tmp_path / "table"
    sender = TimedSender(publisher)
    began = time.monotonic()
    query = None
    job, lines = submit(tmp_path / "control", spool, sink, session, placement)
    try:
        try:
            wait_until(lambda: len(numbers(table_rows(spark, sink))) > 20, 180, 0.5, "rows")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the job printed:\n{''.join(lines)[-5000:]}") from None
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(10)
        killed_at = len(sender.sent_at)
        time.sleep(2)
        query = start_query(spark, spool, sink, session, placement)
        rows = run_on(spark, sink, sender, killed_at, query, publisher)
    finally:
        sender.stop()
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        if query is not None:
            query.stop()
    print(f"killed at message {killed_at}; {time.monotonic() - began:.0f} s")
    spans = check_every_lost_message_is_in_a_gap(rows, publisher.instance_name, sender.sent_at)
    assert spans, "no gap row for the time the query was down"


def test_a_stopped_query_restarted_marks_every_lost_message_with_a_gap_row(
    spark, tmp_path, publishers
):
    """Stopped cleanly and started again (capture=driver): the time between is one gap row."""
    publisher = publishers("stopped")
    spool, sink = tmp_path / "spool", tmp_path / "table"
    sender = TimedSender(publisher)
    query = start_query(spark, spool, sink, "stopped", "driver")
    try:
        wait_until(lambda: len(numbers(table_rows(spark, sink))) > 20, 120, 0.5, "rows")
        query.stop()
        stopped_at = len(sender.sent_at)
        time.sleep(2)
        query = start_query(spark, spool, sink, "stopped", "driver")
        rows = run_on(spark, sink, sender, stopped_at, query, publisher)
    finally:
        sender.stop()
        query.stop()
    spans = check_every_lost_message_is_in_a_gap(rows, publisher.instance_name, sender.sent_at)
    assert len(spans) == 1, spans


def run_on(spark, sink: Path, sender: TimedSender, restarted_at: int, query, publisher) -> list:
    """Let the restarted ``query`` deliver new messages, stop sending, and wait until the last
    message sent is in the table: the table's rows. A failure says what the table, the query
    and ``publisher`` (its subscribers) show.

    New messages count only with the gap row of the downtime, which the restarted capture
    writes with the first message it receives: a capture stopped by ``query.stop()`` still
    receives for a moment after the call returns, and a loaded machine can take longer to
    restart the query than the test took to see those rows, stop sending, and wait for
    messages nobody would ever receive (the failures of ci14, ci16, ci17 and stop 46's ci1)."""
    wait_until(
        lambda: (
            (rows := table_rows(spark, sink))
            and max(numbers(rows), default=0) > restarted_at
            and any(row.error is not None and row.error.startswith("gap:") for row in rows)
        ),
        120,
        0.5,
        "the restarted query to deliver new messages after its gap row",
    )
    sent = sender.stop()
    try:
        return wait_until(
            lambda: (r := table_rows(spark, sink)) and max(numbers(r)) == sent - 1 and r,
            60,
            0.5,
            "every sent message up to the last in the table",
        )
    except AssertionError as exc:  # what the table and the query show, for the next reader
        rows = table_rows(spark, sink)
        got = numbers(rows)
        after = [r.received_at for r in rows if r.error is None and int(r.payload) > restarted_at]
        message = (
            f"{exc}: {len(got)} numbers in the table, the largest {max(got, default=None)}; "
            f"{sent} sent (the restart at {restarted_at}); those after the restart received "
            f"from {min(after, default=None)} to {max(after, default=None)}; the publisher's "
            f"(un)subscriptions: {subscription_history(publisher)}; its connections: "
            f"{connections(publisher.port)}; after it published {PROBES} more messages of "
            f"{PROBE_BYTES} bytes: {probed(publisher, sink.parent / 'spool')}; "
            f"the query: {query.exception()}, "
            f"{query.status}, last progress "
            f"{json.dumps(query.lastProgress, default=str)[-2000:]}; input rows of its "
            f"micro-batches {[p['numInputRows'] for p in query.recentProgress]}; last error "
            f"reading the table: {READ_ERRORS.get(str(sink))}; the threads of the sources' "
            f"runners: {threads_here('python_streaming_source_runner')}"
        )
        raise AssertionError(message) from None


def subscription_history(publisher) -> str:
    """What the publisher's XPUB reported, in order, since it started (nothing else reads it
    in these tests; call only once its sender stopped): + or - and the prefix's first bytes."""
    seen = []
    while publisher.socket.poll(0):
        message = publisher.socket.recv()
        sign = "+" if message[:1] == b"\x01" else "-"
        seen.append(sign + (message[1:5].hex() or "(all)"))
    return " ".join(seen) or "none"


#: what a failure publishes to see whether the publisher still sends to the restarted capture:
#: its XPUB's bytes sent grow by about PROBES x PROBE_BYTES if it does (``connections``),
#: whether or not capture then reads them (its zmq I/O thread takes them off TCP either way)
PROBES, PROBE_BYTES = 50, 65536


def connections(port: int) -> str:
    """The TCP connections to and from ``port`` in this namespace, with their queues (a
    receiver that stopped reading leaves bytes in Recv-Q), processes and bytes sent and
    received (``ss -i``)."""
    listed = subprocess.run(
        ["ss", "-tnpi", "state", "established", f"( sport = :{port} or dport = :{port} )"],
        capture_output=True,
        text=True,
    )
    lines = [line.strip() for line in listed.stdout.splitlines()[1:]]
    counted = [
        " ".join(word for word in line.split() if word.startswith(("bytes_sent", "bytes_rec")))
        if not line[:1].isdigit()  # the info line under its socket's line
        else line
        for line in lines
    ]
    return " | ".join(counted) or "none"


def probed(publisher, spool: Path) -> str:
    """``connections`` of ``publisher`` after it published PROBES large messages (its sender
    stopped: the socket is this thread's now), and the spool's partitions before and after (a
    capture that receives them writes them there within a flush)."""
    before = read_snapshot(str(spool))
    for _ in range(PROBES):
        publisher.publish(ECHO, b"p" * PROBE_BYTES)
    time.sleep(1.0)
    return f"{connections(publisher.port)}; the spool {before} then {read_snapshot(str(spool))}"


def placement(spool: Path, session: str):
    """Capture on the driver as a query's reader runs it (``make_placement``), for ``session``."""
    from spark_zmq.options import parse_options
    from spark_zmq.placement import make_placement
    from spark_zmq.protocols.zeroeq import ZeroEQ
    from spark_zmq.stream_options import READER_OPTIONS
    from spark_zmq.stream_settings import ReaderSettings

    protocol = ZeroEQ()
    raw = {"session": session, "discoveryInterfaces": "127.0.0.1", "spoolPath": str(spool)}
    options = parse_options("zeroeq", READER_OPTIONS + protocol.reader_options, raw)
    query = ReaderSettings.of(options, protocol.read_settings(options))
    return make_placement(protocol, query, str(spool))


def spooled(capture, key: str, publisher, at_least: int) -> int:
    """Publish until ``key`` holds ``at_least`` rows in the spool; its end then."""

    def enough():
        publisher.publish(ECHO, b"x")
        end = capture.snapshot().get(key)
        return end is not None and end.end >= at_least and end.end

    return wait_until(enough, timeout=30, interval=0.05, what=f"{at_least} rows of {key}")


def captured_once(spool: Path, session: str, key: str, publisher, at_least: int) -> int:
    """A run of capture on the driver of ``session`` into ``spool`` until ``key`` holds
    ``at_least`` rows, stopped then: the partition's end."""
    run = placement(spool, session)
    run.start()
    try:
        return spooled(run, key, publisher, at_least)
    finally:
        run.close()


def test_a_gap_owed_by_a_run_that_ended_before_its_endpoint_joined_is_owed_by_the_next(
    tmp_path, publishers
):
    """Run 1 captures a partition and stops; run 2 ends before its endpoint joins again (its
    discovery looks for another session); run 3 finds it: one gap row, from run 1's end to the
    first message run 3 received. failOnDataLoss=true fails on it, in every mode, naming the
    partition, the offset and the gap."""
    from spark_zmq.protocols.zeroeq import ZeroEQ
    from spark_zmq.spark.rows import SpoolRange
    from spark_zmq.spool.reader import read_range
    from support.fuzzing import read_outcome

    publisher = publishers("owed")
    key = publisher.instance_name
    spool = tmp_path / "spool"
    end = captured_once(spool, "owed", key, publisher, 3)
    stopped = time.time_ns() // 1_000_000
    second = placement(spool, "elsewhere")
    second.start()
    time.sleep(1.5)
    assert second.snapshot()[key].retired
    second.close()
    third = placement(spool, "owed")
    with logged_warnings() as warnings:
        third.start()
        try:
            end = spooled(third, key, publisher, end + 20)  # many flushes: one row, one line
        finally:
            third.close()
    assert len([w for w in warnings if "was not running" in w]) == 1, warnings
    rows = [
        fault
        for _, _, table in read_range(str(spool), key, 0, end)
        for fault in table.column("fault").to_pylist()
        if fault
    ]
    assert len(rows) == 1, rows
    match = GAP_SPAN.match(rows[0])
    assert match and "was not running" in rows[0], rows[0]
    since, until = ms(match.group(1)), ms(match.group(2))
    assert since <= stopped < until, (since, stopped, until)
    protocol = ZeroEQ()
    for mode in ("PERMISSIVE", "DROPMALFORMED", "FAILFAST"):
        part = SpoolRange(str(spool), key, 0, end)
        outcome = read_outcome(protocol, {"mode": mode, "failOnDataLoss": "true"}, part)
        assert outcome.error is not None, mode
        text = str(outcome.error)
        assert f"partition {key} at offset " in text and "was not running between" in text, text


def test_a_new_query_on_a_spool_an_earlier_run_left_gets_no_gap_row_for_before_it(
    tmp_path, publishers, spark
):
    """A new query (no checkpoint, startingOffsets=latest) on the spool an earlier run with the
    same options left, whose endpoint comes back under the same key (a fixed port; or the
    default spool folder found again): the earlier run's downtime came before this query, so it
    gets no gap row, only what was published to it."""
    from support.queries import rows_of
    from support.zeroeq import start_query as memory_zeroeq_query

    publisher = publishers("again")
    key = publisher.instance_name
    spool = tmp_path / "spool"
    captured_once(spool, "again", key, publisher, 3)
    wait_until(lambda: publisher.count_subscribers() == 0, what="the earlier run to disconnect")
    query = memory_zeroeq_query(spark, tmp_path, "again_new", session="again", spoolPath=str(spool))
    try:
        publisher.wait_for_subscribers(timeout=60)
        for n in range(3):
            publisher.publish(ECHO, b"%d" % n)
        wait_until(lambda: len(rows_of(spark, "again_new")) >= 3, what="3 rows")
        query.processAllAvailable()
        rows = sorted(rows_of(spark, "again_new"), key=lambda row: row.offset)
    finally:
        query.stop()
    assert [(r.partition, r.error, r.payload and bytes(r.payload)) for r in rows] == [
        (key, None, b"%d" % n) for n in range(3)
    ]


def test_a_new_query_skips_a_gap_row_of_an_earlier_run_already_written_and_owes_no_other(
    tmp_path, publishers
):
    """``latest`` for a new query: a downtime row capture wrote before Spark's first call is
    skipped (it sits at the partition's end when this run began), the messages after it are
    not; a downtime not yet written is owed no more."""
    from spark_zmq.spark.reader import ZmqStreamReader
    from spark_zmq.spool.reader import read_range

    written, pending = publishers("written"), publishers("pending")
    spool = tmp_path / "spool"
    captured_once(spool, "written", written.instance_name, written, 3)
    captured_once(tmp_path / "other", "pending", pending.instance_name, pending, 3)

    def faults(root: Path, key: str, start: int, end: int) -> list[str]:
        return [
            fault
            for _, _, table in read_range(str(root), key, start, end)
            for fault in table.column("fault").to_pylist()
            if fault
        ]

    # written: the gap row and messages after it are in the spool before the new query starts
    run = placement(spool, "written")
    run.start()
    try:
        began = run.ends_at_start[written.instance_name]
        end = spooled(run, written.instance_name, written, began + 5)
        assert len(faults(spool, written.instance_name, began, began + 1)) == 1
        latest = ZmqStreamReader._latest(run)
    finally:
        run.close()
    assert latest[written.instance_name] == began + 1
    assert faults(spool, written.instance_name, latest[written.instance_name], end) == []

    # pending: the query starts before the endpoint's first message: no row is written
    run = placement(tmp_path / "other", "pending")
    run.start()
    try:
        began = run.ends_at_start[pending.instance_name]
        assert ZmqStreamReader._latest(run)[pending.instance_name] == began
        end = spooled(run, pending.instance_name, pending, began + 5)
    finally:
        run.close()
    assert faults(tmp_path / "other", pending.instance_name, began, end) == []
