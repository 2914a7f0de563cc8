"""A capture process on an executor (capture=executors), run as on an executor against a real
publisher and a real spool, with the driver's two files written by a stand-in
(``spark_zmq.testing.standin``): the assignment (which endpoints are live) and the commits (what
Spark has committed). The capture processes' claims and takeovers:
tests/placement/test_capture_processes.py."""

from __future__ import annotations

import time

from spark_zmq.placement.executors.holder import TICK
from spark_zmq.spool.layout import load_index
from spark_zmq.spool.leases import load_lease
from support.common import wait_until
from support.standin import SETTINGS


def test_a_partition_whose_endpoint_left_is_let_go_once_the_query_committed_it(
    standin_driver, numbered_publishers
):
    """Letting go at once (as before 0.2) left the partition's data in the spool for ever, to be
    read again by a restarted query or a returning endpoint."""
    driver = standin_driver(SETTINGS)
    publishers = numbered_publishers(1, rate=50)
    [endpoint] = publishers.endpoints
    pid = driver.start_process()
    driver.assign([endpoint])
    wait_until(driver.held_by, timeout=30, what="the partition held")
    publishers.start()
    wait_until(
        lambda: (index := load_index(driver.spool, endpoint.key)) and index.end >= 5,
        timeout=30,
        what="messages in the spool",
    )
    driver.assign([])  # the endpoint left
    wait_until(
        lambda: load_index(driver.spool, endpoint.key).retired,
        timeout=30,
        what="the partition retired",
    )
    end = load_index(driver.spool, endpoint.key).end
    time.sleep(4 * TICK)
    assert driver.held_by() == {endpoint.key: pid}, "let go before its data was committed"
    assert not load_lease(driver.spool, endpoint.key).sealed
    driver.commit({endpoint.key: end})
    wait_until(
        lambda: load_lease(driver.spool, endpoint.key).sealed,
        timeout=10,
        what="the partition let go",
    )
    assert driver.held_by() == {}
    index = load_index(driver.spool, endpoint.key)
    assert index.committed == end, "the commit is recorded in the index"
    assert index.start == 0 and sum(s.count for s in index.segments) == end, (
        "what was committed stays, for retention to delete"
    )
    assert not driver.records()[pid].gone, "the executor's capture process lives on"
