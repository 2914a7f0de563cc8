"""Capture processes (capture=executors) among themselves: one holds many partitions, they
share new partitions out (the least loaded first), take over the partitions of one that stopped
beating within leaseTimeout by themselves, fence it, capture an endpoint only the driver's host
reaches on that host only, and read a spool of release 0.2. They run as on executors, against
real publishers and a real spool, with a stand-in for the driver's files
(``spark_zmq.testing.standin``); no Spark. The same through a Spark query on a standalone
cluster: tests/placement/test_executor_capture.py."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pyarrow as pa

from spark_zmq.placement.executors.holder import CLAIM_PATIENCE, SETTLE, TICK
from spark_zmq.placement.executors.reach import host_local, may_capture
from spark_zmq.placement.executors.spread import spread
from spark_zmq.placement.executors.watch import ProcessWatch
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.spool.contract import register_executor
from spark_zmq.spool.epochs import claim_epoch
from spark_zmq.spool.index import Source
from spark_zmq.spool.layout import SPOOL_SCHEMA, partition_dir
from spark_zmq.spool.leases import load_lease
from spark_zmq.spool.processes import (
    DRIVER,
    EXECUTOR,
    ProcessRecord,
    host_identity,
    save_record,
)
from support.common import wait_until
from support.metrics import probe, scrape
from support.standin import LEASE_TIMEOUT, SETTINGS, holes, wait_for_all


def test_one_capture_process_holds_many_partitions_and_captures_each_message_once(
    standin_driver, numbered_publishers
):
    driver = standin_driver(SETTINGS)
    publishers = numbered_publishers(40, rate=20)
    pid = driver.start_process()
    driver.assign(publishers.endpoints)
    keys = {e.key for e in publishers.endpoints}
    wait_until(lambda: set(driver.held_by()) == keys, timeout=30, what="all 40 partitions held")
    assert set(driver.held_by().values()) == {pid}
    time.sleep(1)  # the subscriptions reach the publishers
    publishers.start()
    time.sleep(2)
    sent = publishers.stop()
    for key, numbers in wait_for_all(driver, sent).items():
        assert holes(numbers) == [], key
        assert numbers == list(range(numbers[0], sent[key])), key
    assert len(driver.records()) == 1, "one capture process, however many partitions"


def test_a_stopped_capture_process_loses_its_partitions_to_the_live_one_and_is_fenced(
    standin_driver, numbered_publishers
):
    """SIGSTOP one of two capture processes (what its host losing power looks like to the
    other): the live one takes its partitions over within leaseTimeout, with a gap row each;
    after SIGCONT the stopped one finds them taken and writes nothing more of them."""
    driver = standin_driver(SETTINGS)
    publishers = numbered_publishers(6, rate=50)
    first, second = driver.start_process(), driver.start_process()
    time.sleep(SETTLE + 2 * TICK)  # both beat before there is anything to share
    driver.assign(publishers.endpoints)
    keys = {e.key for e in publishers.endpoints}
    wait_until(lambda: set(driver.held_by()) == keys, timeout=30, what="all 6 partitions held")
    held = driver.held_by()
    assert sorted(held.values()) == sorted([first] * 3 + [second] * 3), held
    moved = {key for key, pid in held.items() if pid == first}
    time.sleep(1)
    publishers.start()
    time.sleep(1)
    os.kill(first, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        wait_until(
            lambda: set(driver.held_by().values()) == {second} and len(driver.held_by()) == 6,
            timeout=LEASE_TIMEOUT + 15,
            what="the live process to take every partition",
        )
        took = time.monotonic() - stopped_at
        time.sleep(1)
    finally:
        os.kill(first, signal.SIGCONT)
    wait_until(
        lambda: not driver.records()[first].partitions,
        timeout=10,
        what="the stopped process to let go of what was taken over",
    )
    time.sleep(1)  # it flushed whatever it still held: nothing must land
    sent = publishers.stop()
    print(f"taken over {took:.1f} s after SIGSTOP (leaseTimeout {LEASE_TIMEOUT:g})")
    assert took < LEASE_TIMEOUT + CLAIM_PATIENCE + 3, took
    for key, numbers in wait_for_all(driver, sent).items():
        found = holes(numbers)
        if key in moved:
            assert len(found) <= 1 and all(gap for _, _, gap in found), (key, found)
            assert any("had no holder between" in str(n) for n in numbers), key
        else:
            assert found == [], (key, found)
    assert all(load_lease(driver.spool, key).epoch == 2 for key in moved)


def test_an_endpoint_only_the_drivers_host_reaches_is_captured_on_that_host_only(
    standin_driver, numbered_publishers
):
    """A loopback publisher is captured by a process on the driver's host, never elsewhere:
    with the assignment naming another host as the driver's, no process here claims it; once
    it names this host, one does; and the driver's own process (role driver) claims it too."""
    driver = standin_driver(SETTINGS)
    publishers = numbered_publishers(1, rate=20)
    [endpoint] = publishers.endpoints
    here = driver.driver_host
    driver.driver_host = "another-host net:[1]"
    driver.start_process()
    driver.assign([endpoint])
    time.sleep(SETTLE + CLAIM_PATIENCE + 4 * TICK)
    assert load_lease(driver.spool, endpoint.key) is None, "claimed on a host that cannot reach it"
    driver.driver_host = here
    driver.assign([endpoint])
    wait_until(driver.held_by, timeout=15, what="a process on this host to claim it")
    driver.close()
    assert load_lease(driver.spool, endpoint.key).sealed
    own = standin_driver(SETTINGS, spool=driver.spool)
    try:
        own.assign([endpoint])
        pid = own.start_process(DRIVER)
        wait_until(lambda: own.held_by() == {endpoint.key: pid}, timeout=15, what="a claim")
        assert own.records()[pid].role == DRIVER
    finally:
        own.close()


