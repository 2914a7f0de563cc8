"""Soak and faults: a stream held for a while at a fixed rate while its parts fail, then counted.

An EBUS broker (``python -m spark_zmq ebus broker``), publisher processes that broadcast
``{"p": publisher, "s": sequence, "t": send time}`` on channel ``soak/<p>`` at a fixed rate, and
a query (``format("ebus")``, ``capture=executors`` on ``local[2]`` unless ``--capture driver``
or ``--capture service``, into a Parquet table) run for ``--minutes``. With ``--capture service``
a capture service (``spark-zmq capture --format ebus`` with the query's broker options) fills
the soak's spool, and the query reads it with ``capture=service`` (it captures nothing itself).
Every ``--fault-every`` seconds one fault of the ``FAULTS`` table is injected, in turn:

- ``publisher``: a publisher restarts (it goes on with its sequence numbers),
- ``broker``: the broker restarts on the same ports,
- ``driver-kill``: the query's whole process group (the driver JVM and its Python workers; the
  query runs in a session of its own) is killed (SIGKILL), and the query restarts on the same
  checkpoint and spool. Capture processes of ``capture=executors`` run in sessions of their
  own, and stop when they see their executor's JVM gone; with ``capture=driver`` capture dies
  with the driver; with ``capture=service`` the service lives on (nothing should be lost),
- ``query``: the query stops (SIGTERM) and restarts from its checkpoint and spool,
- ``capture``: a capture process is killed (SIGKILL) and replaced through its lease
  (``capture=executors`` only: with ``capture=driver`` there is no such process),
- ``capture-service``: the capture service's process group is stopped, by SIGTERM and by SIGKILL
  in turn, and the service restarts on the same spool (``capture=service`` only); its downtime
  is a gap row ("capture of partition K was not running between T1 and T2").

A run goes on past its end until each kind of fault has come once, the service's restart twice
(``FAULTS_AT_LEAST``; at most 2 minutes more).

At the end capture must be running (the spool grows: a restarted capture owes its downtime's gap
row until the first message it receives again, or until it stops, after the table was counted),
then the publishers stop, the query drains its spool into the table, and the table is
checked (with Spark, which reads only committed files). Every message missing from the table
belongs to a *hole*: a run of one publisher's sequence numbers between two of its delivered
messages (the one before stored at offset o1 of its partition, the one after at o2; a hole at
the start or the end of a publisher's stream has no message on that side: o1 = -1, or no o2).
A missing message is dated by when its publisher was due to send it (each publisher run's first
sequence number and start are in its state file, and it sends at ``--rate``), and counted as
the first of:

1. *lost while capture was down, marked*: a gap row of the hole's partition (``error``
   starting with ``gap:``) sits at an offset after o1 (capture wrote it after the last message
   before the hole), and its time span [T1, T2], widened by ``MARK_SLACK`` seconds, holds the
   message's date. T1 and T2 are the first and second times its text names (every gap text of
   ``spark_zmq/capture/*.py`` names when the loss began: "between T1 and T2", "had no holder
   between T1 and T2", "dropped at T1 and re-established", "failed at T1"); a text naming one
   time ends at the gap row's ``received_at``, when capture wrote it. A text naming none (a
   damaged spool segment: "at offsets [a, b)") marks every message of a hole it sits in
   (after o1, before o2);
2. *lost before the first capture*: a message before its publisher's first delivered one:
   sent before capture first connected (expected: ZeroMQ pub/sub keeps nothing for a reader
   that is not connected yet);
3. *lost while a peer was down*: dated within a restart of its publisher or of the broker
   (from the stop to ``PEER_SETTLE`` seconds after the new process started): a publisher's
   socket that (re)connects drops what it sends before the broker's subscription reaches it,
   which no capture can see (expected);
4. *lost, unmarked*: none of these. It must be 0.

It prints messages sent, captured (rows the spool received, gap rows apart), delivered,
duplicated, the four kinds of loss, lost after capture (offsets below the last committed end
missing from the table: must be 0), peak memory and peak spool size. Exit status 1 if
anything was duplicated, lost after capture, or lost unmarked.

Run it as ``python benchmarks/soak.py [--minutes 10] [--short] [--capture driver|service]``; it
re-executes itself inside ``scripts/netns.sh`` (a private network namespace holding only
``lo``).
"""

