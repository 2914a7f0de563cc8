"""``spark-zmq capture``: a capture service fills a spool without a query, and queries with
``capture=service`` read it. Real ZeroEQ publishers and discovery, the service as a process of
its own, real Spark queries."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest

from spark_zmq.options import OptionError, parse_options
from spark_zmq.protocols.zeroeq import ZeroEQ
from spark_zmq.spark.reader import ZmqStreamReader
from spark_zmq.spool.layout import SpoolError
from spark_zmq.spool.reader import read_snapshot
from spark_zmq.spool.writer import Spool
from spark_zmq.stream_options import READER_OPTIONS
from spark_zmq.testing.logs import logged_warnings
from support.common import ROOT, wait_until
from support.metrics import probe, scrape
from support.sequences import ECHO, sink_rows

CAPTURE = [sys.executable, "-m", "spark_zmq", "capture", "--format", "zeroeq"]


class Service:
    """``spark-zmq capture`` as a subprocess; its stdout lines collected as they come."""

    def __init__(
        self, spool, session: str, *options: str, every: float = 1.0, flags=(), log=None
    ) -> None:
        """``options``: reader options (``--option``); ``flags``: the command's own; ``log``:
        where its stderr goes (beside the spool unless given)."""
        args = [*CAPTURE, "--spool", str(spool), "--progress-every", str(every), *flags]
        for option in (f"session={session}", "discoveryInterfaces=127.0.0.1", *options):
            args += ["--option", option]
        self.stderr = open(log or spool.parent / f"{spool.name}.service.log", "w+")
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._collect, daemon=True)
        self._reader.start()

    def _collect(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_started(self) -> str:
        return wait_until(
            lambda: (
                next((line for line in self.lines if "fills spool" in line), None) or self._exited()
            ),
            timeout=30,
            what="the capture service's start line",
        )

    def _exited(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"the service exited: {self.logged()}")

    def logged(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()

    def stop(self) -> tuple[int, str]:
        """SIGTERM; (exit code, stderr)."""
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        self._reader.join(5)
        return self.process.returncode, self.logged()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self.stderr.close()


@pytest.fixture
def services():
    started: list[Service] = []

    def start(*args, **kwargs) -> Service:
        service = Service(*args, **kwargs)
        started.append(service)
        return service

    yield start
    for service in started:
        service.kill()


def spooled(spool) -> int:
    return sum(state.end for state in read_snapshot(str(spool)).values())


def stream_reader(spool, capture: str, **options: str) -> ZmqStreamReader:
    """The driver side of a zeroeq stream with these options, as a query makes it."""
    protocol = ZeroEQ()
    given = {
        "session": "nobody",
        "discoveryInterfaces": "127.0.0.1",
        "spoolPath": str(spool),
        "capture": capture,
        **options,
    }
    options = parse_options("zeroeq", READER_OPTIONS + protocol.reader_options, given)
    return ZmqStreamReader(protocol, options)


@pytest.mark.spark
def test_available_now_runs_deliver_what_the_service_captured_exactly_once(
    spark, tmp_path, publishers, services
):
    """Publish before, during and between two scheduled runs: each message lands once."""
    publisher = publishers("scheduled")
    spool, sink, checkpoint = tmp_path / "spool", tmp_path / "sink", tmp_path / "checkpoint"
    service = services(spool, "scheduled")
    service.wait_started()
    started = time.monotonic()
    publisher.wait_for_subscribers(timeout=30)

    def publish(numbers) -> None:
        for i in numbers:
            publisher.publish(ECHO, b"n/%d" % i)

    def run():
        query = (
            spark.readStream.format("zeroeq")
            .option("session", "scheduled")
            .option("spoolPath", str(spool))
            .option("capture", "service")
            .option("maxRecordsPerTrigger", "40")
            .load()
            .writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        return query

    publish(range(0, 50))
    wait_until(lambda: spooled(spool) == 50, what="50 messages in the service's spool")
    first = run()
    publish(range(50, 100))  # while the first run reads: in it or in the next, not both
    assert first.awaitTermination(60), "an availableNow run must end by itself"
    assert first.exception() is None
    publish(range(100, 150))  # no query runs: the service captures
    wait_until(lambda: spooled(spool) == 150, what="150 messages in the service's spool")
    second = run()
    assert second.awaitTermination(60), "an availableNow run must end by itself"
    assert second.exception() is None
    # the service applied what the runs committed (the first run's batches, at least); it
    # keeps that data for spoolRetention, so batch reads see it
    wait_until(
        lambda: min(s.committed for s in read_snapshot(str(spool)).values()) >= 50,
        timeout=10,
        what="the service to apply the runs' commits",
    )
    (partition,) = read_snapshot(str(spool))
    reader = json.loads((spool / "@readers" / "default.json").read_text())
    committed = reader["committed"][partition]
    lasted = time.monotonic() - started
    code, stderr = service.stop()
    payloads = sorted(bytes(r.payload) for r in spark.read.parquet(str(sink)).collect())
    assert payloads == sorted(b"n/%d" % i for i in range(150))
    assert code == 0, stderr
    # the runs' commits are in the document of reader name "default"; the last line counts
    # what is beyond, and how far behind the slowest (the only) reader is
    stopping = service.lines[-2]
    assert f"stopping; spool: {150 - committed} messages not committed by every reader, " in (
        stopping
    )
    assert stopping.endswith(f"; readers: 1, slowest 'default' {150 - committed} messages behind")
    assert service.lines[-1].endswith(f"capture service stopped; spool {spool} closed")
    progress = [line for line in service.lines if "partitions: 1 live, 0 retired; captured" in line]
    # one a second (--progress-every 1) while it ran, and the stopping line; a line waits
    # for capture's flush, which a loaded machine delays (9 lines in 10.2 s in one CI run)
    assert len(progress) >= int(lasted) // 2, (lasted, service.lines)
    # the lines count every message captured once: between them, all that was published
    assert sum(int(re.search(r"captured (\d+) messages", line)[1]) for line in progress) == 150


def test_a_query_names_the_service_whose_spool_it_reads_in_its_first_line(
    tmp_path, services, caplog
):
    spool = tmp_path / "spool"
    service = services(spool, "first-line")
    service.wait_started()
    reader = stream_reader(spool, "service")
    try:
        with caplog.at_level(logging.INFO, logger="spark_zmq"), logged_warnings() as warnings:
            reader.initialOffset()
            reader.latestOffset(reader.initialOffset(), None)
    finally:
        reader.stop()
        service.stop()
    first = caplog.records[0].getMessage()
    assert f"reading spool {spool}, filled by a capture service" in first
    assert f"process {service.process.pid} on host " in first and "since 20" in first
    assert warnings == []


def test_a_query_on_a_spool_nothing_fills_reads_it_and_warns_once(tmp_path):
    missing = stream_reader(tmp_path / "spool", "service")
    with pytest.raises(SpoolError, match=r"spool \S+ \(option spoolPath\) does not exist on host"):
        missing.initialOffset()  # not on the driver's host: nothing to read, nor to warn of
    missing.stop()
    Spool(str(tmp_path / "spool"), 1 << 20).close()  # a spool whose service has stopped
    reader = stream_reader(tmp_path / "spool", "service")
    try:
        with logged_warnings() as warnings:
            reader.latestOffset(reader.initialOffset(), None)
            reader.latestOffset(reader.initialOffset(), None)
    finally:
        reader.stop()
    assert len(warnings) == 1, warnings
    assert f"no capture service holds spool {tmp_path / 'spool'}" in warnings[0]
    assert "spark-zmq capture --format zeroeq" in warnings[0]


def test_capture_on_the_driver_of_a_service_spool_fails_saying_to_read_it(tmp_path, services):
    spool = tmp_path / "spool"
    service = services(spool, "taken")
    service.wait_started()
    reader = stream_reader(spool, "driver")
    started = time.monotonic()
    try:
        with pytest.raises(SpoolError) as failure:
            reader.initialOffset()
        took = time.monotonic() - started  # the call alone: stopping the service is not timed
    finally:
        reader.stop()
        code, _ = service.stop()
    assert took < 2, f"a service is not waited for: the call took {took:.2f} s"
    message = str(failure.value)
    assert f"spool folder {spool} is filled by a capture service" in message
    assert f"process {service.process.pid}" in message and "capture=service" in message
    assert code == 0


def test_a_service_cannot_take_a_spool_a_query_captures_into(tmp_path):
    spool = tmp_path / "spool"
    reader = stream_reader(spool, "driver")
    try:
        reader.initialOffset()
        result = subprocess.run(
            [*CAPTURE, "--spool", str(spool), "--option", "session=x"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        reader.stop()
    assert result.returncode == 1
    assert f"spool folder {spool} is in use by another running query" in result.stderr
    assert f"process {os.getpid()}" in result.stderr


@pytest.mark.parametrize("option", ["maxMessageBytes=lots", "sesion=typo", "capture=executors"])
def test_a_bad_option_fails_the_service_with_the_options_error(tmp_path, option):
    result = subprocess.run(
        [*CAPTURE, "--spool", str(tmp_path / "spool"), "--option", option],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    key, _, value = option.partition("=")
    if key == "capture":
        assert "option 'capture' is not for spark-zmq capture" in result.stderr
    else:
        with pytest.raises(OptionError) as expected:
            parse_options("zeroeq", READER_OPTIONS + ZeroEQ().reader_options, {key: value})
        assert result.stderr.strip() == f"spark-zmq capture: {expected.value}"
    assert not (tmp_path / "spool").exists(), "nothing is created before the options are good"


def test_a_spool_on_an_object_store_fails_the_service_naming_the_reason(tmp_path):
    """--spool is checked as option spoolPath: s3a://... is not taken as a local folder."""
    result = subprocess.run(
        [*CAPTURE, "--spool", "s3a://bucket/spool"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "option 'spoolPath' must be a folder path on a POSIX file system" in result.stderr
    assert "s3a:// is not a POSIX file system" in result.stderr


# -- several queries on one service spool (option spoolReader) --------------------------------


def service_stream(spark, spool, session: str, name: str, sink, **trigger):
    """A stream of the service's spool under reader name ``name`` into Parquet at ``sink``
    (its checkpoint beside it); ``trigger``: a micro-batch a second unless given."""
    return (
        spark.readStream.format("zeroeq")
        .option("session", session)
        .option("spoolPath", str(spool))
        .option("capture", "service")
        .option("spoolReader", name)
        .load()
        .writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", f"{sink}.checkpoint")
        .trigger(**(trigger or {"processingTime": "1 second"}))
        .start()
    )


def run_once(spark, spool, session: str, name: str, sink) -> list:
    """A ``Trigger.AvailableNow`` run of ``service_stream``; the rows of its sink after it."""
    query = service_stream(spark, spool, session, name, sink, availableNow=True)
    assert query.awaitTermination(60) and query.exception() is None
    return sink_rows(spark, sink)


def numbers_in(spark, sink) -> list[int]:
    """The numbers the rows of a sink carry (b"n/<number>"), in no order; gap rows fail."""
    rows = sink_rows(spark, sink)
    assert [row.error for row in rows if row.error is not None] == []
    return [int(bytes(row.payload).split(b"/")[1]) for row in rows]


@pytest.mark.spark
def test_two_streams_and_a_batch_read_of_one_service_spool_each_get_every_message_once(
    spark, tmp_path, publishers, services
):
    """Reader names "archive" and "dashboard" on one service spool whose spoolRetention is 0 (what
    both committed is deleted at once). The dashboard stops while 100 messages are published and
    the archive reads them; the spool keeps them for the dashboard, a batch read sees them, and
    the dashboard reads them when it resumes. Each sink holds every message once."""
    spool = tmp_path / "spool"
    service, publisher = service_and_publisher(
        publishers, services, spool, "readers", "spoolRetention=0"
    )

    def publish(numbers) -> None:
        for i in numbers:
            publisher.publish(ECHO, b"n/%d" % i)

    def has(sink, count: int):
        return lambda: len(numbers_in(spark, sink)) >= count

    archive_sink, dashboard_sink = tmp_path / "archive", tmp_path / "dashboard"
    archive = service_stream(spark, spool, "readers", "archive", archive_sink)
    dashboard = service_stream(spark, spool, "readers", "dashboard", dashboard_sink)
    try:
        publish(range(100))
        wait_until(has(archive_sink, 100), what="the archive to read 100 messages")
        wait_until(has(dashboard_sink, 100), what="the dashboard to read 100 messages")
        dashboard.stop()
        publish(range(100, 200))
        wait_until(has(archive_sink, 200), what="the archive to read 200 messages")
        time.sleep(3)  # the service polls the readers' commits every second
        (held,) = read_snapshot(str(spool)).values()
        assert held.start <= 100, f"the spool let go of what the dashboard did not read: {held}"
        batch = spark.read.format("zeroeq").option("spoolPath", str(spool)).load()
        replayed = {bytes(row.payload) for row in batch.where("error IS NULL").collect()}
        assert {b"n/%d" % i for i in range(100, 200)} <= replayed
        # Spark commits a micro-batch to its source when it plans the next one: the
        # dashboard's last batch stays uncommitted while it is stopped
        listing = readers_listing(spool)
        assert "'archive': running, last seen " in listing
        behind = re.search(
            r"'dashboard': stopped, last seen .* ago, (\d+) messages behind", listing
        )
        assert behind and int(behind[1]) >= 100, listing
        dashboard = service_stream(spark, spool, "readers", "dashboard", dashboard_sink)
        wait_until(has(dashboard_sink, 200), what="the resumed dashboard to read 200 messages")
        publish([200])  # a batch more each: the one that read up to 200 is committed
        wait_until(has(archive_sink, 201), what="the archive to read message 200")
        wait_until(has(dashboard_sink, 201), what="the dashboard to read message 200")
        wait_until(
            lambda: read_snapshot(str(spool))[held_key(spool)].start >= 200,
            timeout=15,
            what="the service to let go of what both names committed",
        )
    finally:
        archive.stop()
        dashboard.stop()
    assert sorted(numbers_in(spark, archive_sink)) == list(range(201))
    assert sorted(numbers_in(spark, dashboard_sink)) == list(range(201))
    listing = readers_listing(spool)
    for name in ("archive", "dashboard"):
        assert re.search(rf"'{name}': stopped, last seen .* ago, [01] messages behind", listing)
    assert any("; readers: 2, slowest " in line for line in service.lines), service.lines


def service_and_publisher(publishers, services, spool, session: str, *options: str, flags=()):
    """A capture service of ``session`` with ``options`` (and its own ``flags``), started, and
    a publisher of that session it has subscribed to."""
    publisher = publishers(session)
    service = services(spool, session, *options, flags=flags)
    service.wait_started()
    publisher.wait_for_subscribers(timeout=30)
    return service, publisher


def held_key(spool) -> str:
    (key,) = read_snapshot(str(spool))
    return key


def readers_listing(spool) -> str:
    """What ``spark-zmq readers --spool`` prints."""
    result = subprocess.run(
        [sys.executable, "-m", "spark_zmq", "readers", "--spool", str(spool)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_second_query_under_a_running_querys_reader_name_is_refused(tmp_path, services):
    spool = tmp_path / "spool"
    service = services(spool, "names")
    service.wait_started()
    first = stream_reader(spool, "service")
    second = stream_reader(spool, "service")
    third = stream_reader(spool, "service", spoolReader="other")
    try:
        first.initialOffset()
        with pytest.raises(SpoolError) as refused:
            second.initialOffset()
        third.initialOffset()  # another name reads beside it
        first.stop()
        second.stop()
        again = stream_reader(spool, "service")
        again.initialOffset()  # the name is free once its query stopped
        again.stop()
    finally:
        for reader in (first, second, third):
            reader.stop()
        service.stop()
    message = str(refused.value)
    assert f"spool {spool} is read under reader name 'default' by a running query" in message
    assert f"in process {os.getpid()} on host " in message
    assert "option spoolReader" in message


def test_spool_reader_is_an_option_of_capture_service_only(tmp_path):
    with pytest.raises(OptionError, match="option spoolReader names a query reading a capture"):
        stream_reader(tmp_path / "spool", "driver", spoolReader="archive")


@pytest.mark.spark
def test_a_reader_name_silent_over_its_timeout_stops_holding_data(
    spark, tmp_path, publishers, services
):
    """spoolReaderTimeout=30: "gone" reads once and never again, "live" reads on. While "gone"
    holds, the spool keeps all (it committed nothing: Spark commits a batch to its source when
    it plans the next); 30 s after it was last seen the service logs that it holds nothing and
    lets go of what "live" committed (spoolRetention=0 deletes it). When "gone" does come back,
    it gets a gap row for what was deleted, then what followed. The hold is checked after two
    queries of "live" (about 10 s in a loaded run), well within the timeout."""
    spool = tmp_path / "spool"
    service, publisher = service_and_publisher(
        publishers, services, spool, "timeout", "spoolRetention=0", "spoolReaderTimeout=30"
    )

    def run(name: str) -> None:
        run_once(spark, spool, "timeout", name, tmp_path / name)

    def publish(numbers) -> None:
        for i in numbers:
            publisher.publish(ECHO, b"n/%d" % i)
        wait_until(lambda: spooled(spool) == numbers[-1] + 1, what="the messages in the spool")

    def start() -> int:
        return read_snapshot(str(spool))[held_key(spool)].start

    publish(range(50))
    run("gone")
    gone_at = time.monotonic()
    run("live")
    publish(range(50, 80))
    run("live")  # reads 50..80, commits 0..50
    time.sleep(2)  # the service applies commits within a second
    assert time.monotonic() - gone_at < 30, "the test ran too slowly to see the hold"
    assert start() == 0, "a reader name within its timeout holds everything it did not commit"
    publish([80])
    run("live")  # reads 80, commits 50..80
    wait_until(
        lambda: start() == 80,
        timeout=60,
        what="the service to let go of what only the silent reader had not read",
    )
    run("gone")
    code, logged = service.stop()
    assert code == 0
    assert "reader 'gone' was last seen " in logged and "over spoolReaderTimeout (30 s)" in logged
    rows = sink_rows(spark, tmp_path / "gone")
    gaps = [row.error for row in rows if row.error is not None]
    assert len(gaps) == 1 and "gap: 30 messages at offsets [50, 80)" in gaps[0], gaps
    numbers = [int(bytes(r.payload).split(b"/")[1]) for r in rows if r.error is None]
    assert sorted(numbers) == [*range(50), 80]


@pytest.mark.spark
def test_a_service_spool_at_its_bound_gives_the_slow_reader_gap_rows_never_the_fast_one(
    spark, tmp_path, publishers, services
):
    """maxSpoolBytes=1m and messages of about 2 KB. "slow" reads 100 messages and stops;
    "fast" reads 301 and commits 300; 301 more take the spool over its bound. Nothing that
    every name committed is left, so what only "fast" committed goes, oldest first, and no
    message is dropped: "fast" reads on without a gap, "slow" gets a gap row for what went."""
    spool = tmp_path / "spool"
    service, publisher = service_and_publisher(
        publishers, services, spool, "bound", "maxSpoolBytes=1m", flags=["--metrics-port", "0"]
    )
    lag = ("spark_zmq_reader_lag_messages", (("format", "zeroeq"), ("reader", "fast")))

    def publish(numbers) -> None:
        for i in numbers:  # random, as text: about 2 KB each in the spool's compressed files
            publisher.publish(ECHO, b"n/%d/" % i + os.urandom(1000).hex().encode())
        wait_until(lambda: spooled(spool) == numbers[-1] + 1, what="the messages in the spool")

    def run(name: str) -> list:
        return run_once(spark, spool, "bound", name, tmp_path / name)

    publish(range(100))
    run("slow")
    publish(range(100, 300))
    run("fast")
    publish([300])
    run("fast")  # reads 300, commits 0..300
    wait_until(  # the service reads the names' commits about every second
        lambda: scrape(metrics_url(service)).get(lag) == 1,
        what="the service to apply fast's commit (its lag 1 in the metrics)",
    )
    publish(range(301, 601))  # over the bound (a flush is written whole) ...
    publish([601])  # ... so the next one makes room first
    start = read_snapshot(str(spool))[held_key(spool)].start
    assert 100 < start <= 300, f"what only fast committed made room: the spool starts at {start}"
    fast, slow = run("fast"), run("slow")
    code, logged = service.stop()
    assert code == 0
    assert "with nothing left that every reader name committed" in logged
    assert [row.error for row in fast if row.error is not None] == []
    assert sorted(int(bytes(r.payload).split(b"/")[1]) for r in fast) == list(range(602))
    gaps = [row.error for row in slow if row.error is not None]
    assert len(gaps) == 1 and f"messages at offsets [100, {start})" in gaps[0], gaps
    numbers = sorted(int(bytes(r.payload).split(b"/")[1]) for r in slow if r.error is None)
    assert numbers == [*range(100), *range(start, 602)]


# -- metrics and health probes (--metrics-port) -----------------------------------------------


def metrics_url(service: Service) -> str:
    return re.search(r"metrics and probes at (http://\S+)", service.wait_started())[1]


def test_the_metrics_count_what_a_capture_service_received_and_the_gaps_it_wrote(
    tmp_path, publishers, services
):
    """30 messages, then a frame over maxMessageBytes, on which zmq drops the connection
    (capture reconnects: a gap row). A scrape, parsed by prometheus_client, counts the 30
    received from the endpoint and their bytes, 1 gap row for a dropped connection, one live
    endpoint that joined once, flushes, and what the spool holds; both probes pass."""
    publisher = publishers("metrics")
    spool = tmp_path / "spool"
    service = services(spool, "metrics", "maxMessageBytes=1k", flags=["--metrics-port", "0"])
    url = metrics_url(service)
    publisher.wait_for_subscribers(timeout=30)
    for i in range(30):
        publisher.publish(ECHO, b"n/%d" % i)
    publisher.publish(ECHO, b"x" * 2000)
    wait_until(lambda: spooled(spool) == 31, what="30 messages and a gap row in the spool")
    key = held_key(spool)
    fmt = ("format", "zeroeq")
    sent = sum(16 + len(b"n/%d" % i) for i in range(30))  # an event's 16 bytes, its payload
    written = ("spark_zmq_received_bytes_total", (("endpoint", key), fmt))
    wait_until(  # counted once the flush's file is in the spool: a moment after it shows
        lambda: scrape(url).get(written) == sent, what=f"{sent} bytes written in the metrics"
    )
    samples = scrape(url)
    assert samples[("spark_zmq_messages_received_total", (("endpoint", key), fmt))] == 30
    assert samples[("spark_zmq_gap_rows_total", (("cause", "connection_dropped"), fmt))] == 1
    assert samples[("spark_zmq_gap_rows_total", (("cause", "over_bounds"), fmt))] == 0
    assert samples[("spark_zmq_endpoints", (fmt, ("state", "live")))] == 1
    assert samples[("spark_zmq_spool_uncommitted_messages", (fmt,))] == 31
    age = samples[("spark_zmq_last_message_age_seconds", (("endpoint", key), fmt))]
    assert 0 <= age < 30
    assert samples[("spark_zmq_discovery_events_total", (("event", "joined"), fmt))] == 1
    assert samples[("spark_zmq_discovery_events_total", (("event", "left"), fmt))] == 0
    assert ("spark_zmq_discovery_events_total", (("event", "changed"), fmt)) in samples
    spool_bytes = samples[("spark_zmq_spool_bytes", (fmt,))]
    assert 0 < spool_bytes <= samples[("spark_zmq_spool_written_bytes_total", (fmt,))]
    assert samples[("spark_zmq_spool_segments", (fmt,))] >= 1
    flushes = samples[("spark_zmq_flush_duration_seconds_count", (fmt,))]
    assert flushes >= 1
    assert flushes == samples[("spark_zmq_flush_duration_seconds_bucket", (fmt, ("le", "+Inf")))]
    assert samples[("spark_zmq_capture_cpu_seconds_total", (fmt,))] >= 0
    assert samples[("process_cpu_seconds_total", ())] > 0  # the service's process, all of it
    assert probe(url, "/healthz") == (200, "ok: zeroeq: capture and discovery run\n")
    assert probe(url, "/readyz") == (200, "ok: capture runs, spool writable, 1 endpoints read\n")
    assert probe(url, "/nothing")[0] == 404
    code, _ = service.stop()
    assert code == 0


def test_the_readiness_probe_fails_while_the_spools_storage_is_full(tmp_path, services):
    """A spool on a 1 MiB tmpfs (the tests run in a mount namespace of their own): /readyz
    passes, fails once a file fills the storage (saying why), and passes again once it is
    removed. /healthz passes throughout: capture runs."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        service = services(
            disk / "spool",
            "nobody",
            "onSpoolWriteError=drop",
            flags=["--metrics-port", "0", "--ready-endpoint-timeout", "0"],
            log=tmp_path / "service.log",
        )
        url = metrics_url(service)
        assert probe(url, "/readyz")[0] == 200
        filler = disk / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
        status, text = probe(url, "/readyz")
        assert status == 503, text
        assert f"not ok: spool {disk / 'spool'} cannot be written: " in text
        assert "No space left on device" in text
        assert probe(url, "/healthz")[0] == 200
        filler.unlink()
        assert probe(url, "/readyz")[0] == 200
        code, _ = service.stop()
        assert code == 0
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_debians_prometheus_server_scrapes_what_the_service_received(
    tmp_path, publishers, services
):
    """An independent scraper: Debian's Prometheus server (scripts/setup.sh installs it)
    scrapes the service every second; its query API then gives the 20 messages sent and the
    target up, and every query of the Grafana dashboard in the docs gives a series."""
    if shutil.which("prometheus") is None:
        raise RuntimeError("this test needs Debian's prometheus: run scripts/setup.sh as root")
    publisher = publishers("scraped")
    service = services(tmp_path / "spool", "scraped", flags=["--metrics-port", "0"])
    target = metrics_url(service).removeprefix("http://")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: spark_zmq\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        api = f"127.0.0.1:{probe_socket.getsockname()[1]}"
    server = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}"]
        + [f"--web.listen-address={api}"],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "prometheus.log", "w"),
    )

    def results(expression: str) -> list:
        url = f"http://{api}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.load(answer)["data"]["result"]

    def query(expression: str) -> float | None:
        try:
            result = results(expression)
        except OSError:  # not listening yet
            return None
        return float(result[0]["value"][1]) if result else None

    try:
        publisher.wait_for_subscribers(timeout=30)
        for i in range(20):
            publisher.publish(ECHO, b"n/%d" % i)
        wait_until(
            lambda: query('sum(spark_zmq_messages_received_total{format="zeroeq"})') == 20,
            timeout=60,
            what="Prometheus to scrape 20 messages received",
        )
        assert query('up{job="spark_zmq"}') == 1
        assert query('sum(spark_zmq_gap_rows_total{job="spark_zmq"})') == 0
        dashboard = json.loads((ROOT / "docs" / "assets" / "grafana-dashboard.json").read_text())
        for panel in dashboard["panels"]:
            (target,) = panel["targets"]
            if "reader_lag" not in target["expr"]:  # no reader name holds data here
                expr = target["expr"]
                wait_until(
                    lambda expr=expr: results(expr),  # rate() needs two scrapes in its range
                    timeout=30,
                    what=f"a series of panel {panel['title']!r}: {expr}",
                )
    finally:
        server.terminate()
        server.wait(30)
    code, _ = service.stop()
    assert code == 0
