"""Shared fixtures: the hermetic-network guard, one Spark session, ZeroEQ publishers."""

from __future__ import annotations

import socket

import pytest

ALLOWED_INTERFACES = ("lo",)


def pytest_sessionstart(session):
    """Refuse to run anywhere but in a private network namespace: discovery multicasts on every
    interface it finds. scripts/test.sh (the README's test command) sets the namespace up."""
    interfaces = sorted(name for _, name in socket.if_nameindex())
    foreign = [
        name
        for name in interfaces
        if name not in ALLOWED_INTERFACES and not name.startswith("szmq")
    ]
    if foreign:
        pytest.exit(
            f"refusing to run: network interfaces {foreign} are visible. Run the tests "
            f"with scripts/test.sh, which runs them in a private network namespace.",
            returncode=3,
        )


def pytest_collection_modifyitems(session, config, items):
    """Tests marked ``last`` run after all others, in their order: the docs site's build renders
    the notebooks that tests/jobs/test_notebooks.py executed in this run."""
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)


@pytest.fixture(scope="session")
def spark():
    from spark_zmq.spark.session import loopback_session

    session = loopback_session("spark_zmq tests", {"spark.sql.session.timeZone": "UTC"})
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


@pytest.fixture
def contained(tmp_path):
    """For a test with a hostile peer: nothing is created beside the test's own folder (a
    partition folder named by a peer stays inside the spool), and no process (the JVM, the
    Python workers, capture processes, the peers) grows by its kind's bound while the test runs
    (``support.memory.HOSTILE_BOUNDS``; sampled every 0.1 s; a process started meanwhile, from
    nothing)."""
    import os

    from support.memory import HOSTILE_BOUNDS, PeakMemory

    before = set(os.listdir(tmp_path.parent))
    with PeakMemory(interval=0.1) as memory:
        yield memory
    print(f"peak memory of {tmp_path.name}: {memory.shown()}")
    assert set(os.listdir(tmp_path.parent)) == before, "written beside the test's folder"
    memory.check(HOSTILE_BOUNDS)