from __future__ import annotations

import argparse
import calendar
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from harness.hermetic import ensure_private_network

from spark_zmq.spark.offsets import StreamOffset
from spark_zmq.testing.processes import rss_bytes, running_holders
from spark_zmq.testing.standalone import free_port

HERE = Path(__file__).resolve()
CHANNEL = "soak/"
#: every fault, in the order a run injects them, with the placements it applies to
#: (``Run.inject`` does it). ``capture-service`` comes second so that a short run (7 faults)
#: stops the service both ways.
FAULTS: dict[str, tuple[str, ...]] = {
    "publisher": ("executors", "driver", "service"),
    "capture-service": ("service",),
    "broker": ("executors", "driver", "service"),
    "driver-kill": ("executors", "driver", "service"),
    "query": ("executors", "driver", "service"),
    "capture": ("executors",),
}
#: how many times a run injects a fault at least (it goes on past its end until then): the
#: service's restart alternates SIGTERM and SIGKILL, and each must come
FAULTS_AT_LEAST = {"capture-service": 2}
PLACEMENTS = ("executors", "driver", "service")
#: seconds that a gap row's time span is widened by when matched against a hole
MARK_SLACK = 0.5
#: seconds after a restarted publisher or broker starts that its peers may still be connecting
PEER_SETTLE = 5.0
#: a restart of a publisher (its index) or of the broker (None: every publisher): from, to
PeerWindow = tuple[int | None, float, float]
GAP_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


# -- the parts, each run as ``soak.py <part> ...`` in a process of its own --------------------


def run_publisher(args: argparse.Namespace) -> int:
    """Broadcast at ``--rate``. ``--state`` keeps the next sequence number across restarts,
    and each run's first sequence number and start (epoch seconds): sequence ``s`` of a run is
    due at ``start + (s - first) / rate``, which dates the messages that never arrived."""
    import zmq

    from spark_zmq.protocols.ebus import pack

    state = Path(args.state)
    saved = json.loads(state.read_text()) if state.exists() else {"next": 0, "runs": []}
    sequence = saved["next"]
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.connect(f"tcp://127.0.0.1:{args.pub_port}")
    channel = f"{CHANNEL}{args.index}".encode()
    start, sent = time.monotonic(), 0
    runs = [*saved["runs"], [sequence, time.time()]]
    while not stopping:
        due = int((time.monotonic() - start) * args.rate)
        while sent < due:
            message = {"p": args.index, "s": sequence, "t": time.time()}
            sock.send_multipart([channel, pack(message)])
            sequence, sent = sequence + 1, sent + 1
        state.write_text(json.dumps({"next": sequence, "runs": runs}))
        time.sleep(0.01)
    state.write_text(json.dumps({"next": sequence, "runs": runs}))
    sock.close()
    return 0


def run_query(args: argparse.Namespace) -> int:
    """The query under test, until SIGTERM."""
    from spark_zmq.spark.session import loopback_session

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    spark = loopback_session("soak", {"spark.sql.session.timeZone": "UTC"}, log_level="ERROR")
    query = (
        spark.readStream.format("ebus")
        .options(**capture_options(args.sub_port), capture=args.capture, spoolPath=args.spool)
        .load()
        .select("partition", "offset", "channel", "data", "error", "received_at")
        .writeStream.format("parquet")
        .option("path", args.sink)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )
    while query.isActive and not stopping:  # a py4j call would not see the signal
        time.sleep(0.2)
    failure = query.exception()
    query.stop()
    spark.stop()
    if failure is not None:
        print(f"query failed: {failure}", file=sys.stderr, flush=True)
    return 1 if failure is not None else 0