def test_a_partition_held_by_a_release_0_2_holder_is_taken_over_with_a_gap_row(
    standin_driver, numbered_publishers
):
    """Upgrades: a spool as release 0.2 left it (a holder per partition that renewed its
    lease.json, gone without sealing: its host was lost) is read by this release: a capture
    process takes the partition over once the lease has not moved for leaseTimeout, goes on
    from its end and owes the time since the old holder's last heartbeat as a gap row."""
    driver = standin_driver(SETTINGS)
    publishers = numbered_publishers(1, rate=50)
    [endpoint] = publishers.endpoints
    old_beat_at = time.time() - 100
    write_release_0_2_partition(driver.spool, endpoint, count=3, beat_at=old_beat_at)
    driver.assign([endpoint])
    driver.start_process()
    wait_until(driver.held_by, timeout=LEASE_TIMEOUT + 15, what="a takeover")
    time.sleep(1)
    publishers.start()
    time.sleep(1)
    sent = publishers.stop()
    numbers = wait_for_all(driver, sent)[endpoint.key]
    assert numbers[:3] == [100, 101, 102], "what 0.2 wrote is read on"
    gap = numbers[3]
    assert isinstance(gap, str) and "had no holder between" in gap, numbers[:5]
    assert "oldhost/4242 on executor oldhost/4241" in gap, gap
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(old_beat_at))
    assert f"between {since}" in gap, gap
    assert load_lease(driver.spool, endpoint.key).epoch == 2


