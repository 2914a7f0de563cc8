"""capture=executors: capture processes on executors, leases in the spool, executor loss.

The cluster tests run a Spark standalone cluster (master + 2 workers of one core each) and the
package's capture job under spark-submit; run them alone with ``-m cluster``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from spark_zmq.spool.processes import EXECUTOR, ProcessRecord, save_record
from spark_zmq.testing.standalone import StandaloneCluster
from support.common import ROOT, wait_until
from support.holders import held_partitions, holders_here, pid_of
from support.sequences import (
    Sender,
    check_every_hole_has_a_gap_row,
    check_exactly_once,
    offset_rows,
    sequences,
    wait_for_all_sent,
)


def worker_of(cluster: StandaloneCluster, executor: str) -> int | None:
    """The worker whose executor JVM ``executor`` (host/pid) is, if any."""
    for worker in range(len(cluster.workers)):
        if pid_of(executor) in cluster.executor_pids(worker):
            return worker
    return None


def submit_capture_job(
    cluster: StandaloneCluster,
    spool: Path,
    sink: Path,
    options: dict[str, str],
    trigger: float = 1,
    conf: dict[str, str] | None = None,
):
    """The capture job (zeroeq into Parquet at ``sink``) with capture=executors on the
    cluster, with Spark settings ``conf`` besides the cluster's: (the spark-submit process,
    the lines of its stderr as they come)."""
    arguments = []
    for name, value in {"capture": "executors", "spoolPath": str(spool), **options}.items():
        arguments += ["--option", f"{name}={value}"]
    job = cluster.submit(
        str(ROOT / "spark_zmq" / "jobs" / "capture_to_parquet.py"),
        "--format",
        "zeroeq",
        *arguments,
        "--output",
        str(sink),
        "--trigger",
        str(trigger),
        conf=conf,
    )
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(job.stderr), daemon=True).start()
    return job, log


def stop_job(job) -> None:
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(60)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    instance = StandaloneCluster(tmp_path_factory.mktemp("cluster"), workers=2, private_mounts=True)
    yield instance
    instance.stop()


@pytest.mark.cluster
def test_executor_loss_moves_partitions_to_the_surviving_executor(
    spark, cluster, tmp_path, publishers
):
    pubs = [publishers("cluster") for _ in range(4)]
    keys = [p.instance_name for p in pubs]
    spool, sink = tmp_path / "spool", tmp_path / "table"
    lease_timeout, idle_timeout, trigger = 5, 10, 1
    options = {
        "session": "cluster",
        "discoveryInterfaces": "127.0.0.1",
        "leaseTimeout": str(lease_timeout),
        "captureIdleTimeout": str(idle_timeout),
    }
    # the first job waits for both executors up to 120 s, not Spark's 30 s: in a loaded run
    # one registered later than that, and the first holder claimed all four partitions
    waiting = {"spark.scheduler.maxRegisteredResourcesWaitingTime": "120s"}
    job, log = submit_capture_job(cluster, spool, sink, options, trigger, conf=waiting)
    sender = None
    try:
        held = wait_until(
            lambda: len(h := held_partitions(spool, keys)) == 4 and h,
            timeout=240,
            what="a holder for each of the 4 partitions",
        )
        # every capture runs on an executor of the cluster (not the driver), on both of them
        by_worker = {w: set(cluster.executor_pids(w)) for w in (0, 1)}
        where = {
            key: next(w for w, pids in by_worker.items() if pid_of(executor) in pids)
            for key, (_, executor, _) in held.items()
        }
        assert set(where.values()) == {0, 1}, where
        print(f"partitions per worker: {sorted(where.values())}")
        sender = Sender(pubs, rate=20)
        time.sleep(5)
        victim = 0
        moved = {key for key, w in where.items() if w == victim}
        cluster.kill_worker(victim)
        killed_at = time.monotonic()
        survivor = by_worker[1 - victim]
        wait_until(
            lambda: (
                all(pid_of(e) in survivor for _, e, _ in held_partitions(spool, keys).values())
                and len(held_partitions(spool, keys)) == 4
            ),
            timeout=120,
            what="the lost executor's partitions to move to the surviving executor",
        )
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
        assert re.search(
            rf"partition {re.escape(key)} moved from executor \S+ to executor", text
        ), text[-3000:]
    # the query stopped: no capture process outlives captureIdleTimeout on any host
    wait_until(
        lambda: not holders_here(),
        timeout=idle_timeout + 10,
        what="every capture process to end after the query stopped",
    )


@pytest.mark.cluster
def test_a_restarted_query_with_discovery_loses_nothing(spark, cluster, tmp_path, publishers):
    """Issue 23: a discovery-driven capture=executors query on a cluster, 3 publishers at 200
    msg/s, stopped and restarted from its checkpoint. Restarted within its application, it finds
    the stopped run's holders still capturing (their executors live on) and keeps them: no
    message is lost. Restarted as a new application (the executors, and so the holders, ended
    with the old one), it claims the partitions at once, and every hole has a gap row."""
    pubs = [publishers("restart") for _ in range(3)]
    keys = [p.instance_name for p in pubs]
    spool, sink = tmp_path / "spool", tmp_path / "table"

    def submit(control: Path, runs: int) -> tuple:
        control.mkdir()
        job = cluster.submit(
            str(ROOT / "tests" / "apps" / "restarting_query.py"),
            str(control),
            str(spool),
            str(sink),
            "restart",
            str(runs),
            "leaseTimeout=5",
            "captureIdleTimeout=30",
        )
        lines: list[str] = []
        for stream in (job.stdout, job.stderr):
            threading.Thread(target=lambda s=stream: lines.extend(s), daemon=True).start()
        return job, lines

    def printed(lines: list[str], text: str) -> None:
        wait_until(lambda: f"{text}\n" in lines, timeout=240, what=f"the job to print {text!r}")

    def rows_in_sink() -> int:
        return len(offset_rows(spark, sink))

    sender = None
    job, lines = submit(tmp_path / "control1", runs=2)
    try:
        first = wait_until(
            lambda: len(h := held_partitions(spool, keys)) == 3 and h,
            timeout=240,
            what="a holder for each of the 3 partitions",
        )
        for publisher in pubs:
            publisher.wait_for_subscribers()
        sender = Sender(pubs, rate=200)
        wait_until(
            lambda: {k for k, v in sequences(offset_rows(spark, sink)).items() if v} == set(keys),
            timeout=120,
            what="rows of every partition in the sink",
        )
        (tmp_path / "control1" / "stop-0").touch()
        printed(lines, "started 1")
        before = rows_in_sink()
        wait_until(
            lambda: rows_in_sink() > before + 3000,
            timeout=120,
            what="the restarted query to write rows",
        )
        assert held_partitions(spool, keys) == first, "the restart replaced holders that were alive"
        (tmp_path / "control1" / "stop-1").touch()
        assert job.wait(120) == 0, "".join(lines)[-3000:]
        job, lines = submit(tmp_path / "control2", runs=1)
        wait_until(
            lambda: (
                len(h := held_partitions(spool, keys)) == 3
                and all(h[k][0] > first[k][0] for k in keys)
            ),
            timeout=240,
            what="a new holder for each partition",
        )
        time.sleep(3)
        sent = sender.stop()
        rows = wait_until(
            lambda: (
                (r := offset_rows(spark, sink))
                and all(max(sequences(r).get(k, [-1])) == n - 1 for k, n in sent.items())
                and r
            ),
            timeout=120,
            interval=1.0,
            what="every sent message in the sink",
        )
        (tmp_path / "control2" / "stop-0").touch()
        assert job.wait(120) == 0, "".join(lines)[-3000:]
    finally:
        if sender is not None:
            sender.stop()
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    holder_logs = "".join(p.read_text() for p in (spool / "@holders").iterdir())
    assert "its endpoint left" not in holder_logs, holder_logs[-3000:]
    holes = check_every_hole_has_a_gap_row(rows, sent)
    print(f"sent {sent}; holes {holes}")
    # one hole at most, with its gap row: the time without holders between the applications
    assert all(n <= 1 for n in holes.values()), holes


def executor_placement(spool: Path, **options: str):
    """A capture=executors placement of zeroeq on ``spool``, not started (no discovery)."""
    from spark_zmq.options import parse_options
    from spark_zmq.placement import make_placement
    from spark_zmq.protocols.zeroeq import ZeroEQ
    from spark_zmq.stream_options import READER_OPTIONS
    from spark_zmq.stream_settings import ReaderSettings

    protocol = ZeroEQ()
    given = {"capture": "executors", "spoolPath": str(spool), **options}
    parsed = parse_options("zeroeq", READER_OPTIONS + protocol.reader_options, given)
    settings = ReaderSettings.of(parsed, protocol.read_settings(parsed))
    return make_placement(protocol, settings, str(spool))


def test_a_restart_keeps_the_previous_runs_endpoints_until_discovery_decides(
    tmp_path, publishers, monkeypatch
):
    """Right after a start, an endpoint of the previous run's assignment that discovery has not
    found yet is unknown, not gone: it stays assigned (its holder keeps capturing) and its
    partition is not retired. Discovery confirms the one it finds; the other leaves after
    RECONFIRM_SECONDS."""
    from spark_zmq.capture.buffer import spool_table
    from spark_zmq.placement.executors import enumerator
    from spark_zmq.protocols.contract import Endpoint
    from spark_zmq.spool.layout import JsonState
    from spark_zmq.spool.writer import Spool

    grace = 4.0
    monkeypatch.setattr(enumerator, "RECONFIRM_SECONDS", grace)
    live = publishers("carried")
    found = Endpoint(live.instance_name, f"tcp://{live.instance_name}")
    gone = Endpoint("127.0.0.1:9", "tcp://127.0.0.1:9")
    spool = tmp_path / "spool"
    with_rows = Spool(str(spool), 1 << 20)
    for endpoint in (found, gone):
        with_rows.append(endpoint.key, endpoint.source, spool_table([[b"x"]], [0], {}))
    with_rows.close()
    assignment = JsonState(str(spool / "assignment.json"))
    assignment.save(
        {
            "spool_id": "previous",
            "beat": 7,
            "format": "zeroeq",
            "endpoints": {e.key: e.to_json() for e in (found, gone)},
        }
    )
    capture = executor_placement(spool, session="carried", discoveryInterfaces="127.0.0.1")
    started = time.monotonic()
    capture.start()
    try:
        assert set(assignment.load()["endpoints"]) == {found.key, gone.key}
        assert not any(s.retired for s in capture.snapshot().values())
        assert capture.next_claims_round(None) == 1, "no capture process holds them: a round"
        wait_until(
            lambda: set(assignment.load()["endpoints"]) == {found.key},
            timeout=20,
            what="the endpoint discovery did not find to leave",
        )
        assert time.monotonic() - started >= grace - 0.5
        assert capture.snapshot()[gone.key].retired
        assert not capture.snapshot()[found.key].retired
        # the one discovery found is its endpoint now, with what discovery learned of it
        assert assignment.load()["endpoints"][found.key]["metadata"] != {}
        assert assignment.load()["spool_id"] == "previous"
    finally:
        capture.close()


def test_claim_rounds_start_capture_processes_where_none_runs(tmp_path, monkeypatch):
    """The driver's claim rounds without Spark: a round when endpoints have no holder and no
    executor runs a capture process (as many tasks as endpoints, two at least); none within
    CLAIM_RETRY; none once a capture process of an executor is alive; one for an executor
    that ran a task and runs no capture process (its tasks and one more), asked for
    MAX_ROUNDS_PER_EXECUTOR times at most; a round planned by an earlier run (a restart replays
    its last batch) is worked out anew. The reader's side of rounds:
    tests/spark/test_reader_planning.py."""
    from spark_zmq.placement.executors import starts
    from spark_zmq.protocols.contract import Endpoint
    from spark_zmq.spool.contract import register_executor

    retry = 0.3
    monkeypatch.setattr(starts, "CLAIM_RETRY", retry)
    spool = tmp_path / "spool"
    spool.mkdir()
    capture = executor_placement(spool, publishers="10.0.0.1:9")
    for key in ("10.0.0.1:7001", "10.0.0.1:7002", "10.0.0.1:7003"):
        capture.endpoint_joined(Endpoint(key, f"tcp://{key}"))

    def claimed(claims_round: int) -> int:
        return len(capture.claims_of_round(claims_round))

    def beat(process: str, n: int) -> None:
        now = time.time()
        record = ProcessRecord(process, "host/1", "h", EXECUTOR, now, n, now, now, {})
        save_record(str(spool), record)

    try:
        assert capture.next_claims_round(None) == 1
        assert claimed(1) == 3
        assert capture.next_claims_round(1) == 1, "a round again within CLAIM_RETRY"
        beat("host/2", 1)  # a capture process on executor host/1 is alive
        time.sleep(retry + 0.1)
        assert capture.next_claims_round(1) == 1, "a round although one runs"
        register_executor(str(spool), "host/9")  # an executor ran a task: no capture there
        rounds, last = [], 1
        for n in range(starts.MAX_ROUNDS_PER_EXECUTOR + 1):
            time.sleep(retry + 0.1)
            beat("host/2", n + 2)
            last = capture.next_claims_round(last)
            rounds.append(last)
        assert rounds == [2, 3, 4, 4], rounds
        assert claimed(4) == 2, "one for the executor without capture, and one more"
        assert claimed(7) == 0, "round 7, planned by an earlier run: nothing is needed now"
    finally:
        capture.close()


def test_a_capture_process_that_fails_fails_the_query(tmp_path):
    """A capture process writes why capture failed into its record: the driver's next offset
    call fails the query with it, once it is seen failing during this run (a failure an earlier
    run left in the spool is not this query's)."""
    from spark_zmq.errors import CaptureError

    spool = tmp_path / "spool"
    spool.mkdir()
    now = time.time()
    earlier = ProcessRecord("vm/1", "vm/0", "h", EXECUTOR, now, 9, now, now, {}, True, "old")
    save_record(str(spool), earlier)
    live = ProcessRecord("vm/2", "vm/3", "h", EXECUTOR, now, 1, now, now, {"p": 1})
    save_record(str(spool), live)
    capture = executor_placement(spool, publishers="10.0.0.1:9")
    try:
        capture.snapshot()
        failed = dataclasses.replace(live, beat=2, gone=True, failure="cannot write: disk full")
        save_record(str(spool), failed)
        with pytest.raises(CaptureError, match="process vm/2 on executor vm/3 failed: cannot"):
            capture.snapshot()
    finally:
        capture.close()


@pytest.mark.cluster
def test_a_spool_that_executors_do_not_see_fails_the_query_clearly(cluster, tmp_path, publishers):
    publisher = publishers("unshared")
    job = cluster.submit(
        str(ROOT / "spark_zmq" / "jobs" / "capture_to_parquet.py"),
        "--format",
        "zeroeq",
        "--option",
        "session=unshared",
        "--option",
        "discoveryInterfaces=127.0.0.1",
        "--option",
        "capture=executors",
        "--option",
        f"spoolPath={cluster.private / tmp_path.name / 'spool'}",
        "--output",
        str(tmp_path / "table"),
        "--trigger",
        "1",
    )
    try:
        _, stderr = job.communicate(timeout=240)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 1
    assert re.search(
        r"with capture=executors, option spoolPath must name storage that every "
        r"node reaches; the executor on host \S+ does not see the driver's spool",
        stderr,
    ), stderr[-3000:]
    assert publisher.instance_name


def test_a_paused_holder_cannot_append_after_a_takeover(spark, tmp_path, publishers):
    """SIGSTOP a holder past its lease: a new holder takes over; after SIGCONT the old one
    finds itself fenced and ends, and the sink holds every message at most once."""
    publisher = publishers("paused")
    key = publisher.instance_name
    spool, sink = tmp_path / "spool", tmp_path / "table"
    idle_timeout = 6
    query = (
        spark.readStream.format("zeroeq")
        .options(
            session="paused",
            discoveryInterfaces="127.0.0.1",
            capture="executors",
            spoolPath=str(spool),
            leaseTimeout="2",
            captureIdleTimeout=str(idle_timeout),
        )
        .load()
        .writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    sender = None
    try:
        first = wait_until(
            lambda: held_partitions(spool, [key]).get(key),
            timeout=120,
            what="a holder of the partition",
        )
        publisher.wait_for_subscribers()
        sender = Sender([publisher], rate=50)
        time.sleep(2)
        old_pid = first[2]
        os.kill(old_pid, signal.SIGSTOP)
        try:
            second = wait_until(
                lambda: (h := held_partitions(spool, [key]).get(key)) and h[0] > first[0] and h,
                timeout=60,
                what="a new holder with a higher epoch",
            )
            assert second[2] != old_pid
            time.sleep(3)  # both connected: the paused one has a backlog the new one also has
        finally:
            os.kill(old_pid, signal.SIGCONT)
        wait_until(
            lambda: old_pid not in holders_here(),
            timeout=20,
            what="the paused holder to find itself fenced and end",
        )
        assert held_partitions(spool, [key])[key][0] == second[0]
        time.sleep(1)
        sent = sender.stop()
        rows = wait_for_all_sent(spark, sink, sent)
    finally:
        if sender is not None:
            sender.stop()
        query.stop()
    check_exactly_once(rows, sent, {key})
    wait_until(
        lambda: not holders_here(),
        timeout=idle_timeout + 10,
        what="the holder to end once the query stopped",
    )