def capture_options(sub_port: int) -> dict[str, str]:
    """The reader options of the soak's capture, whoever captures: the query or the service."""
    return {
        "subPort": str(sub_port),
        "channels": CHANNEL,
        "leaseTimeout": "3",
        "captureIdleTimeout": "30",
    }


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Run:
    """The processes of one soak run and what was measured on the way."""

    folder: Path
    publishers: int
    rate: float
    capture: str
    pub_port: int = 0
    sub_port: int = 0
    frontend_port: int = 0
    backend_port: int = 0
    broker: subprocess.Popen | None = None
    query: subprocess.Popen | None = None
    #: the capture service (``capture=service`` only)
    service: subprocess.Popen | None = None
    senders: dict[int, subprocess.Popen] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    #: restarts of peers, in epoch seconds
    peer_windows: list[PeerWindow] = field(default_factory=list)
    peak_capture_rss: int = 0
    peak_query_rss: int = 0
    peak_spool: int = 0

    def part(self, *args: str) -> subprocess.Popen:
        log = open(self.folder / "parts.log", "ab")
        return subprocess.Popen(
            [sys.executable, str(HERE), *args], stdout=log, stderr=log, start_new_session=True
        )

    def start_broker(self) -> None:
        self.broker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "spark_zmq",
                "ebus",
                "broker",
                "--frontend-port",
                str(self.frontend_port),
                "--backend-port",
                str(self.backend_port),
                "--pub-port",
                str(self.pub_port),
                "--sub-port",
                str(self.sub_port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / "broker.log", "ab"),
            start_new_session=True,
        )

    def start_publisher(self, index: int) -> None:
        self.senders[index] = self.part(
            "publisher",
            "--index",
            str(index),
            "--pub-port",
            str(self.pub_port),
            "--rate",
            str(self.rate),
            "--state",
            str(self.folder / f"publisher-{index}.json"),
        )

    def start_service(self) -> None:
        """``spark-zmq capture`` on the soak's spool, with the query's capture options; it leads
        a process group of its own."""
        given = capture_options(self.sub_port)
        options = [f"--option={name}={value}" for name, value in given.items()]
        self.service = subprocess.Popen(
            [sys.executable, "-m", "spark_zmq", "capture", "--format", "ebus", *options]
            + ["--spool", str(self.spool), "--progress-every", "10"],
            stdout=open(self.folder / "service.log", "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_query(self) -> None:
        self.query = self.part(
            "query",
            "--sub-port",
            str(self.sub_port),
            "--spool",
            str(self.spool),
            "--checkpoint",
            str(self.folder / "checkpoint"),
            "--sink",
            str(self.sink),
            "--capture",
            self.capture,
        )

    @property
    def spool(self) -> Path:
        return self.folder / "spool"

    @property
    def sink(self) -> Path:
        return self.folder / "table"

    def kinds(self) -> list[str]:
        """The faults that apply to this run's placement, in the order they are injected."""
        return [kind for kind, placements in FAULTS.items() if self.capture in placements]

    def faults_to_come(self) -> bool:
        """True while a fault of this placement has come fewer times than it must."""
        return any(self.faults.get(k, 0) < FAULTS_AT_LEAST.get(k, 1) for k in self.kinds())

    def inject(self, fault: str, rng: random.Random) -> str:
        """Inject one fault of ``FAULTS``; what was done."""
        self.faults[fault] = self.faults.get(fault, 0) + 1
        began = time.time()
        if fault == "publisher":
            index = rng.randrange(self.publishers)
            stop(self.senders[index])
            self.start_publisher(index)
            self.peer_windows.append((index, began, time.time() + PEER_SETTLE))
            return f"publisher {index} restarted"
        if fault == "broker":
            stop(self.broker)
            self.start_broker()
            self.peer_windows.append((None, began, time.time() + PEER_SETTLE))
            return "broker restarted"
        if fault == "query":
            stop(self.query, timeout=60)
            self.start_query()
            return "query restarted from its checkpoint"
        if fault == "driver-kill":
            return self.kill_driver()
        if fault == "capture-service":
            return self.restart_service()
        holders = sorted(wait_for_capture(self, timeout=60) and running_holders())
        victim = rng.choice(holders)
        os.kill(victim, signal.SIGKILL)
        return f"capture process {victim} killed"

    def kill_driver(self) -> str:
        """SIGKILL the query's process group (it runs in a session of its own: the driver's
        Python, its JVM and the JVM's Python workers), then restart it on the same checkpoint
        and spool."""
        assert self.query is not None
        group = os.getpgid(self.query.pid)
        assert group == self.query.pid, "the query must lead a process group of its own"
        os.killpg(group, signal.SIGKILL)
        self.query.wait()
        wait_for_group_gone(group, timeout=30)
        self.start_query()
        return f"query's process group {group} killed (SIGKILL); restarted on its checkpoint"

    def restart_service(self) -> str:
        """Stop the capture service's process group, by SIGTERM (a clean stop) and by SIGKILL
        in turn, then start it again on the same spool."""
        assert self.service is not None
        group = os.getpgid(self.service.pid)
        assert group == self.service.pid, "the service must lead a process group of its own"
        how = signal.SIGKILL if self.faults["capture-service"] % 2 == 0 else signal.SIGTERM
        os.killpg(group, how)
        try:
            self.service.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(group, signal.SIGKILL)
            self.service.wait()
        wait_for_group_gone(group, timeout=30)
        self.start_service()
        return f"capture service's process group {group} stopped ({how.name}); restarted"

    def sample(self) -> None:
        holders = list(running_holders()) + ([self.service.pid] if self.service else [])
        self.peak_capture_rss = max([self.peak_capture_rss] + [rss_bytes(p) for p in holders])
        if self.query is not None:
            self.peak_query_rss = max(self.peak_query_rss, tree_rss_bytes(self.query.pid))
        self.peak_spool = max(self.peak_spool, folder_bytes(self.spool))

    def stop_all(self) -> None:
        for process in [*self.senders.values(), self.query, self.service, self.broker]:
            if process is not None:
                stop(process, timeout=60)


def wait_for_capture(run: Run, timeout: float) -> float:
    """The time at which capture runs: the spool holds a row, and with ``capture=executors``
    a capture process runs (after a query restart: the new one's)."""
    deadline = time.monotonic() + timeout
    while not capturing(run):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no capture within {timeout:.0f} s; see {run.folder}")
        run.sample()
        time.sleep(0.5)
    return time.monotonic()


def wait_for_spool_growth(run: Run, timeout: float) -> float:
    """The time at which the spool holds more rows than at the call: capture runs (after a
    restart, it wrote its downtime's gap row before that first message)."""
    from spark_zmq.spool.reader import read_snapshot

    def rows() -> int:
        return sum(state.end for state in read_snapshot(str(run.spool)).values())

    before, deadline = rows(), time.monotonic() + timeout
    while rows() <= before:
        if time.monotonic() > deadline:
            raise RuntimeError(f"capture did not resume within {timeout:.0f} s; see {run.folder}")
        run.sample()
        time.sleep(0.5)
    return time.monotonic()


def capturing(run: Run) -> bool:
    from spark_zmq.spool.reader import read_snapshot

    if run.capture == "executors" and not running_holders():
        return False
    return any(state.end > 0 for state in read_snapshot(str(run.spool)).values())


def wait_for_group_gone(group: int, timeout: float) -> None:
    """Until no process of ``group`` is left (the JVM's children die a moment after it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise RuntimeError(f"process group {group} still has processes {timeout:.0f} s after SIGKILL")


def stop(process: subprocess.Popen, timeout: float = 20) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def tree_rss_bytes(root: int) -> int:
    """RSS of a process and its descendants (the query: its JVM and Python workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2 :].split()[1]), []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss_bytes(pid)
        todo += children.get(pid, [])
    return total


def folder_bytes(folder: Path) -> int:
    total = 0
    for base, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(base, name))
            except OSError:
                pass
    return total


