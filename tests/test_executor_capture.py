"""capture=executors: capture processes on executors, leases in the spool, executor loss.

The cluster tests run a Spark standalone cluster (master + 2 workers of one core each) and the
package's capture job under spark-submit; run them alone with ``-m cluster``.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from conftest import wait_until
from spark_zmq.holder import running_holders
from spark_zmq.spool import load_lease
from spark_zmq.standalone import StandaloneCluster

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parent.parent
ECHO = "zeroeq::test::Echo"


class Sender:
    """Publishes 0, 1, 2, ... on every publisher at ``rate`` messages per second each."""

    def __init__(self, publishers, rate: float) -> None:
        self.publishers = publishers
        self.rate = rate
        self.sent = {p.instance_name: 0 for p in publishers}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0 / self.rate):
            for publisher in self.publishers:
                publisher.publish(ECHO, b"%d" % self.sent[publisher.instance_name])
                self.sent[publisher.instance_name] += 1

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return self.sent


def sink_rows(spark, path: Path) -> list:
    try:
        return spark.read.parquet(str(path)).select("partition", "payload", "error").collect()
    except Exception:   # nothing committed yet
        return []


def sequences(rows) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for row in rows:
        if row.error is None:
            found.setdefault(row.partition, []).append(int(row.payload))
    return found


def wait_for_all_sent(spark, sink: Path, sent: dict[str, int], timeout: float = 120) -> list:
    def done():
        rows = sink_rows(spark, sink)
        last = {k: max(v) for k, v in sequences(rows).items()}
        return rows if all(last.get(k) == n - 1 for k, n in sent.items()) else None
    return wait_until(done, timeout=timeout, interval=1.0, what="every sent message in the sink")


def holders(spool: Path, keys) -> dict[str, tuple[int, str, int]]:
    """key -> (epoch, executor, holder pid) of partitions with a live, unsealed holder."""
    found = {}
    for key in keys:
        lease = load_lease(str(spool), key)
        if lease is not None and lease.holder and not lease.sealed:
            found[key] = (lease.epoch, lease.executor, int(lease.holder.rsplit("/", 1)[1]))
    return found


def executor_pid(executor: str) -> int:
    return int(executor.rsplit("/", 1)[1])


def check_exactly_once(rows, sent: dict[str, int], moved: set[str]) -> None:
    """No sequence number twice; a hole only where the partition moved (one, with a gap row)."""
    seqs = sequences(rows)
    gaps = {row.partition for row in rows if row.error and "had no holder between" in row.error}
    for key, n in sent.items():
        got = sorted(seqs[key])
        assert len(got) == len(set(got)), f"duplicates in {key}"
        holes = [(a, b) for a, b in zip(got, got[1:]) if b != a + 1]
        if key in moved:
            assert len(holes) <= 1, f"{key}: holes {holes}"
            assert key in gaps, f"{key} moved without a gap row"
        else:
            assert holes == [], f"{key} lost messages but never moved: {holes}"
        assert got[-1] == n - 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    instance = StandaloneCluster(tmp_path_factory.mktemp("cluster"), workers=2,
                                 private_mounts=True)
    yield instance
    instance.stop()


@pytest.mark.cluster
def test_executor_loss_moves_partitions_to_the_surviving_executor(spark, cluster, tmp_path,
                                                                  publishers):
    pubs = [publishers("cluster") for _ in range(4)]
    keys = [p.instance_name for p in pubs]
    spool, sink = tmp_path / "spool", tmp_path / "table"
    lease_timeout, idle_timeout, trigger = 5, 10, 1
    job = cluster.submit(
        str(ROOT / "jobs" / "capture_to_parquet.py"), "--format", "zeroeq",
        "--option", "session=cluster", "--option", "discoveryInterfaces=127.0.0.1",
        "--option", "capture=executors", "--option", f"spoolPath={spool}",
        "--option", f"leaseTimeout={lease_timeout}",
        "--option", f"captureIdleTimeout={idle_timeout}",
        "--output", str(sink), "--trigger", str(trigger))
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(job.stderr), daemon=True).start()
    sender = None
    try:
        held = wait_until(lambda: len(h := holders(spool, keys)) == 4 and h, timeout=240,
                          what="a holder for each of the 4 partitions")
        # every capture runs on an executor of the cluster (not the driver), on both of them
        by_worker = {w: set(cluster.executor_pids(w)) for w in (0, 1)}
        where = {key: next(w for w, pids in by_worker.items()
                           if executor_pid(executor) in pids) for key, (_, executor, _) in
                 held.items()}
        assert set(where.values()) == {0, 1}, where
        print(f"partitions per worker: {sorted(where.values())}")
        sender = Sender(pubs, rate=20)
        time.sleep(5)
        victim = 0
        moved = {key for key, w in where.items() if w == victim}
        cluster.kill_worker(victim)
        killed_at = time.monotonic()
        survivor = by_worker[1 - victim]
        wait_until(lambda: all(executor_pid(e) in survivor
                               for _, e, _ in holders(spool, keys).values())
                   and len(holders(spool, keys)) == 4, timeout=120,
                   what="the lost executor's partitions to move to the surviving executor")
        took = time.monotonic() - killed_at
        time.sleep(3)
        sent = sender.stop()
        rows = wait_for_all_sent(spark, sink, sent)
    finally:
        if sender is not None:
            sender.stop()
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(60)
    check_exactly_once(rows, sent, moved)
    print(f"partitions {sorted(moved)} moved in {took:.1f} s; sent {sent}")
    # leaseTimeout + one trigger, plus starting a capture process on a 2-core machine
    assert took < lease_timeout + trigger + 15, took
    text = "".join(log)
    for key in moved:
        assert re.search(rf"partition {re.escape(key)} moved from executor \S+ to executor",
                         text), text[-3000:]
    # the query stopped: no capture process outlives captureIdleTimeout on any host
    wait_until(lambda: not running_holders(), timeout=idle_timeout + 10,
               what="every capture process to end after the query stopped")


@pytest.mark.cluster
def test_a_spool_that_executors_do_not_see_fails_the_query_clearly(cluster, tmp_path,
                                                                   publishers):
    publisher = publishers("unshared")
    job = cluster.submit(
        str(ROOT / "jobs" / "capture_to_parquet.py"), "--format", "zeroeq",
        "--option", "session=unshared", "--option", "discoveryInterfaces=127.0.0.1",
        "--option", "capture=executors",
        "--option", f"spoolPath={cluster.private / tmp_path.name / 'spool'}",
        "--output", str(tmp_path / "table"), "--trigger", "1")
    try:
        _, stderr = job.communicate(timeout=240)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 1
    assert re.search(r"with capture=executors, option spoolPath must name storage that every "
                     r"node reaches; the executor on host \S+ does not see the driver's spool",
                     stderr), stderr[-3000:]
    assert publisher.instance_name


def test_a_paused_holder_cannot_append_after_a_takeover(spark, tmp_path, publishers):
    """SIGSTOP a holder past its lease: a new holder takes over; after SIGCONT the old one
    finds itself fenced and ends, and the sink holds every message at most once."""
    publisher = publishers("paused")
    key = publisher.instance_name
    spool, sink = tmp_path / "spool", tmp_path / "table"
    idle_timeout = 6
    query = (spark.readStream.format("zeroeq")
             .options(session="paused", discoveryInterfaces="127.0.0.1", capture="executors",
                      spoolPath=str(spool), leaseTimeout="2",
                      captureIdleTimeout=str(idle_timeout))
             .load().writeStream.format("parquet").option("path", str(sink))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="500 milliseconds").start())
    sender = None
    try:
        first = wait_until(lambda: holders(spool, [key]).get(key), timeout=120,
                           what="a holder of the partition")
        publisher.wait_for_subscribers()
        sender = Sender([publisher], rate=50)
        time.sleep(2)
        old_pid = first[2]
        os.kill(old_pid, signal.SIGSTOP)
        try:
            second = wait_until(lambda: (h := holders(spool, [key]).get(key)) and h[0] > first[0]
                                and h, timeout=60, what="a new holder with a higher epoch")
            assert second[2] != old_pid
            time.sleep(3)   # both connected: the paused one has a backlog the new one also has
        finally:
            os.kill(old_pid, signal.SIGCONT)
        wait_until(lambda: old_pid not in running_holders(), timeout=20,
                   what="the paused holder to find itself fenced and end")
        assert holders(spool, [key])[key][0] == second[0]
        time.sleep(1)
        sent = sender.stop()
        rows = wait_for_all_sent(spark, sink, sent)
    finally:
        if sender is not None:
            sender.stop()
        query.stop()
    check_exactly_once(rows, sent, {key})
    wait_until(lambda: not running_holders(), timeout=idle_timeout + 10,
               what="the holder to end once the query stopped")
