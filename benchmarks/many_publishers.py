"""Many publishers in one ZeroEQ session at a fixed total rate: what a micro-batch, capture and
the spool cost as the number of endpoints grows (issue 46).

For each N of ``--counts`` (10, 100, 300, 1,000), in a fresh process of its own (a fresh JVM, so
that each N's memory is its own): N wire-level ZeroEQ publishers (``Publisher``: each its own
XPUB socket, vocabulary server and ``_zeroeq_pub._tcp`` record, all in one session), spread over
``--processes`` publisher processes (4) that each announce through one ZeroConf responder bound
to 127.0.0.1. Together they send 100-byte events at ``--rate`` msg/s in all (3,000; each
publisher ``rate / N``), paced in the process's ticks, for ``--seconds`` (40). A publisher
behaves as a real one: send high-water mark 1000, and a message that finds its queue full is
dropped at once and counted (XPUB_NODROP's EAGAIN), never waited on. Each payload starts with a
sequence number unique to its publisher (publisher i sends ``i * count + k``) and its send time.

The reader is a new user's query: ``format("zeroeq")`` with ``session`` (discovery on
127.0.0.1), a 1-s processing-time trigger (``--trigger-ms``), each N in each placement of
``--placements``: ``capture=driver`` on ``local[2]``, and ``capture=executors`` on a standalone
cluster of 2 workers of one core each (``spark_zmq.testing.standalone``, the driver here), where
each executor's capture process captures its share of the endpoints; and a
``foreachBatch`` sink that takes each batch's payloads into the driver and records its rows,
its read tasks (the tasks of the batch's jobs, from Spark's status tracker), its time and
every row's latency (arrival in the sink minus the send time in the payload). The publishers
start sending only once every one of them has seen the query's subscription. Printed per N:

- *connected*: from the query's start until every publisher saw capture's subscription;
- *delivered / sent*: distinct (publisher, sequence) pairs in the sink over messages handed to
  zmq; *dropped* at the publishers' high-water mark; *duplicates*;
- *micro-batch p50 / p95*: Spark's ``triggerExecution`` of batches with rows, and the p50 of
  its parts (``BATCH_PARTS``: offsets asked of the reader, the batch's jobs, the commit);
  *read tasks* a batch (mean); *latency p50 / p95*;
- *drain*: from the last publisher's last send until every message sent and not dropped was in
  the sink;
- *reader and capture CPU / msg*: CPU time (user + system, ``/proc/PID/stat``) of the
  driver-side reader process (with ``capture=driver`` the one that holds the spool's LOCK:
  capture, discovery and the reader's answers to Spark: offsets, plans, commits) and of the
  capture processes (``capture=executors``), from the first send until the drain ended, over
  the messages delivered; *of which capture's own*: with ``capture=driver``, the capture thread
  and its zmq context's I/O threads (the query's ``spark_zmq_capture_cpu_seconds_total``,
  scraped from its metrics endpoint, option ``metrics``), with ``executors`` the capture
  processes; *of which zmq's I/O threads*: the threads of capture's zmq contexts, which
  capture names ``<n>/ZMQbg/...`` (``capture.limits``), read from ``/proc/PID/task``: the
  TCP work of each connection, which libzmq does, not the connector;
- *spool files / s*: files of the spool closed after writing while the publishers sent
  (inotify, ``harness.files.WrittenFiles``); of them, segment files (the flush files) and index
  writes (a line appended to an appended-segments file counts as one), and messages per
  segment file;
- *peak RSS*: sampled every 0.5 s: the JVMs, the reader process, the capture processes, the
  other Python processes the JVMs started (daemon and workers, summed: pages that forked
  workers share count once each), this process (the driver's Python), and the publisher
  processes (summed).

Placement ``bare`` is the reference a connector is measured against: no Spark, no spool, a
plain pyzmq subscriber (``bare_subscriber_main``) that connects a SUB socket to each
publisher's address and drains the ready ones in a ``zmq.Poller`` loop, pausing after each
round as capture's compiled core does with that many endpoints. Its *CPU a message* is its
whole process's and *zmq's I/O threads* its context's: what libzmq and pyzmq alone cost a
subscriber of N publishers at the same total rate.

Read tasks are counted from the status tracker (the tasks of the batch's new jobs in the
query's job group); a batch for which it has none is counted with ``rdd.getNumPartitions()``,
which plans the batch's read once more, and the table says how many batches were.

``--flush-interval-ms F`` passes the reader option ``flushIntervalMs`` (capture's segments
a second, and so its CPU with many endpoints, go down with it). ``--max-partitions K`` passes
the reader option ``maxPartitions`` (default: the reader's, the
driver host's cores); ``--max-partitions 100000`` gives one read task per endpoint, as before
grouping, so a run can compare the two.

Run it as ``python benchmarks/many_publishers.py [--counts 10,100,300,1000] [--seconds 40]
[--rate 3000] [--processes 4] [--max-partitions K] [--flush-interval-ms F] [--trigger-ms
1000] [--placements driver,executors,bare]`` (about 2 minutes per N and placement at the
defaults, more where the drain is slow; under a minute for ``bare``); it re-executes itself
in a private network namespace, as every benchmark does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from harness.children import Child, reap_children, report_errors
from harness.files import WrittenFiles
from harness.hermetic import ensure_private_network
from harness.publisher import HEAD, PAYLOAD_BYTES, SEND_HWM, TICK_EVENT
from harness.report import print_environment
from harness.spark import BatchCollector, error_text, stop_query
from harness.trees import CHECKOUT, run_in_tree

from spark_zmq.spark.session import LOOPBACK

#: the standalone cluster's workers (one core each) with capture=executors
WORKERS = 2
#: what the driver-side reader's command line holds (a Python streaming source's runner)
SOURCE_RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
#: how long publishers may take to announce themselves, and capture to subscribe to all
CONNECT_TIMEOUT = 300.0
#: the publisher processes' pacing tick
TICK_SECONDS = 0.002
#: how often the memory of the trial's processes is sampled
SAMPLE_SECONDS = 0.5
#: threads that announce (and withdraw) a process's publishers side by side: each
#: registration waits about a second for its probes
ANNOUNCE_THREADS = 32
MIB = 1024.0


# -- the publisher processes -------------------------------------------------------------------


def publishers_main(
    session: str,
    first: int,
    members: int,
    count: int,
    rate: float,
    conn: multiprocessing.connection.Connection,
) -> None:
    """Publishers ``first .. first + members - 1`` of the session, one ZeroConf responder for
    all: report them ready, then connected (every one has a subscriber), send on "go", report
    what was sent, and close once released."""

    def body() -> None:
        import zmq

        from spark_zmq.protocols.zeroeq import Publisher, event_id, make_zeroconf

        wire = event_id(TICK_EVENT)
        zeroconf = make_zeroconf((LOOPBACK,))
        context: zmq.Context = zmq.Context.instance()  # (the vocabulary servers' too)
        context.set(zmq.MAX_SOCKETS, 4 * members + 64)

        def make(_: int) -> Any:
            return Publisher(
                session,
                interfaces=(LOOPBACK,),
                zeroconf=zeroconf,
                send_hwm=SEND_HWM,
                nodrop=True,  # a full queue is EAGAIN: the message is dropped here, and counted
                registered={wire: TICK_EVENT},
                context=context,
            )

        with ThreadPoolExecutor(ANNOUNCE_THREADS) as pool:
            publishers = list(pool.map(make, range(members)))
            try:
                conn.send(("ready", [p.address for p in publishers]))
                wait_for_subscribers(publishers, wire)
                conn.send(("connected", time.time()))
                kind, start = conn.recv()
                if kind == "go":
                    sockets = [p.socket for p in publishers]
                    conn.send(("sent", send_paced(sockets, wire, first, count, rate, start)))
                    conn.poll(CONNECT_TIMEOUT + 600.0)  # released once everything is read
            finally:
                list(pool.map(lambda p: p.close(), publishers))
        zeroconf.close()

    report_errors(conn, body)


def wait_for_subscribers(publishers: list[Any], wire: bytes) -> None:
    """Until each publisher has a subscription that covers ``wire`` (capture's)."""
    waiting = list(publishers)
    deadline = time.monotonic() + CONNECT_TIMEOUT
    while waiting:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(waiting)} publishers got no subscriber")
        waiting = [p for p in waiting if not p.count_subscribers(wire)]
        time.sleep(0.02)