def drain(run: Run, timeout: float) -> bool:
    """Until Spark has committed a batch that ends at or after every offset the spool holds, and
    the spool held the same offsets at the check before: a holder that is still starting (after
    a kill, say) writes its gap row later, and a check between two writes would miss it.
    False if that did not happen within ``timeout`` (a query that stopped committing)."""
    from spark_zmq.spool.reader import read_snapshot

    deadline = time.monotonic() + timeout
    before: dict[str, int] = {}
    while time.monotonic() < deadline:
        run.sample()
        time.sleep(2)
        ends = {k: s.end for k, s in read_snapshot(str(run.spool)).items()}
        done = committed_offsets(run.folder / "checkpoint")
        if ends and ends == before and all(done.get(k, 0) >= end for k, end in ends.items()):
            return True
        before = ends
    print(f"  the spool did not drain within {timeout:.0f} s", flush=True)
    return False


def committed_offsets(checkpoint: Path) -> dict[str, int]:
    """The source's end offsets of the last batch in the checkpoint's commit log."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")]
    if not commits:
        return {}
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
    return StreamOffset.from_json(json.loads(lines[-1])).ends


@dataclass(frozen=True)
class Delivered:
    """One publisher's message as the table holds it."""

    sequence: int
    partition: str
    offset: int
    sent_at: float


