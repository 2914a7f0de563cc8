"""``spark-zmq capture``: a capture service fills a spool without a query, and queries with
``capture=service`` read it. Real ZeroEQ publishers and discovery, the service as a process of
its own, real Spark queries."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from spark_zmq.options import OptionError, parse_options
from spark_zmq.protocols.zeroeq import ZeroEQ
from spark_zmq.spark.reader import ZmqStreamReader
from spark_zmq.spool.layout import SpoolError
from spark_zmq.spool.reader import read_snapshot
from spark_zmq.spool.writer import Spool
from spark_zmq.stream_options import READER_OPTIONS
from spark_zmq.testing.logs import logged_warnings
from support.common import wait_until
from support.sequences import ECHO

CAPTURE = [sys.executable, "-m", "spark_zmq", "capture", "--format", "zeroeq"]


class Service:
    """``spark-zmq capture`` as a subprocess; its stdout lines collected as they come."""

    def __init__(self, spool, session: str, *options: str, every: float = 1.0) -> None:
        args = [*CAPTURE, "--spool", str(spool), "--progress-every", str(every)]
        for option in (f"session={session}", "discoveryInterfaces=127.0.0.1", *options):
            args += ["--option", option]
        self.stderr = open(spool.parent / f"{spool.name}.service.log", "w+")
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


def stream_reader(spool, capture: str) -> ZmqStreamReader:
    """The driver side of a zeroeq stream with these options, as a query makes it."""
    protocol = ZeroEQ()
    given = {
        "session": "nobody",
        "discoveryInterfaces": "127.0.0.1",
        "spoolPath": str(spool),
        "capture": capture,
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
    committed = json.loads((spool / "commits.json").read_text())[partition]
    lasted = time.monotonic() - started
    code, stderr = service.stop()
    payloads = sorted(bytes(r.payload) for r in spark.read.parquet(str(sink)).collect())
    assert payloads == sorted(b"n/%d" % i for i in range(150))
    assert code == 0, stderr
    # the runs' commits are in the spool's commits.json; the last line counts what is beyond
    assert f"stopping; spool: {150 - committed} messages not committed, " in service.lines[-2]
    assert service.lines[-1].endswith(f"capture service stopped; spool {spool} closed")
    progress = [line for line in service.lines if "partitions: 1 live, 0 retired; captured" in line]
    # one a second (--progress-every 1) while it ran, and the stopping line
    assert len(progress) >= int(lasted), (lasted, service.lines)
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