def write_release_0_2_partition(spool: str, endpoint: Endpoint, count: int, beat_at: float) -> None:
    """The files of a partition held in epoch 1 by a release 0.2 holder, as that release
    writes them: a segment of ``count`` messages (numbers 100, 101, ...), index.json (format
    version 2) naming its appended-segments file, which lists the segment, and the lease its
    holder renewed every 0.5 s until ``beat_at``."""
    epoch = os.path.join(partition_dir(spool, endpoint.key), "e00000001")
    os.makedirs(epoch)
    schema = SPOOL_SCHEMA.with_metadata({"source": Source(endpoint.address, {}).to_json()})
    rows = pa.table(
        {
            "received_at": pa.array([int(beat_at * 1e6)] * count, SPOOL_SCHEMA[0].type),
            "frames": [[b"%d" % (100 + n)] for n in range(count)],
            "fault": pa.array([None] * count, pa.string()),
        },
        schema=schema,
    )
    segment = os.path.join(epoch, f"{0:020d}.arrow")
    with pa.OSFile(segment, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        writer.write_table(rows)
    size = os.path.getsize(segment)
    documents = {
        "index.json": {
            "format_version": 2,
            "key": endpoint.key,
            "start": 0,
            "retained_from": 0,
            "end": 0,
            "dropped": 0,
            "retired": False,
            "committed": 0,
            "segments": [],
            "written_at": [],
            "appended": "appended.00000001.jsonl",
        },
        "lease.json": {
            "format_version": 1,
            "holder": "oldhost/4242",
            "executor": "oldhost/4241",
            "beat": 57,
            "at": beat_at,
            "failure": "",
        },
    }
    for name, document in documents.items():
        with open(os.path.join(epoch, name), "w") as f:
            json.dump(document, f)
    with open(os.path.join(epoch, "appended.00000001.jsonl"), "w") as f:
        f.write(json.dumps([0, count, size, 1, beat_at, 0]) + "\n")


def test_host_local_addresses_are_those_only_their_own_host_reaches():
    local = [
        "tcp://127.0.0.1:5555",
        "tcp://127.8.9.10:5555",
        "tcp://[::1]:5555",
        "tcp://localhost:5555",
        "tcp://ip6-localhost:5555",
        "tcp://lab.localhost:5555",
        "tcp://169.254.3.4:5555",
        "tcp://[fe80::1%eth0]:5555",
        "tcp://[::ffff:127.0.0.1]:5555",
        "tcp://0.0.0.0:5555",
        "ipc:///tmp/goby_auv/router.sock",
        "inproc://capture",
    ]
    remote = ["tcp://10.1.2.3:5555", "tcp://[2001:db8::1]:5555", "tcp://lab-host:5555"]
    assert [a for a in local if not host_local(a)] == []
    assert [a for a in remote if host_local(a)] == []


def record(process: str, *, host: str = "h1", role: str = EXECUTOR, held: int = 0) -> ProcessRecord:
    partitions = {f"held-{process}-{n}": 1 for n in range(held)}
    return ProcessRecord(process, f"{process}-jvm", host, role, 0.0, 1, 0.0, 0.0, partitions)


def test_free_partitions_go_to_the_least_loaded_process_that_may_capture_them():
    """Every process works the same spread out from the same records: each free partition once,
    the least loaded first, ties to the lower process id; host-local ones only on the driver's
    host; the driver's own process takes no other."""
    processes = [
        record("a", held=2),
        record("b"),
        record("c", host="h2"),
        record("d", host="h2", role=DRIVER),
    ]
    addresses = {f"r{n}": f"tcp://10.0.0.{n}:1" for n in range(6)}
    addresses.update({"l0": "tcp://127.0.0.1:1", "l1": "ipc:///tmp/x"})
    loads = {p.process: len(p.partitions) for p in processes}

    def able(process: ProcessRecord, key: str) -> bool:
        return may_capture(process, addresses[key], "h2")

    chosen = spread(addresses, processes, loads, able)
    assert chosen == {
        "l0": "c",
        "l1": "d",
        "r0": "b",
        "r1": "b",
        "r2": "c",
        "r3": "a",
        "r4": "b",
        "r5": "c",
    }


def test_a_silent_process_frees_its_partitions_after_lease_timeout_by_the_watchers_clock(tmp_path):
    """Liveness is timed by the watcher: a record first seen counts as live from then, however
    old its wall-clock time; it stops counting lease_timeout after its beat last moved. Its
    partitions are then free, at the epoch they were held under; a sealed one is free at once;
    a lease that names a holder without a record (release 0.2) is free once it has not changed
    for lease_timeout."""
    root = str(tmp_path)
    lease_timeout = 0.6
    watch = ProcessWatch(root, lease_timeout)
    claim_epoch(root, "p", 0)
    beating = record("a")
    old = ProcessRecord("b", "b-jvm", "h1", EXECUTOR, 0.0, 1, 0.0, 0.0, {"p": 1})
    save_record(root, old)
    save_record(root, beating)
    watch.refresh()
    assert [r.process for r in watch.live()] == ["a", "b"]
    assert watch.holders()["p"][0].process == "b"
    for beat in range(2, 6):
        time.sleep(lease_timeout / 3)
        save_record(root, ProcessRecord(**{**beating.__dict__, "beat": beat}))
        watch.refresh()
    assert [r.process for r in watch.live()] == ["a"]
    assert "p" not in watch.holders()
    assert watch.free_epoch("p") is None, "its lease names no holder with a record yet"
    assert watch.free_epoch("never-claimed") == 0


def test_an_executor_noted_by_a_claim_task_is_expected_until_its_process_beats(tmp_path):
    """New partitions wait for the capture process a claim task is starting: an executor noted
    in the spool that has no record is expected, for ``wait`` seconds from when the watcher
    first saw it; not once its process wrote a record, nor when it is gone."""
    root = str(tmp_path)
    for executor in ("vm/101", "vm/102"):
        register_executor(root, executor)
    register_executor(root, "vm/103", gone=True)
    save_record(root, dataclasses.replace(record("p"), executor="vm/102"))
    watch = ProcessWatch(root, lease_timeout=10)
    watch.refresh()
    expected = watch.expected(wait=0.5, window=30)
    assert [(r.process, r.host) for r in expected] == [("expected:vm/101", host_identity())]
    time.sleep(0.6)
    watch.refresh()
    assert watch.expected(wait=0.5, window=30) == []


def test_each_capture_process_serves_its_metrics_on_a_port_its_record_names(
    standin_driver, numbered_publishers
):
    """Option metrics=127.0.0.1:0 with two capture processes on one host: each serves on a
    port of its own, named in its record and listed by ``spark-zmq metrics-targets``; scraped,
    they count every message the spool holds of the partitions each holds, and their probes
    pass."""
    driver = standin_driver(dataclasses.replace(SETTINGS, metrics=("127.0.0.1", 0)))
    publishers = numbered_publishers(4, rate=50)
    first, second = driver.start_process(), driver.start_process()
    time.sleep(SETTLE + 2 * TICK)
    driver.assign(publishers.endpoints)
    keys = {e.key for e in publishers.endpoints}
    wait_until(lambda: set(driver.held_by()) == keys, timeout=30, what="all 4 partitions held")
    time.sleep(1)
    publishers.start()
    time.sleep(1)
    spooled = wait_for_all(driver, publishers.stop())
    urls = {pid: record.metrics for pid, record in driver.records().items()}
    assert set(urls) == {first, second} and len(set(urls.values())) == 2, urls
    received: dict[str, float] = {}
    for url in urls.values():
        assert url.startswith("http://127.0.0.1:"), url
        for (name, labels), value in scrape(url).items():
            if name == "spark_zmq_messages_received_total":
                received[dict(labels)["endpoint"]] = value
        assert probe(url, "/readyz") == (200, "ok: capture runs, spool writable\n")
    in_spool = {k: sum(isinstance(n, int) for n in numbers) for k, numbers in spooled.items()}
    assert received == in_spool
    listed = subprocess.run(
        [sys.executable, "-m", "spark_zmq", "metrics-targets", "--spool", driver.spool],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    targets = sorted(target for group in json.loads(listed.stdout) for target in group["targets"])
    assert targets == sorted(url.removeprefix("http://") for url in urls.values())