def send_paced(
    sockets: list[Any], wire: bytes, first: int, count: int, rate: float, start: float
) -> dict[str, float]:
    """``count`` events from every socket at ``rate`` each, from wall-clock time ``start``:
    the sockets take turns, so the process sends ``len(sockets) * rate`` msg/s evenly."""
    import zmq

    members = len(sockets)
    total, pace = members * count, members * rate
    padding = bytes(PAYLOAD_BYTES - HEAD.size)
    time.sleep(max(0.0, start - time.time()))
    began = time.perf_counter()
    sent = dropped = 0
    late = 0.0
    while sent < total:
        elapsed = time.perf_counter() - began
        due = min(total, int(elapsed * pace) + 1)
        late = max(late, elapsed - sent / pace)
        for number in range(sent, due):
            member, k = number % members, number // members
            payload = HEAD.pack((first + member) * count + k, time.time_ns()) + padding
            try:
                sockets[member].send_multipart([wire, payload], flags=zmq.NOBLOCK)
            except zmq.Again:
                dropped += 1
        sent = due
        time.sleep(TICK_SECONDS)
    seconds = time.perf_counter() - began
    return {
        "sent": sent,
        "dropped": dropped,
        "seconds": seconds,
        "late_ms": late * 1e3,
        "ended": time.time(),
    }


