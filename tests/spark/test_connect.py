"""Spark Connect, the client mode of Spark 4 and of managed platforms: a Connect server started
from the pip pyspark (``sbin/start-connect-server.sh``) with the package in its
``PYSPARK_PYTHON``, and client processes that only talk gRPC to it (and cannot import
spark_zmq): one streams ``format("zeroeq")`` into a memory table and reads it back, one streams
rows out through ``writeStream.format("zeroeq")`` to a subscriber of this process."""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from spark_zmq.protocols.zeroeq import event_id
from spark_zmq.testing.standalone import LOOPBACK, SPARK_HOME, free_port
from support.common import wait_until
from support.sequences import ECHO
from support.zeroeq import WireSubscriber

pytestmark = pytest.mark.spark

#: the start of every client: it cannot import spark_zmq, and its session is a Connect one
CONNECT = textwrap.dedent(
    """
    import importlib.abc, os, sys, time

    class NoSparkZmq(importlib.abc.MetaPathFinder):  # the client needs no spark_zmq
        def find_spec(self, name, path, target=None):
            if name.startswith(("spark_zmq", "pyspark_zeroeq")):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    sys.meta_path.insert(0, NoSparkZmq())
    from pyspark.sql import SparkSession, functions

    spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    """
)

READER = CONNECT + textwrap.dedent(
    """
    session, spool, wanted = sys.argv[2], sys.argv[3], int(sys.argv[4])
    query = (
        spark.readStream.format("zeroeq").option("session", session)
        .option("discoveryInterfaces", "127.0.0.1").option("spoolPath", spool).load()
        .writeStream.format("memory").queryName("connect_events")
        .trigger(processingTime="1 second").start()
    )
    deadline, rows = time.time() + 180, []
    while time.time() < deadline:
        rows = spark.sql("select payload from connect_events where error is null").collect()
        if len(rows) >= wanted:
            break
        time.sleep(1)
    query.stop()
    print("payloads", ",".join(bytes(r.payload).decode() for r in rows))
    """
)

#: numbers from the rate source, published as ZeroEQ events (one publisher: a task) until the
#: file argv[4] exists
WRITER = CONNECT + textwrap.dedent(
    """
    session, checkpoint, stop_file = sys.argv[2], sys.argv[3], sys.argv[4]
    query = (
        spark.readStream.format("rate").option("rowsPerSecond", "20")
        .option("numPartitions", "1").load()  # one task, one publisher
        .select(functions.lit(ECHO).alias("event"),
                functions.col("value").cast("string").alias("payload"))
        .writeStream.format("zeroeq").option("session", session)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="500 milliseconds").start()
    )
    deadline = time.time() + 240
    while not os.path.exists(stop_file) and time.time() < deadline and query.isActive:
        time.sleep(0.5)
    error = query.exception()
    query.stop()
    print("stopped", "with error:" if error else "cleanly", error or "")
    """
)


#: what the Connect server logs once it listens, and when it could not bind its port
STARTED, NOT_STARTED = "Spark Connect server started at", "Error starting Spark Connect server"
#: servers started, each on another free port, before the fixture gives up
SERVER_TRIES = 3


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("connect")
    server, port = start_connect_server(folder)
    try:
        yield f"sc://{LOOPBACK}:{port}"
    finally:
        stop(server)


def start_connect_server(folder) -> tuple[subprocess.Popen, int]:
    """A Connect server (local[2]) on a free port, and the port. ``free_port``'s port can be
    taken by another process before the server binds it; the server then logs NOT_STARTED and
    runs on, while the port answers for whoever took it: a client would wait for good. So the
    fixture waits for STARTED, and starts another server on another port after NOT_STARTED."""
    env = dict(
        os.environ,
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP=LOOPBACK,
        PYSPARK_PYTHON=sys.executable,  # where the server starts the formats' Python
        SPARK_LOG_DIR=str(folder),
        SPARK_PID_DIR=str(folder),
    )
    for attempt in range(1, SERVER_TRIES + 1):
        port = free_port()
        settings = {
            "spark.connect.grpc.binding.address": LOOPBACK,
            "spark.connect.grpc.binding.port": str(port),
            "spark.driver.host": LOOPBACK,
            "spark.ui.enabled": "false",
        }
        path = folder / f"server-{attempt}.log"
        with open(path, "wb") as log:
            server = subprocess.Popen(
                [str(SPARK_HOME / "sbin" / "start-connect-server.sh"), "--wait"]
                + ["--master", "local[2]"]
                + [arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        outcome = functools.partial(server_outcome, server, path, port)
        if wait_until(outcome, timeout=180, interval=0.5, what="the Connect server") == STARTED:
            return server, port
        stop(server)
    raise AssertionError(f"no Connect server could bind a port in {SERVER_TRIES} tries: {folder}")


def server_outcome(server: subprocess.Popen, log: Path, port: int) -> str | None:
    """STARTED once the server listens on ``port``, NOT_STARTED if it could not bind it, None
    while it starts; AssertionError if it ended."""
    text = log.read_text(errors="replace")
    if server.poll() is not None:
        raise AssertionError(f"the Connect server ended: {text}")
    if NOT_STARTED in text:
        return NOT_STARTED
    return STARTED if STARTED in text and listening(port) else None


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((LOOPBACK, port)) == 0


def stop(server: subprocess.Popen) -> None:
    os.killpg(server.pid, signal.SIGKILL)
    server.wait()


def test_a_connect_client_streams_zeroeq_events(connect_server, publishers, tmp_path):
    session, wanted = "connect", 20
    publisher = publishers(session)
    stop = threading.Event()

    def publish() -> None:
        sequence = 0
        while not stop.wait(0.05):
            publisher.publish(ECHO, b"%d" % sequence)
            sequence += 1

    sender = threading.Thread(target=publish, daemon=True)
    sender.start()
    try:
        client = subprocess.run(
            [sys.executable, "-c", READER, connect_server, session, str(tmp_path / "spool")]
            + [str(wanted)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        stop.set()
        sender.join()
    assert client.returncode == 0, client.stderr[-3000:]
    (line,) = [line for line in client.stdout.splitlines() if line.startswith("payloads ")]
    numbers = [int(text) for text in line.split(" ", 1)[1].split(",") if text]
    assert len(numbers) >= wanted, line
    assert sorted(numbers) == list(range(min(numbers), max(numbers) + 1)), "holes or duplicates"


def test_a_connect_client_publishes_zeroeq_events(connect_server, zeroconf, tmp_path):
    session, wanted, stop_file = "connect-writer", 30, tmp_path / "stop"
    client = subprocess.Popen(
        [sys.executable, "-c", f"ECHO = {ECHO!r}" + WRITER, connect_server, session]
        + [str(tmp_path / "checkpoint"), str(stop_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    subscriber = WireSubscriber(zeroconf, session, [ECHO])
    try:
        received = subscriber.receive(wanted, timeout=240)
    finally:
        subscriber.close()
        stop_file.touch()
        out, err = client.communicate(timeout=120)
    assert client.returncode == 0 and "stopped cleanly" in out, (out, err[-3000:])
    assert len(received) >= wanted, f"{len(received)} events; the client said {out}"
    assert {frames[0] for frames in received} == {event_id(ECHO)}
    numbers = [int(frames[1]) for frames in received]
    # a subscriber that connects late misses the first rows (pub/sub keeps nothing), and then
    # gets every row in order
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), numbers