@dataclass(frozen=True)
class GapRow:
    """A gap row: where it sits and the time span its text names (epoch seconds)."""

    offset: int
    since: float
    until: float
    timed: bool  # False: its text names no time (a damaged segment), it marks by offset only


@dataclass(frozen=True)
class Hole:
    """A run of one publisher's sequence numbers missing from the table, between its delivered
    messages ``before`` and ``after`` (None at the start or the end of its stream)."""

    publisher: int
    missing: int
    before: Delivered | None
    after: Delivered | None


def gap_row(offset: int, text: str, received_at: float) -> GapRow:
    """The time span of a gap row's text (see the module's docstring for the rule)."""
    times = [
        calendar.timegm(time.strptime(found[:19], "%Y-%m-%dT%H:%M:%S")) + int(found[20:23]) / 1000
        for found in GAP_TIME.findall(text)
    ]
    if not times:
        return GapRow(offset, received_at, received_at, timed=False)
    return GapRow(offset, times[0], times[1] if len(times) > 1 else received_at, timed=True)


def holes(delivered: dict[int, list[Delivered]], sent: dict[int, int]) -> Iterator[Hole]:
    """Every run of missing sequence numbers of every publisher."""
    for publisher, total in sent.items():
        messages = sorted(delivered.get(publisher, []), key=lambda m: m.sequence)
        bounds: list[Delivered | None] = [None, *messages, None]
        for before, after in itertools.pairwise(bounds):
            first = before.sequence + 1 if before else 0
            end = after.sequence if after else total
            if end > first:
                yield Hole(publisher, end - first, before, after)


@dataclass(frozen=True)
class Schedule:
    """When a publisher sent each sequence number: its runs (first sequence number, start in
    epoch seconds), each at ``rate``."""

    runs: list[tuple[int, float]]
    rate: float

    def sent_at(self, sequence: int) -> float:
        first, start = max((run for run in self.runs if run[0] <= sequence), default=(0, 0.0))
        return start + (sequence - first) / self.rate


def marked(hole: Hole, when: float, gaps: dict[str, list[GapRow]]) -> bool:
    """True if a gap row of the hole's partition marks its message sent at ``when``."""
    partitions = {m.partition for m in (hole.before, hole.after) if m is not None} or set(gaps)
    after_offset = hole.before.offset if hole.before else -1
    for partition in partitions:
        for gap in gaps.get(partition, []):
            if gap.offset <= after_offset:
                continue
            if gap.timed:
                if gap.since - MARK_SLACK <= when <= gap.until + MARK_SLACK:
                    return True
            elif hole.after is None or gap.offset < hole.after.offset:
                return True
    return False


def kind_of(
    hole: Hole, when: float, gaps: dict[str, list[GapRow]], windows: list[PeerWindow]
) -> str:
    """The kind of loss of the hole's message sent at ``when``: the first rule of the module's
    docstring that holds."""
    if marked(hole, when, gaps):
        return "marked"
    if hole.before is None and hole.after is not None:
        return "before first capture"
    if any(who in (None, hole.publisher) and begin <= when <= end for who, begin, end in windows):
        return "peer down"
    return "unmarked"


def classify(
    found: Iterator[Hole],
    schedules: dict[int, Schedule],
    gaps: dict[str, list[GapRow]],
    windows: list[PeerWindow],
) -> dict[str, int]:
    """Messages lost, by kind; each hole with unmarked messages is printed."""
    kinds = dict.fromkeys(("marked", "before first capture", "peer down", "unmarked"), 0)
    for hole in found:
        first = hole.before.sequence + 1 if hole.before else 0
        unmarked = []
        for sequence in range(first, first + hole.missing):
            when = schedules[hole.publisher].sent_at(sequence)
            kind = kind_of(hole, when, gaps, windows)
            kinds[kind] += 1
            if kind == "unmarked":
                unmarked.append(when)
        if unmarked:
            print(
                f"  unmarked: {len(unmarked)} of {describe(hole)}, due between "
                f"{clock(min(unmarked))} and {clock(max(unmarked))}",
                flush=True,
            )
    return kinds