class Publishers:
    """The trial's publisher processes: N publishers spread over at most ``processes``."""

    def __init__(self, session: str, n: int, processes: int, count: int, rate: float) -> None:
        context = multiprocessing.get_context("spawn")
        shares = np.array_split(np.arange(n), min(processes, n))
        self.children: list[Child] = []
        try:
            for share in shares:
                self.children.append(
                    Child(context, publishers_main, session, int(share[0]), len(share), count, rate)
                )
            #: every publisher's address (``tcp://host:port``), for the bare subscriber
            self.addresses = [
                address
                for child in self.children
                for address in child.expect("ready", CONNECT_TIMEOUT)
            ]
        except BaseException:
            self.stop()
            raise

    def connected(self) -> float:
        """Wall-clock time at which the last publisher saw its subscriber."""
        return max(child.expect("connected", CONNECT_TIMEOUT) for child in self.children)

    def go(self, start: float, seconds: float) -> dict[str, float]:
        """Send from ``start`` on; every process's counts summed, the latest end and delay."""
        for child in self.children:
            child.conn.send(("go", start))
        results = [child.expect("sent", seconds * 3 + 120.0) for child in self.children]
        summed = {key: sum(r[key] for r in results) for key in ("sent", "dropped")}
        latest = {key: max(r[key] for r in results) for key in ("seconds", "late_ms", "ended")}
        return {**summed, **latest}

    @property
    def pids(self) -> list[int]:
        return [child.process.pid for child in self.children if child.process.pid]

    def stop(self) -> None:
        for child in self.children:
            child.stop(60.0)


def trial_publishers(n: int, args: argparse.Namespace) -> tuple[int, str, Publishers]:
    """A trial's N publishers in a session of their own, ``args.rate`` in all for
    ``args.seconds``: (messages each sends, the session, the publishers). One definition for
    every placement, so that the bare subscriber is fed exactly as a query is."""
    count = max(1, round(args.rate / n * args.seconds))
    session = f"many-{n}-{uuid.uuid4().hex[:8]}"
    return count, session, Publishers(session, n, args.processes, count, args.rate / n)


# -- the bare subscriber (placement ``bare``) -------------------------------------------------


def bare_subscriber_main(
    addresses: list[str], expected: int, conn: multiprocessing.connection.Connection
) -> None:
    """A plain pyzmq subscriber of every publisher: a SUB socket each, subscribed to
    everything, with capture's receive high-water mark; a ``zmq.Poller`` loop that drains each
    ready socket, then pauses as capture's compiled core pauses after a thin round with this
    many endpoints (``receiving.longest_pause``), so that both read each socket as often.
    Reports "subscribed", then, once it has ``expected`` messages or none for IDLE_SECONDS
    after the first, what it received and the CPU seconds of its process and of its zmq I/O
    threads, counted from the first message on."""

    def body() -> None:
        import zmq

        from spark_zmq.capture.limits import raise_open_files_limit
        from spark_zmq.capture.receiving import LONGEST_PAUSE_SECONDS, longest_pause
        from spark_zmq.stream_options import RECEIVE_HIGH_WATER_MARK

        raise_open_files_limit()
        context = zmq.Context()
        context.set(zmq.MAX_SOCKETS, context.get(zmq.SOCKET_LIMIT))
        poller = zmq.Poller()
        sockets = []
        for address in addresses:
            sock = context.socket(zmq.SUB)
            sock.setsockopt(zmq.RCVHWM, RECEIVE_HIGH_WATER_MARK.parsed_default())
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SUBSCRIBE, b"")
            sock.connect(address)
            poller.register(sock, zmq.POLLIN)
            sockets.append(sock)
        conn.send(("subscribed", None))
        pause = longest_pause(len(sockets), LONGEST_PAUSE_SECONDS)
        received, last, before = 0, 0.0, None
        while received < expected and (not last or time.monotonic() - last < IDLE_SECONDS):
            ready = poller.poll(100)
            if ready and before is None:
                before = (process_cpu(os.getpid()), threads_cpu(os.getpid(), ZMQ_IO_THREAD))
            for sock, _ in ready:
                while True:
                    try:
                        sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    received += 1
                last = time.monotonic()
            if ready:
                time.sleep(pause)
        cpu, io = process_cpu(os.getpid()), threads_cpu(os.getpid(), ZMQ_IO_THREAD)
        start = before or (cpu, io)
        conn.send(("received", {"received": received, "cpu": cpu - start[0], "io": io - start[1]}))
        for sock in sockets:
            sock.close()
        context.term()

    report_errors(conn, body)


