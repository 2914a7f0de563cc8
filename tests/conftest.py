"""Shared fixtures: the hermetic-network guard, one Spark session, ZeroEQ publishers, and the
``spark`` marker, applied and enforced here (``-m "not spark"`` is the inner loop)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

ALLOWED_INTERFACES = ("lo",)
#: fixtures that start a JVM (the shared session, the standalone clusters of tests/test_deploy.py
#: and tests/placement/test_executor_capture.py, the cluster across emulated hosts of
#: tests/hosts/, the Spark Connect server, the docs site's build, which runs the notebooks when
#: it finds no outputs of theirs); a test that uses one, directly or through another fixture, is
#: marked ``spark`` without having to say so
SPARK_FIXTURES = frozenset({"spark", "cluster", "host_cluster", "connect_server", "site"})
#: fixtures that start JVMs of their own beside the worker's session (a standalone cluster, one
#: across hosts, a Spark Connect server): a test that uses one is marked ``jvms``
#: (``support.jvm_slots``)
JVM_FIXTURES = frozenset({"cluster", "host_cluster", "connect_server"})
#: the Spark configuration of every Spark process the tests start (JVM flags that save CPU)
SPARK_CONF_DIR = Path(__file__).parent / "spark-conf"


def pytest_configure(config):
    """Every Spark process the tests start, in this process or in a subprocess, reads its
    configuration from ``SPARK_CONF_DIR`` (tests/spark-conf/spark-defaults.conf says why), and
    from nothing a developer's environment would point Spark at instead."""
    os.environ["SPARK_CONF_DIR"] = str(SPARK_CONF_DIR)


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


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """scripts/test.sh's ``--dist loadfile``: the units of work of ``support.scheduling`` (a
    file, a group of files, a test of a long file), in this collection's order (longest
    first)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from support.scheduling import FileScheduling

    config.option.loadscopereorder = False
    return FileScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Marks ``spark`` every test that uses a fixture of ``SPARK_FIXTURES`` or is marked
    ``cluster``, so that ``-m "not spark"`` deselects it (pytest applies ``-m`` after this hook:
    ``tryfirst``), and ``jvms`` every test marked ``cluster`` or using a fixture of
    ``JVM_FIXTURES``; then orders the tests for parallel workers (``order_longest_first``)."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        cluster = item.get_closest_marker("cluster") is not None
        if cluster or SPARK_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.spark)
        if cluster or JVM_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.jvms)
    order_longest_first(items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked ``jvms`` waits for one of ``support.jvm_slots.SLOTS`` slots shared by the
    suite's workers, and holds it through its setup, call and teardown."""
    if item.get_closest_marker("jvms") is None:
        yield
        return
    from support.jvm_slots import JvmSlots, shared_folder

    slots = JvmSlots(shared_folder(item.config._tmp_path_factory.getbasetemp()))
    waited = slots.acquire()
    if waited >= 1:
        item.user_properties.append(("jvm_slot_wait_seconds", round(waited, 1)))
    try:
        yield
    finally:
        slots.release()


def order_longest_first(items: list[pytest.Item]) -> None:
    """Sorts the tests by unit of work (``support.scheduling.scope_of``: a file or a group of
    files that share a worker), the units that take longest first, so that parallel workers
    (scripts/test.sh) do not end the run waiting on a long file started last; inside a unit,
    tests keep their order, those marked ``last`` after the others. How long a unit takes:
    ``support.scheduling.unit_seconds``."""
    from support.scheduling import scope_of, unit_seconds

    weights = unit_seconds(items)
    position = {id(item): index for index, item in enumerate(items)}
    items.sort(
        key=lambda item: (
            -weights[scope_of(item.nodeid)],
            scope_of(item.nodeid),
            item.get_closest_marker("last") is not None,
            position[id(item)],
        )
    )


@pytest.fixture(scope="session")
def no_spark_home(tmp_path_factory) -> Path:
    """A SPARK_HOME whose launcher fails at once, saying which marker the test lacks."""
    home = tmp_path_factory.mktemp("no-spark-home")
    (home / "bin").mkdir()
    for launcher in ("spark-submit", "spark-class"):
        script = home / "bin" / launcher
        script.write_text(
            "#!/bin/sh\n"
            f"echo 'this test starts Spark ({launcher}) but is not marked spark: mark it "
            '@pytest.mark.spark (or use the spark fixture), so that -m "not spark" leaves it '
            "out' >&2\n"
            "exit 97\n"
        )
        script.chmod(0o755)
    return home


@pytest.fixture(autouse=True)
def spark_only_where_marked(request, monkeypatch):
    """A test not marked ``spark`` runs with SPARK_HOME pointing at ``no_spark_home``: a JVM it
    starts through pyspark or the ``spark-submit`` of the venv fails with the reason instead of
    slowing the inner loop down unseen. (A session already running is not affected.)"""
    if request.node.get_closest_marker("spark") is None:
        monkeypatch.setenv("SPARK_HOME", str(request.getfixturevalue("no_spark_home")))


@pytest.fixture(scope="session")
def spark():
    from spark_zmq.spark.session import loopback_session

    session = loopback_session("spark_zmq tests", {"spark.sql.session.timeZone": "UTC"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def checked_wheel(tmp_path_factory):
    """scripts/check_wheel.sh, run once: the packaging tests read its wheel and output, the
    deployment test installs its wheel (one compile of the capture core, not three)."""
    from support.packaging import check_wheel

    return check_wheel(tmp_path_factory.mktemp("wheel"))


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


@pytest.fixture
def standin_driver(tmp_path):
    """Factory of stand-ins for the driver of capture=executors (``spark_zmq.testing.standin``)
    on a spool in the test's folder; their capture processes are ended after the test."""
    from spark_zmq.testing.standin import StandInDriver

    made = []

    def make(settings, spool=None):
        made.append(StandInDriver(str(spool or tmp_path / "spool"), settings))
        return made[-1]

    yield make
    for driver in made:
        driver.close()


@pytest.fixture
def numbered_publishers():
    """Factory of zmq PUB sockets on loopback that send 0, 1, 2, ... each, closed after the test."""
    from spark_zmq.testing.standin import NumberedPublishers

    made = []

    def make(count, rate):
        made.append(NumberedPublishers(count, rate))
        return made[-1]

    yield make
    for publishers in made:
        publishers.close()