def clock(when: float) -> str:
    return datetime.fromtimestamp(when, timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def describe(hole: Hole) -> str:
    def at(m: Delivered | None) -> str:
        if m is None:
            return "-"
        return f"s={m.sequence} sent {clock(m.sent_at)} at offset {m.offset}"

    return (
        f"publisher {hole.publisher}: {hole.missing} messages between "
        f"({at(hole.before)}) and ({at(hole.after)})"
    )


def count(run: Run, sent: dict[int, int], schedules: dict[int, Schedule]) -> dict[str, int]:
    """The figures, from the table (read by Spark: committed files only), the spool and the
    checkpoint. A row is lost after capture when its offset is below the partition's last
    committed end and the table lacks it; a row at or above that end is still in the spool,
    which the next run of the query delivers (a holder may write one after the drain, as the
    query stops). Messages missing from the table are counted by kind of loss (the module's
    docstring)."""
    from spark_zmq.spark.session import loopback_session
    from spark_zmq.spool.reader import read_snapshot

    spark = loopback_session("soak check", log_level="ERROR")
    try:
        rows = (
            spark.read.parquet(str(run.sink))
            .selectExpr(
                "partition", "offset", "data", "error", "unix_micros(received_at) AS received_us"
            )
            .collect()
        )
    finally:
        spark.stop()
    states = read_snapshot(str(run.spool))
    committed = committed_offsets(run.folder / "checkpoint")
    in_table: dict[str, set[int]] = {}
    for row in rows:
        in_table.setdefault(row.partition, set()).add(row.offset)
    lost = pending = 0
    for key, state in states.items():
        # a partition left out of the last commit holds nothing that was not committed before
        # (what it held below its start was committed, then truncated)
        covered = committed.get(key, state.start)
        lost += len(set(range(covered)) - in_table.get(key, set()))
        pending += max(0, state.end - covered)
    spooled = sum(state.end for state in states.values())
    delivered: dict[int, list[Delivered]] = {}
    sequences = []
    gaps: dict[str, list[GapRow]] = {}
    for row in rows:
        if row.error is None:
            message = json.loads(row.data)
            sequences.append((message["p"], message["s"]))
            delivered.setdefault(message["p"], []).append(
                Delivered(message["s"], row.partition, row.offset, message["t"])
            )
        elif row.error.startswith("gap:"):
            gaps.setdefault(row.partition, []).append(
                gap_row(row.offset, row.error, row.received_us / 1e6)
            )
    for messages in delivered.values():  # a duplicate is counted below, once is enough here
        messages[:] = list({m.sequence: m for m in messages}.values())
    unique = set(sequences)
    offsets = {(r.partition, r.offset) for r in rows}
    losses = classify(holes(delivered, sent), schedules, gaps, run.peer_windows)
    total_sent = sum(sent.values())
    return {
        "sent": total_sent,
        "captured": spooled - pending - sum(map(len, gaps.values())),
        "delivered": len(unique),
        "duplicated": (len(sequences) - len(unique)) + (len(rows) - len(offsets)),
        "lost before the first capture (expected)": losses["before first capture"],
        "lost while a peer was down (expected)": losses["peer down"],
        "lost while capture was down, marked": losses["marked"],
        "lost, unmarked": losses["unmarked"],
        "lost after capture": lost,
        "left in the spool (next run delivers)": pending,
        "gap rows": sum(map(len, gaps.values())),
    }


def soak(args: argparse.Namespace) -> dict:
    """Run the soak; its result: the figures (counts), the faults injected, peaks, wall time."""
    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="soak-"))
    run = Run(folder, args.publishers, args.rate, args.capture, *(free_port() for _ in range(4)))
    kinds = run.kinds()
    print(
        f"soak: {args.minutes:g} min, {args.publishers} publishers x {args.rate:g} msg/s, "
        f"capture={args.capture}, a fault every {args.fault_every:g} s in turn: "
        f"{', '.join(kinds)} (seed {args.seed}); logs in {folder}",
        flush=True,
    )
    started = time.monotonic()
    try:
        run.start_broker()
        if args.capture == "service":
            run.start_service()
        run.start_query()
        for index in range(args.publishers):
            run.start_publisher(index)
        ready = wait_for_capture(run, timeout=180)
        print(f"  {ready - started:6.1f} s  capture running; faults begin", flush=True)
        end = ready + args.minutes * 60
        next_fault, turn = ready + args.fault_every, 0
        # past the end while a kind of fault is still to come (a slow restart delays the rest)
        while time.monotonic() < end or (run.faults_to_come() and time.monotonic() < end + 120):
            run.sample()
            if time.monotonic() >= next_fault:
                what = run.inject(kinds[turn % len(kinds)], rng)
                print(f"  {time.monotonic() - started:6.1f} s  {what}", flush=True)
                turn += 1
                next_fault += args.fault_every
            time.sleep(0.5)
        resumed = wait_for_spool_growth(run, timeout=120)
        print(f"  {resumed - started:6.1f} s  capture running after the last fault", flush=True)
        for process in run.senders.values():
            stop(process)
        states = [
            json.loads((folder / f"publisher-{i}.json").read_text()) for i in range(args.publishers)
        ]
        sent = {i: state["next"] for i, state in enumerate(states)}
        schedules = {
            i: Schedule([(first, start) for first, start in state["runs"]], args.rate)
            for i, state in enumerate(states)
        }
        print("  publishers stopped; draining the spool into the table", flush=True)
        drained = drain(run, timeout=180)
        run.sample()
    finally:
        run.stop_all()
    return {
        "figures": count(run, sent, schedules),
        "capture": args.capture,
        "faults": dict.fromkeys(kinds, 0) | run.faults,
        "peak_capture_rss": run.peak_capture_rss,
        "peak_query_rss": run.peak_query_rss,
        "peak_spool": run.peak_spool,
        "seconds": time.monotonic() - started,
        "drained": drained,
    }