#: a bare subscriber that has had messages and then none for this long stops waiting
IDLE_SECONDS = 5.0


def run_bare_trial(n: int, args: argparse.Namespace) -> dict[str, Any]:
    """N publishers at ``args.rate`` in all into the bare subscriber: what zmq alone costs a
    subscriber of N publishers (its CPU a message, and its I/O threads' share)."""
    count, _, publishers = trial_publishers(n, args)
    subscriber = None
    try:
        started = time.time()
        context = multiprocessing.get_context("spawn")
        subscriber = Child(context, bare_subscriber_main, publishers.addresses, n * count)
        subscriber.expect("subscribed", CONNECT_TIMEOUT)
        connected = publishers.connected() - started
        sent = publishers.go(time.time() + 0.5, args.seconds)
        got = subscriber.expect("received", args.drain_timeout + IDLE_SECONDS)
        received = got["received"] or 1
        return {
            "n": n,
            "bare": True,
            "connected": connected,
            **sent,
            "delivered": got["received"],
            "cpu_us": got["cpu"] / received * 1e6,
            "capture_us": got["cpu"] / received * 1e6,
            "zmq_io_us": got["io"] / received * 1e6,
        }
    finally:
        if subscriber is not None:
            subscriber.stop(30.0)
        publishers.stop()


# -- the sink and the trial's processes --------------------------------------------------------


class BatchRecorder(BatchCollector):
    """``BatchCollector`` (every sequence number, every row's latency) plus, per batch, its
    rows, its read tasks and the sink's time."""

    def __init__(self, count: int, spark: Any) -> None:
        super().__init__(count)
        self.context = spark.sparkContext
        self.tracker = self.context.statusTracker()
        self.jobs_seen: set[int] = set()
        self.batches: list[dict[str, float]] = []

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        began, rows_before = time.monotonic(), self.rows
        group = self.context.getLocalProperty("spark.jobGroup.id")
        super().__call__(batch_df, batch_id)
        tasks = self.read_tasks(group)
        tracked = tasks > 0  # else the DataFrame's partitions (plans the batch's read again)
        self.batches.append(
            {
                "id": batch_id,
                "rows": self.rows - rows_before,
                "tasks": tasks or batch_df.rdd.getNumPartitions(),
                "tracked": tracked,
                "seconds": time.monotonic() - began,
            }
        )

    def read_tasks(self, group: str | None) -> int:
        """Tasks of the jobs of the query's job group not seen before: this batch's read."""
        if not group:
            return 0
        jobs = set(self.tracker.getJobIdsForGroup(group)) - self.jobs_seen
        self.jobs_seen |= jobs
        tasks = 0
        for job in jobs:
            info = self.tracker.getJobInfo(job)
            for stage in info.stageIds if info else ():
                stage_info = self.tracker.getStageInfo(stage)
                tasks += stage_info.numTasks if stage_info else 0
        return tasks


