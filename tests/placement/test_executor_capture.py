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

from spark_zmq.spool.leases import load_lease
from spark_zmq.testing.standalone import StandaloneCluster
from support.common import ROOT, wait_until
from support.holders import holders_here
from support.sequences import Sender, check_exactly_once, sequences, wait_for_all_sent


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
    job = cluster.submit(
        str(ROOT / "spark_zmq" / "jobs" / "capture_to_parquet.py"),
        "--format",
        "zeroeq",
        "--option",
        "session=cluster",
        "--option",
        "discoveryInterfaces=127.0.0.1",
        "--option",
        "capture=executors",
        "--option",
        f"spoolPath={spool}",
        "--option",
        f"leaseTimeout={lease_timeout}",
        "--option",
        f"captureIdleTimeout={idle_timeout}",
        "--output",
        str(sink),
        "--trigger",
        str(trigger),
    )
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(job.stderr), daemon=True).start()
    sender = None
    try:
        held = wait_until(
            lambda: len(h := holders(spool, keys)) == 4 and h,
            timeout=240,
            what="a holder for each of the 4 partitions",
        )
        # every capture runs on an executor of the cluster (not the driver), on both of them
        by_worker = {w: set(cluster.executor_pids(w)) for w in (0, 1)}
        where = {
            key: next(w for w, pids in by_worker.items() if executor_pid(executor) in pids)
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
                all(executor_pid(e) in survivor for _, e, _ in holders(spool, keys).values())
                and len(holders(spool, keys)) == 4
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


def offset_rows(spark, path: Path) -> list:
    try:
        return (
            spark.read.parquet(str(path))
            .select("partition", "offset", "payload", "error")
            .collect()
        )
    except Exception:  # nothing committed yet
        return []


def check_every_hole_has_a_gap_row(rows, sent: dict[str, int]) -> dict[str, int]:
    """In offset order each partition's sequence numbers rise by one, except across a gap row
    (``error`` set, no payload); none is read twice. Returns the holes per partition."""
    data: dict[str, list[tuple[int, int]]] = {}
    gaps: dict[str, list[int]] = {}
    for row in rows:
        if row.error is None:
            data.setdefault(row.partition, []).append((row.offset, int(row.payload)))
        elif row.payload is None:
            gaps.setdefault(row.partition, []).append(row.offset)
    holes = {}
    for key, n in sent.items():
        got = sorted(data[key])
        seqs = [seq for _, seq in got]
        assert len(seqs) == len(set(seqs)), f"duplicates in {key}"
        before = [(-1, -1), *got]
        missing = [(a, b) for a, b in zip(before, got) if b[1] != a[1] + 1]
        for (offset_a, seq_a), (offset_b, seq_b) in missing:
            assert seq_b > seq_a, f"{key}: {seq_b} after {seq_a}"
            assert any(offset_a < g < offset_b for g in gaps.get(key, ())), (
                f"{key}: messages {seq_a + 1}..{seq_b - 1} missing between offsets {offset_a} "
                f"and {offset_b} with no gap row (gap rows at {gaps.get(key)})"
            )
        assert seqs[-1] == n - 1, f"{key}: the last message {n - 1} is missing"
        holes[key] = len(missing)
    return holes


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
            lambda: len(h := holders(spool, keys)) == 3 and h,
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
        assert holders(spool, keys) == first, "the restart replaced holders that were alive"
        (tmp_path / "control1" / "stop-1").touch()
        assert job.wait(120) == 0, "".join(lines)[-3000:]
        job, lines = submit(tmp_path / "control2", runs=1)
        wait_until(
            lambda: (
                len(h := holders(spool, keys)) == 3 and all(h[k][0] > first[k][0] for k in keys)
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


def test_a_restart_keeps_the_previous_runs_endpoints_until_discovery_decides(
    tmp_path, publishers, monkeypatch
):
    """Right after a start, an endpoint of the previous run's assignment that discovery has not
    found yet is unknown, not gone: it stays assigned (its holder keeps capturing) and its
    partition is not retired. Discovery confirms the one it finds; the other leaves after
    RECONFIRM_SECONDS."""
    from spark_zmq.capture.buffer import spool_table
    from spark_zmq.options import parse_options
    from spark_zmq.placement import make_placement
    from spark_zmq.placement.executors import enumerator
    from spark_zmq.protocols.contract import Endpoint
    from spark_zmq.protocols.zeroeq import ZeroEQ
    from spark_zmq.spool.layout import JsonState
    from spark_zmq.spool.writer import Spool
    from spark_zmq.stream_options import READER_OPTIONS
    from spark_zmq.stream_settings import ReaderSettings

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
    protocol = ZeroEQ()
    options = parse_options(
        "zeroeq",
        READER_OPTIONS + protocol.reader_options,
        {
            "session": "carried",
            "discoveryInterfaces": "127.0.0.1",
            "capture": "executors",
            "spoolPath": str(spool),
        },
    )
    query = ReaderSettings.of(options, protocol.read_settings(options))
    capture = make_placement(protocol, query, str(spool))
    started = time.monotonic()
    capture.start()
    try:
        assert set(assignment.load()["endpoints"]) == {found.key, gone.key}
        assert not any(s.retired for s in capture.snapshot().values())
        assert {c.key for c in capture.claims()} == {found.key, gone.key}
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


def test_claim_rounds_claim_each_partition_without_a_holder_once_per_retry(tmp_path, monkeypatch):
    """The driver's claims without Spark or holders: a round claims every assigned partition
    that no live lease covers, with the epoch it expects and the declines it allows; within
    CLAIM_RETRY nothing is claimed again; a partition whose holder took it, or whose endpoint
    left, is not claimed; a round planned by an earlier run (a restart replays its last batch)
    is worked out anew. The reader's side of rounds: tests/spark/test_reader_planning.py."""
    from spark_zmq.options import parse_options
    from spark_zmq.placement import make_placement
    from spark_zmq.placement.executors import enumerator
    from spark_zmq.protocols.contract import Endpoint
    from spark_zmq.protocols.zeroeq import ZeroEQ
    from spark_zmq.spool.epochs import claim_epoch
    from spark_zmq.stream_options import READER_OPTIONS
    from spark_zmq.stream_settings import ReaderSettings

    retry = 0.5
    monkeypatch.setattr(enumerator, "CLAIM_RETRY", retry)
    spool = tmp_path / "spool"
    spool.mkdir()
    protocol = ZeroEQ()
    options = parse_options(
        "zeroeq",
        READER_OPTIONS + protocol.reader_options,
        {"publishers": "127.0.0.1:9", "capture": "executors", "spoolPath": str(spool)},
    )
    settings = ReaderSettings.of(options, protocol.read_settings(options))
    capture = make_placement(protocol, settings, str(spool))  # not started: no discovery
    a, b = "127.0.0.1:7001", "127.0.0.1:7002"
    for key in (a, b):
        capture.endpoint_joined(Endpoint(key, f"tcp://{key}"))

    def claimed(claims_round: int) -> list[tuple[str, int, int]]:
        claims = capture.claims_of_round(claims_round)
        return [(c.key, c.expect_epoch, c.declines_left) for c in claims]

    try:
        capture.snapshot()  # the reader reads the leases before it plans
        assert capture.next_claims_round(None) == 1
        assert sorted(claimed(1)) == [(a, 0, 2), (b, 0, 2)]
        capture.snapshot()
        assert capture.next_claims_round(1) == 1, "claimed again within CLAIM_RETRY"
        claim_epoch(str(spool), a, 0)  # a's holder took it
        time.sleep(retry + 0.1)
        capture.snapshot()
        assert capture.next_claims_round(1) == 2
        assert claimed(2) == [(b, 0, 1)], "one decline fewer for each claim that did not lead"
        assert [key for key, _, _ in claimed(7)] == [b], "round 7: planned by an earlier run"
        capture.endpoint_left(b)
        time.sleep(retry + 0.1)
        capture.snapshot()
        assert capture.next_claims_round(2) == 2, "nothing left to claim"
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


@pytest.mark.cluster
def test_capture_on_the_driver_serves_its_spool_to_executors_that_do_not_see_it(
    spark, cluster, tmp_path, publishers
):
    """Issue 45: capture=driver with a spool on the driver's own disk (here a folder that the
    workers see as an empty tmpfs of their own): the read tasks get their ranges from the
    driver's spool server (Arrow Flight), every message once."""
    pubs = [publishers("served") for _ in range(2)]
    spool = cluster.private / tmp_path.name / "spool"
    job = cluster.submit(
        str(ROOT / "spark_zmq" / "jobs" / "capture_to_parquet.py"),
        "--format",
        "zeroeq",
        "--option",
        "session=served",
        "--option",
        "discoveryInterfaces=127.0.0.1",
        "--option",
        f"spoolPath={spool}",
        "--output",
        str(tmp_path / "table"),
        "--trigger",
        "1",
    )
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(job.stderr), daemon=True).start()
    sender = None
    try:
        for publisher in pubs:
            publisher.wait_for_subscribers(timeout=240)
        sender = Sender(pubs, rate=50)
        time.sleep(6)
        sent = sender.stop()
        rows = wait_for_all_sent(spark, tmp_path / "table", sent)
    finally:
        if sender is not None:
            sender.stop()
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(60)
    check_exactly_once(rows, sent, set())
    text = "".join(log)
    assert re.search(
        rf"spool {re.escape(str(spool))} is served to read tasks on other hosts at "
        rf"grpc\+tcp://127\.0\.0\.1:\d+",
        text,
    ), text[-3000:]


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
            lambda: holders(spool, [key]).get(key), timeout=120, what="a holder of the partition"
        )
        publisher.wait_for_subscribers()
        sender = Sender([publisher], rate=50)
        time.sleep(2)
        old_pid = first[2]
        os.kill(old_pid, signal.SIGSTOP)
        try:
            second = wait_until(
                lambda: (h := holders(spool, [key]).get(key)) and h[0] > first[0] and h,
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
        assert holders(spool, [key])[key][0] == second[0]
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