def report(result: dict) -> bool:
    """Print the result; True if nothing was duplicated, nothing lost after capture, nothing
    lost unmarked, and the query committed everything the spool held before it was stopped."""
    figures = result["figures"]
    mib = 2**20
    lines = [(name, f"{value:>10,}") for name, value in figures.items()]
    lines += [
        ("faults injected", ", ".join(f"{k} {v}" for k, v in result["faults"].items())),
        ("peak RSS of a capture process", f"{result['peak_capture_rss'] / mib:>10.0f} MiB"),
        ("peak RSS of the query (JVM + Python)", f"{result['peak_query_rss'] / mib:>10.0f} MiB"),
        ("peak spool size", f"{result['peak_spool'] / mib:>10.1f} MiB"),
        ("wall time", f"{result['seconds']:>10.0f} s"),
    ]
    print("\n== soak result ==")
    for name, value in lines:
        print(f"  {name:<40} {value}")
    wrong = [
        name
        for name in ("duplicated", "lost after capture", "lost, unmarked")
        if figures[name] != 0
    ]
    if not result["drained"]:
        print("FAIL: the query did not commit what the spool held within the drain's bound")
        return False
    if wrong:
        print(f"FAIL: {', '.join(wrong)} must be 0")
        return False
    print("PASS: nothing duplicated, nothing lost after capture, every loss marked or expected")
    return True


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parts = parser.add_subparsers(dest="part")
    publisher = parts.add_parser("publisher")
    publisher.add_argument("--index", type=int, required=True)
    publisher.add_argument("--pub-port", type=int, required=True)
    publisher.add_argument("--rate", type=float, required=True)
    publisher.add_argument("--state", required=True)
    query = parts.add_parser("query")
    for name in ("--spool", "--checkpoint", "--sink"):
        query.add_argument(name, required=True)
    query.add_argument("--sub-port", type=int, required=True)
    query.add_argument("--capture", choices=PLACEMENTS, required=True)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long (default 10)")
    parser.add_argument(
        "--short", action="store_true", help="the CI version: 1 minute, a fault every 8 s"
    )
    parser.add_argument(
        "--rate", type=float, default=200.0, help="messages per second per publisher (default 200)"
    )
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--fault-every", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--capture",
        choices=PLACEMENTS,
        default="executors",
        help="the query's capture placement (default executors)",
    )
    parser.add_argument("--result", metavar="PATH", help="also write the result as JSON there")
    args = parser.parse_args(argv)
    if args.short:
        args.minutes, args.fault_every = 1.0, 8.0
    return args


def main() -> int:
    args = parse_args(sys.argv[1:])
    if args.part == "publisher":
        return run_publisher(args)
    if args.part == "query":
        return run_query(args)
    ensure_private_network(__file__)
    result = soak(args)
    if args.result:
        Path(args.result).write_text(json.dumps(result, indent=1))
    return 0 if report(result) else 1


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