def proc_children() -> dict[int, list[int]]:
    """{pid: its children's pids} of every process visible."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                text = Path(f"/proc/{name}/stat").read_text()
                parent = int(text[text.rindex(")") + 2 :].split()[1])
                children.setdefault(parent, []).append(int(name))
    return children


def descendants(pid: int, children: dict[int, list[int]]) -> list[int]:
    found, todo = [], list(children.get(pid, []))
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def comm(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/comm").read_text().strip()
    return ""


def rss_of(pid: int) -> float:
    """VmRSS of ``pid``, MiB (0 once it is gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / MIB
    return 0.0


def process_cpu(pid: int, stat: str = "") -> float:
    """CPU seconds (user + system) of process ``pid``, all its threads (or of the thread whose
    ``stat`` file is given)."""
    text = Path(stat or f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def lock_holder(spool: Path, timeout: float = 60.0) -> int:
    """The process that holds the spool's LOCK open: the driver-side reader, which captures."""
    lock = str((spool / "LOCK").resolve())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in descendants(os.getpid(), proc_children()):
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    with contextlib.suppress(OSError):
                        if os.readlink(f"/proc/{pid}/fd/{fd}") == lock:
                            return pid
        time.sleep(0.5)
    raise TimeoutError(f"no process holds {lock}")


def reader_process(placement: str, spool: Path) -> int:
    """The driver-side reader process: with ``capture=driver`` the one that holds the spool's
    LOCK (it captures), else the streaming source's runner (discovery and planning)."""
    if placement == "driver":
        return lock_holder(spool)
    from spark_zmq.testing.processes import running_processes

    mine = set(descendants(os.getpid(), proc_children()))
    runners = [pid for pid in running_processes(SOURCE_RUNNER) if pid in mine]
    if len(runners) != 1:
        raise RuntimeError(f"expected one {SOURCE_RUNNER} process, found {runners}")
    return runners[0]


def capture_cpu(reader: int) -> dict[int, float]:
    """CPU seconds of the driver-side reader and of every capture process (capture=executors)
    running now, by pid."""
    from spark_zmq.testing.processes import running_holders

    seconds = {}
    for pid in (reader, *running_holders()):
        with contextlib.suppress(OSError):
            seconds[pid] = process_cpu(pid)
    return seconds


def capture_thread_cpu(port: int) -> float:
    """CPU seconds of a driver-side capture's own threads, from its metrics endpoint."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "spark_zmq_capture_cpu_seconds"
        for sample in family.samples
    )


#: the name (``comm``) of an I/O thread of capture's zmq context, and of any zmq context's
CAPTURE_IO_THREAD = re.compile(r"^\d+/ZMQbg/IO")
ZMQ_IO_THREAD = re.compile(r"^(\d+/)?ZMQbg/IO")


def zmq_io_cpu(reader: int) -> dict[int, float]:
    """CPU seconds of the I/O threads of capture's zmq contexts, in the reader process and
    in every capture process running now, by pid."""
    from spark_zmq.testing.processes import running_holders

    seconds: dict[int, float] = {}
    for pid in (reader, *running_holders()):
        with contextlib.suppress(OSError):
            seconds[pid] = threads_cpu(pid, CAPTURE_IO_THREAD)
    return seconds


def threads_cpu(pid: int, names: re.Pattern[str]) -> float:
    """CPU seconds of the threads of process ``pid`` whose name (``comm``) ``names`` matches
    at its start; OSError if the process is gone."""
    seconds = 0.0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            if names.match(Path(f"/proc/{pid}/task/{task}/comm").read_text().strip()):
                seconds += process_cpu(int(task), f"/proc/{pid}/task/{task}/stat")
    return seconds


def spent(before: dict[int, float], after: dict[int, float], but: int | None = None) -> float:
    """CPU seconds between two readings by pid (a process started meanwhile from 0; one gone
    meanwhile is not counted), leaving out pid ``but``."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items() if pid != but)


def cluster_session(cluster: Any, conf: dict[str, str]) -> Any:
    """A session on the standalone ``cluster`` (its driver here, on loopback)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = LOOPBACK
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("many_publishers benchmark")
    for key, value in {**cluster.settings(), **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class MemorySampler:
    """Peak RSS, MiB, by kind of process, sampled every ``SAMPLE_SECONDS`` until closed."""

    KINDS = ("JVM", "reader", "capture processes", "workers", "driver", "publishers")

    def __init__(self, publishers: list[int]) -> None:
        self.publishers = publishers
        self.reader = 0
        self.peak = dict.fromkeys(self.KINDS, 0.0)
        self.most_holders = 0  # capture processes running at once, at most
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            for kind, mib in self.sample().items():
                self.peak[kind] = max(self.peak[kind], mib)

    def sample(self) -> dict[str, float]:
        from spark_zmq.testing.processes import running_holders

        children = proc_children()
        jvms = [p for p in descendants(os.getpid(), children) if comm(p) == "java"]
        started = [p for jvm in jvms for p in descendants(jvm, children)]
        holders = set(running_holders())
        self.most_holders = max(self.most_holders, len(holders))
        workers = [
            p
            for p in started
            if p != self.reader and p not in holders and comm(p).startswith("python")
        ]
        return {
            "JVM": sum(map(rss_of, jvms)),
            "reader": rss_of(self.reader) if self.reader else 0.0,
            "capture processes": sum(map(rss_of, holders)),
            "workers": sum(map(rss_of, workers)),
            "driver": rss_of(os.getpid()),
            "publishers": sum(map(rss_of, self.publishers)),
        }

    def close(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return self.peak


# -- one trial (a process of its own: ``--role trial``) ----------------------------------------


def start_query(spark: Any, session: str, folder: Path, sink: BatchRecorder, args: Any) -> Any:
    reader = (
        spark.readStream.format("zeroeq")
        .option("session", session)
        .option("discoveryInterfaces", LOOPBACK)
        .option("capture", args.placement)
        .option("spoolPath", str(folder / "spool"))
    )
    if args.max_partitions:
        reader = reader.option("maxPartitions", str(args.max_partitions))
    if args.flush_interval_ms:
        reader = reader.option("flushIntervalMs", str(args.flush_interval_ms))
    if args.metrics_port:
        reader = reader.option("metrics", f"{LOOPBACK}:{args.metrics_port}")
    return (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(folder / "checkpoint"))
        .trigger(processingTime=f"{args.trigger_ms} milliseconds")
        .start()
    )


def wait_for_delivery(sink: BatchRecorder, target: int, timeout: float) -> float | None:
    """When (monotonic) the sink held ``target`` distinct messages; None: not within time."""
    deadline = time.monotonic() + timeout
    while sink.unique < target:
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)
    return time.monotonic()


def run_trial(n: int, args: argparse.Namespace) -> dict[str, Any]:
    """N publishers at ``args.rate`` in all into one query; the figures of the result table."""
    os.environ.setdefault("SPARK_ZMQ_LOG_LEVEL", "WARNING")
    from spark_zmq.spark.session import loopback_session
    from spark_zmq.testing.standalone import free_port

    folder = Path(tempfile.mkdtemp(prefix="many_publishers-"))
    (folder / "spool").mkdir()
    count, session, publishers = trial_publishers(n, args)
    spark = query = files = sampler = cluster = None
    try:
        conf = {"spark.sql.streaming.numRecentProgressUpdates": "100000"}
        if args.placement == "executors":
            from spark_zmq.testing.standalone import StandaloneCluster

            cluster = StandaloneCluster(folder / "cluster", workers=WORKERS)
            spark = cluster_session(cluster, conf)
        else:
            spark = loopback_session("many_publishers benchmark", conf, log_level="ERROR")
        sampler = MemorySampler(publishers.pids)
        files = WrittenFiles(str(folder / "spool"))
        sink = BatchRecorder(n * count, spark)
        started = time.time()
        args.metrics_port = free_port() if args.placement == "driver" else None
        query = start_query(spark, session, folder, sink, args)
        connected = publishers.connected() - started
        sampler.reader = reader = reader_process(args.placement, folder / "spool")
        own_before = capture_thread_cpu(args.metrics_port) if args.metrics_port else 0.0
        io_before, cpu_before, files.counting = zmq_io_cpu(reader), capture_cpu(reader), True
        sent = publishers.go(time.time() + 0.5, args.seconds)
        files.counting = False  # (per second of the publishers' sending: ``seconds``)
        stopped = time.monotonic() - (time.time() - sent["ended"])
        done = wait_for_delivery(sink, int(sent["sent"] - sent["dropped"]), args.drain_timeout)
        after = capture_cpu(reader)
        # capture's own: its threads (capture=driver), or the capture processes (executors)
        if args.metrics_port:
            own = capture_thread_cpu(args.metrics_port) - own_before
        else:
            own = spent(cpu_before, after, but=reader)
        io = spent(io_before, zmq_io_cpu(reader))
        cpu = spent(cpu_before, after)
        progress = [json.loads(p.json) for p in query.recentProgress]
        return figures(n, sent, sink, progress, files, sampler.close(), connected, cpu) | {
            "capture_us": own / sink.unique * 1e6 if sink.unique else 0.0,
            "zmq_io_us": io / sink.unique * 1e6 if sink.unique else 0.0,
            "capture_processes": sampler.most_holders,
            "drain": None if done is None else done - stopped,
        }
    finally:
        if query is not None:
            stop_query(query)
        if files is not None:
            files.close()
        if spark is not None:
            spark.stop()
        if cluster is not None:
            cluster.stop()
        publishers.stop()
        shutil.rmtree(folder, ignore_errors=True)


def figures(
    n: int,
    sent: dict[str, float],
    sink: BatchRecorder,
    progress: list[dict[str, Any]],
    files: WrittenFiles,
    peak_rss: dict[str, float],
    connected: float,
    cpu: float,
) -> dict[str, Any]:
    """What the parent prints of one trial, as JSON."""
    with_rows = [p for p in progress if p["numInputRows"]]
    durations = [p["durationMs"].get("triggerExecution", 0) / 1e3 for p in with_rows]
    batches = [b for b in sink.batches if b["rows"]]
    latencies = np.concatenate(sink.latencies) / 1e9 if sink.latencies else np.empty(0)
    written = sum(files.counts.values())
    return {
        "n": n,
        "connected": connected,
        **sent,
        "delivered": sink.unique,
        "duplicates": sink.duplicates,
        "invalid": sink.invalid + sink.out_of_range,
        "batches": len(batches),
        "batch_s": percentiles(durations),
        "sink_s": percentiles([b["seconds"] for b in batches]),
        "parts_s": {
            part: float(np.median([p["durationMs"].get(part, 0) / 1e3 for p in with_rows]))
            for part in BATCH_PARTS
        }
        if with_rows
        else {},
        "tasks": float(np.mean([b["tasks"] for b in batches])) if batches else 0.0,
        "untracked": sum(not b["tracked"] for b in batches),
        "latency_s": percentiles(latencies),
        "cpu_us": cpu / sink.unique * 1e6 if sink.unique else 0.0,
        "files": written,
        "segment_files": files.counts["segment files"],
        "index_writes": files.counts["index writes"],
        "rss": peak_rss,
    }


#: the parts of a micro-batch's time in Spark's progress (``durationMs``), printed apart: where
#: a batch's time goes (offsets asked of the reader, the batch's jobs, the commit)
BATCH_PARTS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


def percentiles(values: Any) -> list[float]:
    """p50 and p95 of ``values``; empty: none."""
    if not len(values):
        return []
    return [float(v) for v in np.percentile(values, [50, 95])]


# -- the parent: a trial per N, then the table ------------------------------------------------


def failure(exc: Exception) -> str:
    """A failed trial's error: the last line of its process's output (``run_in_tree`` gives
    the tail of its stderr), else the exception's first line."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[-1].strip() if lines else error_text(exc)


def trial_arguments(n: int, placement: str, args: argparse.Namespace) -> list[str]:
    arguments = ["--role", "trial", "--counts", str(n), "--seconds", str(args.seconds)]
    arguments += ["--rate", str(args.rate), "--processes", str(args.processes)]
    arguments += ["--trigger-ms", str(args.trigger_ms), "--drain-timeout", str(args.drain_timeout)]
    arguments += ["--placement", placement]
    if args.max_partitions:
        arguments += ["--max-partitions", str(args.max_partitions)]
    if args.flush_interval_ms:
        arguments += ["--flush-interval-ms", str(args.flush_interval_ms)]
    return arguments


def pair(values: list[float], unit: str = "s") -> str:
    return f"{values[0]:.2f} / {values[1]:.2f} {unit}" if values else "-"


def rows_of(result: dict[str, Any]) -> dict[str, str]:
    """One column of the table: each figure of one N, as text."""
    if "error" in result:
        return {"error": result["error"][:40]}
    if result.get("bare"):
        sent = int(result["sent"])
        return {
            "all endpoints connected": f"{result['connected']:.1f} s",
            "sent (dropped at HWM)": f"{sent:,} ({int(result['dropped']):,})",
            "delivered / sent": f"{result['delivered'] / sent:.4f}" if sent else "-",
            "reader and capture CPU a message": f"{result['cpu_us']:.1f} us",
            "  of which capture's own": f"{result['capture_us']:.1f} us",
            "    of which zmq's I/O threads": f"{result['zmq_io_us']:.1f} us",
        }
    sent, files = int(result["sent"]), result["files"]
    rss = result["rss"]
    drain = result["drain"]
    return {
        "all endpoints connected": f"{result['connected']:.1f} s",
        "sent (dropped at HWM)": f"{sent:,} ({int(result['dropped']):,})",
        "delivered / sent": f"{result['delivered'] / sent:.4f}" if sent else "-",
        "duplicates (bad rows)": f"{result['duplicates']} ({result['invalid']})",
        "micro-batches with rows": str(result["batches"]),
        "micro-batch p50 / p95": pair(result["batch_s"]),
        "sink time p50 / p95": pair(result["sink_s"]),
        **{
            f"  {part} p50": f"{seconds:.2f} s"
            for part, seconds in result.get("parts_s", {}).items()
        },
        "read tasks a batch (mean)": f"{result['tasks']:.1f}"
        + (f" ({result['untracked']} from rdd)" if result["untracked"] else ""),
        "latency p50 / p95": pair(result["latency_s"]),
        "drain after the stop": "not drained" if drain is None else f"{drain:.1f} s",
        "reader and capture CPU a message": f"{result['cpu_us']:.1f} us",
        "  of which capture's own": f"{result['capture_us']:.1f} us",
        "    of which zmq's I/O threads": f"{result['zmq_io_us']:.1f} us",
        "capture processes": str(result.get("capture_processes", 0)),
        "spool files a second": f"{files / result['seconds']:,.0f}",
        "of which segment files": f"{result['segment_files'] / result['seconds']:,.0f}",
        "of which index writes": f"{result['index_writes'] / result['seconds']:,.0f}",
        "messages a segment file": (
            f"{sent / result['segment_files']:.1f}" if result["segment_files"] else "-"
        ),
        "publishers late (max)": f"{result['late_ms']:.0f} ms",
        **{f"peak RSS {kind}": f"{rss[kind]:,.0f} MiB" for kind in MemorySampler.KINDS},
    }


def print_table(results: list[dict[str, Any]]) -> None:
    columns = [rows_of(result) for result in results]
    names = list(dict.fromkeys(name for column in columns for name in column))
    heads = [f"N={r['n']} {r['placement'][:4]}" for r in results]
    print(f"\n{'':<28}" + "".join(f"{head:>22}" for head in heads))
    for name in names:
        print(f"{name:<28}" + "".join(f"{column.get(name, ''):>22}" for column in columns))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--counts", default="10,100,300,1000", help="publisher counts N (default 10,100,300,1000)"
    )
    parser.add_argument("--seconds", type=float, default=40.0, help="sending per N (default 40)")
    parser.add_argument("--rate", type=float, default=3000.0, help="msg/s in all (default 3000)")
    parser.add_argument("--processes", type=int, default=4, help="publisher processes (default 4)")
    parser.add_argument(
        "--max-partitions",
        type=int,
        default=0,
        help="the reader option maxPartitions (default: the reader's own; 100000: a task per "
        "endpoint)",
    )
    parser.add_argument("--trigger-ms", type=int, default=1000, help="trigger (default 1000)")
    parser.add_argument(
        "--flush-interval-ms",
        type=int,
        default=0,
        help="reader option flushIntervalMs (default: the reader's, 100)",
    )
    parser.add_argument(
        "--placements",
        default="driver,executors,bare",
        help="capture placements, each N in each, and bare: a plain pyzmq subscriber "
        "(default driver,executors,bare)",
    )
    parser.add_argument("--placement", default="driver", help=argparse.SUPPRESS)
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=300.0,
        help="longest wait for the sink to hold every message after the stop (default 300 s)",
    )
    parser.add_argument("--role", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args(sys.argv[1:])
    counts = [int(n) for n in args.counts.split(",")]
    if args.role:
        trial = run_bare_trial if args.placement == "bare" else run_trial
        print(json.dumps(trial(counts[0], args)))
        return 0
    ensure_private_network(__file__)
    print_environment("many_publishers benchmark: N ZeroEQ publishers, one session")
    grouping = args.max_partitions or "the reader's default"
    print(
        f"  settings  : {args.rate:,.0f} msg/s in all, {PAYLOAD_BYTES} B, {args.seconds:g} s per "
        f"N, {args.processes} publisher processes, capture={args.placements}, trigger "
        f"{args.trigger_ms} ms, maxPartitions {grouping}, flushIntervalMs "
        f"{args.flush_interval_ms or 'the reader default'}, load {os.getloadavg()[0]:.1f}\n",
        flush=True,
    )
    results = []
    for n in counts:
        for placement in args.placements.split(","):
            try:
                arguments = trial_arguments(n, placement, args)
                result = run_in_tree(str(CHECKOUT), __file__, arguments)
            except (RuntimeError, ValueError) as exc:
                result = {"n": n, "error": failure(exc)}
            result["placement"] = placement
            results.append(result)
            row = "; ".join(f"{k} {v}" for k, v in rows_of(result).items())
            print(f"  N={n}, capture={placement}: {row}", flush=True)
    reap_children()
    print_table(results)
    print(f"(load average at the end: {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
