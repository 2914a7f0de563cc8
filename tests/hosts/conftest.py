"""Emulated hosts (``spark_zmq.testing.hosts``): a network of the hosts a deployment has, and a
Spark standalone cluster across them, each made once per test file.

``host_cluster`` starts JVMs: tests/conftest.py lists it in SPARK_FIXTURES and JVM_FIXTURES, so
a test that uses it is marked ``spark`` and ``jvms`` and waits for a JVM slot."""

from __future__ import annotations

import time

import pytest

from spark_zmq.testing.hosts import HostCluster, Network

#: the hosts of a deployment: the master, two workers, the host that runs the applications'
#: drivers (spark-submit, client mode), and one for the peers (ZeroMQ publishers)
HOSTS = ("master", "worker1", "worker2", "driver", "peers")


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    """``HOSTS`` on one bridge; their folder (with ``shared/``) under the run's temporary
    folder. Closed after the file's tests, processes and all."""
    started = time.monotonic()
    instance = Network(tmp_path_factory.mktemp("hosts"))
    try:
        instance.add_hosts(*HOSTS)
        print(f"{len(HOSTS)} hosts up in {time.monotonic() - started:.2f} s")
        yield instance
    finally:
        instance.close()


@pytest.fixture(scope="module")
def host_cluster(network):
    """Spark's master on ``master``, a worker on ``worker1`` and ``worker2``, applications
    submitted from ``driver``."""
    workers = [network["worker1"], network["worker2"]]
    cluster = HostCluster(network["master"], workers, network["driver"])
    print(f"the cluster across hosts is up in {cluster.start_seconds:.1f} s")
    try:
        yield cluster
    finally:
        cluster.stop()
