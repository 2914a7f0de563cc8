"""Shared fixtures: the hermetic-network guard, one Spark session, ZeroEQ publishers."""

from __future__ import annotations

import os
import socket
import sys
import time

import pytest

ALLOWED_INTERFACES = ("lo",)


def pytest_sessionstart(session):
    """Refuse to run anywhere but in a private network namespace: discovery multicasts on every
    interface it finds. scripts/test.sh (the README's test command) sets the namespace up."""
    interfaces = sorted(name for _, name in socket.if_nameindex())
    foreign = [name for name in interfaces
               if name not in ALLOWED_INTERFACES and not name.startswith("szmq")]
    if foreign:
        pytest.exit(f"refusing to run: network interfaces {foreign} are visible. Run the tests "
                    f"with scripts/test.sh, which runs them in a private network namespace.",
                    returncode=3)


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]")
               .appName("spark_zmq tests")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture
def zeroconf():
    from spark_zmq.protocols.zeroeq import make_zeroconf

    instance = make_zeroconf(("127.0.0.1",))
    yield instance
    instance.close()


@pytest.fixture
def publishers(zeroconf):
    """Factory of ZeroEQ publishers on loopback, closed after the test."""
    from spark_zmq.protocols.zeroeq import Publisher

    made = []

    def make(session, **kwargs):
        publisher = Publisher(session, zeroconf=zeroconf, **kwargs)
        made.append(publisher)
        return publisher

    yield make
    for publisher in made:
        publisher.close()


def wait_until(predicate, timeout=60.0, interval=0.2, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
