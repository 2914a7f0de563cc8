"""How fast does ``writeStream.format("zeroeq")`` get events to a subscriber, compared with a bare
pyzmq XPUB publisher sending the same messages?

Measured side by side in one run, on loopback only, in rounds. Each round measures both, one
right after the other, so a round's ratio compares like with like on a shared, noisy machine
(the ratios matter more than the absolute rates):

1. bare: a separate process binds an XPUB (the writer's send high-water mark, XPUB_NODROP),
   waits until the subscriber has subscribed, then sends N prebuilt ZeroEQ messages as fast as
   it can. That is the ceiling libzmq, loopback TCP and the receiver set on this machine.
2. writer: a Spark query reads the same N rows (``event``, ``payload``) from Parquet and writes
   them with ``format("zeroeq")``, trigger ``availableNow``. Each Python worker's publisher
   announces itself over ZeroConf, the subscriber discovers it and subscribes, and the task
   (``waitForSubscribers``) sends.

The messages are the same in both: frame 1 is the 16-byte event id, frame 2 a 100-byte payload
that starts with an 8-byte big-endian sequence number. The same subscriber code receives both,
in its own process with its own zmq context, by default with the compiled capture core's receive
loop (``--receiver native``: a Python loop per message was the slower side of the comparison).
It uses ZeroConf discovery for the writer and the bare publisher's port directly. It counts every
sequence number, so it can tell whether each message arrived exactly once, and it times the
first to the last message: the rates are taken there, at the receiver. For the writer, the run
also times the whole query, from ``start()`` to its termination, and splits that into start-up
(until the first message arrives), streaming and the end of the batch (after the last message).

Run it as ``python benchmarks/zeroeq_write_rate.py [--quick] [--rows N] [--partitions 2]``. It
re-executes itself through ``scripts/netns.sh``, so every socket lives in a private network
namespace that holds only ``lo``, and it uses only 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import multiprocessing
import multiprocessing.connection
import os
import platform
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from children import Child, report_errors
from hermetic import ensure_private_network

from spark_zmq.protocols.zeroeq import MEERKAT, PUBLISHER_SERVICE, Record, event_id, make_zeroconf
from spark_zmq.spark.session import LOOPBACK

EVENT = "bench::Write"
WIRE_ID = event_id(EVENT)
PAYLOAD_BYTES = 100
SEQUENCE = struct.Struct(">Q")
INPUT_SCHEMA = "event STRING, payload BINARY"
#: the writer's default sendHighWaterMark, set explicitly on both sides
SEND_HWM = 100_000
WAIT_FOR_SUBSCRIBERS = 60.0
#: a receiver that has seen messages and then nothing for this long stops waiting
IDLE_SECONDS = 10.0
POLL_MS = 100
#: messages between two looks for newly discovered publishers in the receive loop
CHECK_EVERY = 1024
CHILD_START_TIMEOUT = 60.0
#: longest a bare publisher keeps its socket open after sending, waiting to be released
RELEASE_TIMEOUT = 600.0
#: one file per Spark partition: no file is split, no two files share a partition
SPARK_CONF = {
    "spark.sql.files.maxPartitionBytes": str(1 << 30),
    "spark.sql.files.openCostInBytes": str(1 << 30),
}


# -- messages -------------------------------------------------------------------------------------


def payloads(start: int, stop: int) -> list[bytes]:
    """Payloads of sequence numbers ``start`` to ``stop - 1``: the number, then zero padding."""
    padding = bytes(PAYLOAD_BYTES - SEQUENCE.size)
    pack = SEQUENCE.pack
    return [pack(sequence) + padding for sequence in range(start, stop)]


def write_input(folder: Path, rows: int, files: int) -> Path:
    """``rows`` rows in ``files`` Parquet files of contiguous sequence numbers, one row group
    each (so one Spark partition each, with ``SPARK_CONF``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    bounds = [rows * index // files for index in range(files + 1)]
    for index, (start, stop) in enumerate(itertools.pairwise(bounds)):
        table = pa.table(
            {
                "event": pa.array([EVENT] * (stop - start), pa.string()),
                "payload": pa.array(payloads(start, stop), pa.binary()),
            }
        )
        pq.write_table(
            table, folder / f"part-{index:03d}.parquet", row_group_size=max(1, stop - start)
        )
    return folder


# -- the subscriber -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reception:
    """What the subscriber saw. ``first`` and ``last`` are ``time.monotonic()`` readings (the
    system-wide CLOCK_MONOTONIC, comparable with the parent's), 0 when nothing arrived."""

    expected: int
    unique: int
    duplicates: int
    foreign: int
    first_missing: int | None
    first: float
    last: float
    publishers: int

    @property
    def received(self) -> int:
        return self.unique + self.duplicates + self.foreign

    @property
    def seconds(self) -> float:
        return self.last - self.first

    @property
    def rate(self) -> float:
        return self.received / self.seconds if self.seconds > 0 else 0.0

    @property
    def exactly_once(self) -> bool:
        return self.unique == self.expected and not self.duplicates and not self.foreign

    def problems(self) -> str:
        if self.exactly_once:
            return ""
        missing = self.expected - self.unique
        first = f" (first: #{self.first_missing})" if self.first_missing is not None else ""
        return (
            f"{missing:,} missing{first}, {self.duplicates:,} duplicated, "
            f"{self.foreign:,} not benchmark messages"
        )


class PublisherFinder:
    """Browses ``_zeroeq_pub._tcp`` on 127.0.0.1 and collects the addresses of the publishers
    of one session, in the order found. ``found`` only grows, and only ZeroConf's one handler
    thread appends to it, so the receive loop reads it without a lock."""

    def __init__(self, session: str) -> None:
        from zeroconf import ServiceBrowser

        self.session = session
        self.found: list[str] = []
        self._zeroconf = make_zeroconf((LOOPBACK,))
        self._browser = ServiceBrowser(
            self._zeroconf, PUBLISHER_SERVICE, handlers=[self._on_change]
        )

    def _on_change(self, zeroconf: Any, service_type: str, name: str, state_change: Any) -> None:
        from zeroconf import ServiceStateChange

        if state_change is ServiceStateChange.Removed:
            return
        info = zeroconf.get_service_info(service_type, name, timeout=3000)
        if info is None:
            return
        record = Record.parse(name, info.properties)
        address = f"tcp://{record.instance_name}"
        if record.session == self.session and address not in self.found:
            self.found.append(address)

    def close(self) -> None:
        self._browser.cancel()
        self._zeroconf.close()


def subscriber_socket(context: zmq.Context) -> zmq.Socket:
    """A SUB as a ZeroEQ 0.9 subscriber: the event's 16-byte id and Meerkat; receive
    high-water mark 0, as the package's capture uses."""
    sock = context.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, POLL_MS)
    for topic in (WIRE_ID, event_id(MEERKAT)):
        sock.setsockopt(zmq.SUBSCRIBE, topic)
    return sock


def connect_new(sock: zmq.Socket, finder: PublisherFinder | None, connected: list[str]) -> None:
    if finder is not None:
        for address in finder.found[len(connected) :]:
            sock.connect(address)
            connected.append(address)


def receive(
    sock: zmq.Socket,
    count: int,
    timeout: float,
    finder: PublisherFinder | None,
    connected: list[str],
) -> Reception:
    """Receive until every sequence number below ``count`` arrived, the stream went idle for
    ``IDLE_SECONDS`` after a first message, or ``timeout``; connect to publishers as found."""
    seen = bytearray(count)
    unique = duplicates = foreign = received = 0
    first = last = 0.0
    recv, unpack, again = sock.recv_multipart, SEQUENCE.unpack_from, zmq.Again
    clock = time.monotonic
    deadline = clock() + timeout
    while unique < count:
        if not received % CHECK_EVERY:
            connect_new(sock, finder, connected)
        try:
            frames = recv()
        except again:
            now = clock()
            if now > deadline or (received and now - last > IDLE_SECONDS):
                break
            connect_new(sock, finder, connected)
            continue
        last = clock()
        first = first or last
        received += 1
        if len(frames) != 2 or len(frames[1]) < SEQUENCE.size:
            foreign += 1
            continue
        sequence = unpack(frames[1])[0]
        if sequence >= count:
            foreign += 1
        elif seen[sequence]:
            duplicates += 1
        else:
            seen[sequence] = 1
            unique += 1
    first_missing = seen.find(0) if unique < count else None
    return Reception(count, unique, duplicates, foreign, first_missing, first, last, len(connected))


def receive_native(
    sock: zmq.Socket,
    count: int,
    timeout: float,
    finder: PublisherFinder | None,
    connected: list[str],
) -> Reception:
    """``receive`` through the compiled capture core: bursts of up to 1024 messages taken in C
    into one buffer, the sequence numbers counted at the end with numpy, so that the receiver
    is not the slower side of the comparison."""
    from spark_zmq.capture.cores import native_module

    native = native_module()
    unbounded = 1 << 62
    buffer = native.NativeBuffer(unbounded, unbounded, 1024, unbounded)
    address = sock.underlying
    first = last = 0.0
    clock = time.monotonic
    deadline = clock() + timeout
    while len(buffer) < count:
        connect_new(sock, finder, connected)
        taken, _ = native.receive(buffer, address)
        if taken:
            last = clock()
            first = first or last
            continue
        now = clock()
        if now > deadline or (first and now - last > IDLE_SECONDS):
            break
        sock.poll(POLL_MS)
    return reception_of(buffer.table(), count, first, last, len(connected))


def reception_of(table: Any, count: int, first: float, last: float, publishers: int) -> Reception:
    """The ``Reception`` of spooled rows: two frames each, the second starting with the
    sequence number."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    frames = table.column("frames").combine_chunks()
    two = np.asarray(frames.value_lengths().fill_null(0)) == 2
    starts = np.asarray(frames.offsets)[:-1]
    payload = frames.values.take(pa.array(starts[two] + 1))
    long_enough = np.asarray(pc.binary_length(payload)) >= SEQUENCE.size
    offsets = np.frombuffer(payload.buffers()[1], dtype=np.int32)[: len(payload)]
    data = np.frombuffer(payload.buffers()[2], dtype=np.uint8)
    heads = data[offsets[long_enough][:, None] + np.arange(SEQUENCE.size)]
    sequences = heads.view(">u8").ravel().astype(np.int64)
    inside = sequences < count
    foreign = int((~two).sum() + (~long_enough).sum() + (~inside).sum())
    seen = np.bincount(sequences[inside], minlength=count)
    unique = int((seen > 0).sum())
    duplicates = int(np.clip(seen - 1, 0, None).sum())
    first_missing = int(np.argmin(seen > 0)) if unique < count else None
    return Reception(count, unique, duplicates, foreign, first_missing, first, last, publishers)


def subscriber_main(
    session: str | None,
    endpoints: tuple[str, ...],
    count: int,
    timeout: float,
    native: bool,
    conn: multiprocessing.connection.Connection,
) -> None:
    """Subscribe to ``endpoints``, or to every publisher of ``session`` found over ZeroConf,
    report ``ready``, receive ``count`` messages (with the compiled core's receive loop if
    ``native``) and report the ``Reception``."""

    def body() -> None:
        context = zmq.Context()
        sock = subscriber_socket(context)
        finder = PublisherFinder(session) if session is not None else None
        connected = list(endpoints)
        try:
            for address in endpoints:
                sock.connect(address)
            conn.send(("ready", None))
            loop = receive_native if native else receive
            conn.send(("received", loop(sock, count, timeout, finder, connected)))
        finally:
            if finder is not None:
                finder.close()
            sock.close()
            context.term()

    report_errors(conn, body)


# -- the bare publisher ---------------------------------------------------------------------------


def wait_for_subscription(sock: zmq.Socket, topic: bytes, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sock.poll(POLL_MS) and sock.recv() == b"\x01" + topic:
            return
    raise TimeoutError(f"no subscriber within {timeout:.0f} s")


def bare_publisher_main(
    count: int, send_hwm: int, conn: multiprocessing.connection.Connection
) -> None:
    """Build ``count`` messages, bind an XPUB on a random loopback port and report it, wait for
    the subscription, send everything (blocking on back-pressure), report the send's start and
    end, and keep the socket open until released so nothing queued is lost at close."""

    def body() -> None:
        messages = [[WIRE_ID, payload] for payload in payloads(0, count)]
        context = zmq.Context()
        sock = context.socket(zmq.XPUB)
        sock.setsockopt(zmq.SNDHWM, send_hwm)
        sock.setsockopt(zmq.XPUB_NODROP, 1)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            conn.send(("port", sock.bind_to_random_port(f"tcp://{LOOPBACK}")))
            wait_for_subscription(sock, WIRE_ID, CHILD_START_TIMEOUT)
            send, started = sock.send_multipart, time.monotonic()
            for message in messages:
                send(message)
            conn.send(("sent", (started, time.monotonic())))
            conn.poll(RELEASE_TIMEOUT)
        finally:
            sock.close()
            context.term()

    report_errors(conn, body)


# -- one round ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BareRun:
    reception: Reception | None
    send_seconds: float = 0.0
    error: str = ""


@dataclass(frozen=True)
class WriterRun:
    """A writer query; ``started`` and ``ended`` are ``time.monotonic()`` around ``start()``
    and the query's termination."""

    reception: Reception | None
    started: float = 0.0
    ended: float = 0.0
    error: str = ""

    @property
    def wall(self) -> float:
        return self.ended - self.started

    def phases(self) -> tuple[float, float, float] | None:
        """Seconds from ``start()`` to the first message, first to last, last to the end."""
        got = self.reception
        if got is None or not got.first:
            return None
        return got.first - self.started, got.seconds, self.ended - got.last


@dataclass(frozen=True)
class Round:
    bare: BareRun
    writer: WriterRun

    @property
    def ratio(self) -> float | None:
        bare, writer = self.bare.reception, self.writer.reception
        if bare is None or writer is None or not bare.rate:
            return None
        return writer.rate / bare.rate


def receive_timeout(rows: int) -> float:
    """How long a subscriber waits for everything: generous, a failure is not a hang."""
    return WAIT_FOR_SUBSCRIBERS + 60.0 + rows / 2_000


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def run_bare(context: Any, rows: int, native: bool) -> BareRun:
    """The bare XPUB process -> the subscriber process, connected to its port directly."""
    publisher = Child(context, bare_publisher_main, rows, SEND_HWM)
    subscriber = None
    try:
        port = publisher.expect("port", CHILD_START_TIMEOUT)
        subscriber = Child(
            context,
            subscriber_main,
            None,
            (f"tcp://{LOOPBACK}:{port}",),
            rows,
            receive_timeout(rows),
            native,
        )
        subscriber.expect("ready", CHILD_START_TIMEOUT)
        started, ended = publisher.expect("sent", receive_timeout(rows))
        return BareRun(subscriber.expect("received", receive_timeout(rows)), ended - started)
    except (RuntimeError, TimeoutError) as exc:
        return BareRun(None, error=first_line(exc))
    finally:
        publisher.stop()
        if subscriber is not None:
            subscriber.stop()


def start_writer(spark: Any, input_dir: Path, checkpoint: Path, session: str) -> Any:
    return (
        spark.readStream.schema(INPUT_SCHEMA)
        .parquet(str(input_dir))
        .writeStream.format("zeroeq")
        .option("session", session)
        .option("waitForSubscribers", str(WAIT_FOR_SUBSCRIBERS))
        .option("sendHighWaterMark", str(SEND_HWM))
        .option("discoveryInterfaces", LOOPBACK)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def run_writer(
    spark: Any,
    context: Any,
    input_dir: Path,
    checkpoint: Path,
    rows: int,
    session: str,
    native: bool,
) -> WriterRun:
    """Parquet -> ``format("zeroeq")`` -> the subscriber process, which finds the publishers of
    ``session`` over ZeroConf. The subscriber is browsing before the query starts, so its own
    start-up is not in the query's wall time."""
    subscriber = Child(context, subscriber_main, session, (), rows, receive_timeout(rows), native)
    query = None
    try:
        subscriber.expect("ready", CHILD_START_TIMEOUT)
        started = time.monotonic()
        query = start_writer(spark, input_dir, checkpoint, session)
        finished = query.awaitTermination(receive_timeout(rows) + 60.0)
        ended = time.monotonic()
        reception = subscriber.expect("received", receive_timeout(rows))
        error = "" if finished else "the query did not finish in time"
        return WriterRun(reception, started, ended, error)
    except Exception as exc:  # a failed query is a result of the round, not a crash of the run
        return WriterRun(None, error=first_line(exc))
    finally:
        if query is not None:
            with contextlib.suppress(Exception):
                query.stop()
        subscriber.stop()


# -- report ---------------------------------------------------------------------------------------


def print_header(args: argparse.Namespace) -> None:
    import pyarrow
    import pyspark

    commit = subprocess.run(
        ["git", "-C", str(Path(__file__).parent), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print("zeroeq_write_rate benchmark: Spark zeroeq writer vs bare pyzmq XPUB")
    print(f"  command  : {shlex.join([sys.executable, *sys.argv])}")
    print(f"  when     : {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}")
    print(
        f"  machine  : {len(os.sched_getaffinity(0))} cores usable of {os.cpu_count()} "
        f"({platform.machine()}, {platform.platform()})"
    )
    print(f"  python   : {platform.python_version()}")
    print(
        f"  versions : pyspark {pyspark.__version__}, pyzmq {zmq.pyzmq_version()} "
        f"(libzmq {zmq.zmq_version()}), pyarrow {pyarrow.__version__}"
    )
    print(
        f"  network  : private namespace, interfaces "
        f"{', '.join(name for _, name in socket.if_nameindex())}; {LOOPBACK} only"
    )
    print(
        f"  settings : {args.rows:,} messages of 16 + {PAYLOAD_BYTES} bytes, "
        f"{args.partitions} input partition(s), {args.rounds} round(s) after a "
        f"{args.warmup_rows:,}-row warm-up query; SNDHWM {SEND_HWM:,} + XPUB_NODROP on both "
        f"sides, subscriber RCVHWM 0, its receive loop {args.receiver}"
    )
    print(flush=True)


def rate_cell(reception: Reception | None, width: int) -> str:
    return f"{reception.rate:>{width},.0f}" if reception else f"{'failed':>{width}}"


def once_cell(reception: Reception | None) -> str:
    if reception is None:
        return "-"
    return "yes" if reception.exactly_once else "NO"


def phases_cell(run: WriterRun) -> str:
    phases = run.phases()
    if phases is None:
        return "-"
    return " / ".join(f"{value:.2f}" for value in phases)


TABLE_HEADER = (
    f"{'round':<7}{'bare msg/s':>12}{'writer msg/s':>14}{'writer/bare':>13}  "
    f"{'bare once':<10}{'writer once':<12}{'writer wall s':>14}  "
    f"start-up / stream / end s"
)


def round_row(label: str, result: Round) -> str:
    ratio = f"{result.ratio:>13.2f}" if result.ratio is not None else f"{'-':>13}"
    wall = f"{result.writer.wall:>14.2f}" if result.writer.reception else f"{'-':>14}"
    return (
        f"{label:<7}{rate_cell(result.bare.reception, 12)}"
        f"{rate_cell(result.writer.reception, 14)}{ratio}  "
        f"{once_cell(result.bare.reception):<10}{once_cell(result.writer.reception):<12}"
        f"{wall}  {phases_cell(result.writer)}"
    )


def median_row(rounds: Sequence[Round]) -> str:
    def median(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    bare = median([r.bare.reception.rate for r in rounds if r.bare.reception])
    writer = median([r.writer.reception.rate for r in rounds if r.writer.reception])
    ratio = median([r.ratio for r in rounds if r.ratio is not None])
    wall = median([r.writer.wall for r in rounds if r.writer.reception])
    cells = [
        f"{bare:>12,.0f}" if bare else f"{'-':>12}",
        f"{writer:>14,.0f}" if writer else f"{'-':>14}",
        f"{ratio:>13.2f}" if ratio is not None else f"{'-':>13}",
    ]
    wall_cell = f"{wall:>14.2f}" if wall is not None else f"{'-':>14}"
    once = [
        all(r.bare.reception and r.bare.reception.exactly_once for r in rounds),
        all(r.writer.reception and r.writer.reception.exactly_once for r in rounds),
    ]
    verdicts = ["all yes" if ok else "NOT all" for ok in once]
    return f"{'median':<7}{''.join(cells)}  {verdicts[0]:<10}{verdicts[1]:<12}{wall_cell}"


def round_notes(index: int, result: Round, partitions: int) -> list[str]:
    """Errors, losses, and publishers the writer's subscriber found other than expected."""
    notes = []
    for side, run in (("bare", result.bare), ("writer", result.writer)):
        if run.error:
            notes.append(f"round {index} {side}: {run.error}")
        if run.reception is not None and not run.reception.exactly_once:
            notes.append(f"round {index} {side}: {run.reception.problems()}")
    writer = result.writer.reception
    if writer is not None and writer.publishers != partitions:
        notes.append(
            f"round {index} writer: the subscriber connected to {writer.publishers} "
            f"publishers, expected {partitions} (one per partition)"
        )
    return notes


def print_report(rounds: Sequence[Round], partitions: int) -> None:
    print("\n== results (rates at the receiver, first to last message) ==")
    print(TABLE_HEADER)
    for index, result in enumerate(rounds, 1):
        print(round_row(str(index), result))
    print(median_row(rounds))
    sends = [r.bare for r in rounds if r.bare.reception and r.bare.send_seconds > 0]
    if sends:
        rates = [r.reception.expected / r.send_seconds for r in sends if r.reception]
        print(
            f"\nbare publisher's own send loop: median {statistics.median(rates):,.0f} msg/s "
            f"(prebuilt messages; the receiver, at its rate above, is the slower side when "
            f"this is higher)"
        )
    print(
        "writer wall: start() -> query terminated; start-up = start() -> first message "
        "received (batch planning, Python worker, publisher + ZeroConf announcement, "
        "discovery, subscription), end = last message -> query terminated (commit, "
        "availableNow check)"
    )
    if any(phases[2] < 0 for phases in (r.writer.phases() for r in rounds) if phases):
        print(
            "a negative end: the query had finished before the last message arrived; the "
            "tasks had handed everything to zmq, and the rest was still queued (up to the "
            "send high-water mark per subscriber) on its way to the subscriber"
        )
    if partitions > 1:
        print(
            f"note: the writer ran {partitions} publishers (one per partition) into one "
            f"subscriber; the bare side always runs one publisher"
        )
    notes = [
        note
        for index, result in enumerate(rounds, 1)
        for note in round_notes(index, result, partitions)
    ]
    for note in notes:
        print(f"NOTE: {note}")


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="20,000 rows and one round: a smoke run"
    )
    parser.add_argument("--rows", type=int, help="messages per run (default 200,000; quick 20,000)")
    parser.add_argument(
        "--partitions",
        type=int,
        default=1,
        help="input partitions, i.e. writer tasks and publishers (default 1)",
    )
    parser.add_argument("--rounds", type=int, help="rounds of bare + writer (default 3; quick 1)")
    parser.add_argument(
        "--receiver",
        choices=("native", "python"),
        default="native",
        help="the subscriber's receive loop: the compiled capture core's (default), so that "
        "the senders are compared, or recv_multipart per message (earlier runs)",
    )
    args = parser.parse_args(argv)
    args.rows = args.rows or (20_000 if args.quick else 200_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.warmup_rows = min(args.rows, 10_000)
    if args.rows < args.partitions or args.partitions < 1 or args.rounds < 1:
        parser.error("--partitions and --rounds must be >= 1, and --rows >= --partitions")
    return args


def start_spark() -> Any:
    """A local[2] session on loopback, quiet; workers log warnings only."""
    os.environ.setdefault("SPARK_ZMQ_LOG_LEVEL", "WARNING")
    from spark_zmq.spark.session import loopback_session

    return loopback_session("zeroeq_write_rate benchmark", SPARK_CONF, log_level="ERROR")


def planned_partitions(spark: Any, input_dir: Path) -> int:
    return spark.read.schema(INPUT_SCHEMA).parquet(str(input_dir)).rdd.getNumPartitions()


def run_rounds(spark: Any, context: Any, workdir: Path, args: argparse.Namespace) -> list[Round]:
    """A warm-up query (JVM JIT, Python worker, imports: not counted), then the rounds."""
    run_id = f"{os.getpid()}-{int(time.time())}"
    warmup_dir = write_input(workdir / "warmup", args.warmup_rows, args.partitions)
    warm = run_writer(
        spark,
        context,
        warmup_dir,
        workdir / "checkpoint-warmup",
        args.warmup_rows,
        f"bench-write-{run_id}-warmup",
        args.receiver == "native",
    )
    print(
        f"warm-up query: {warm.wall:.2f} s{' (' + warm.error + ')' if warm.error else ''}",
        flush=True,
    )
    input_dir = write_input(workdir / "input", args.rows, args.partitions)
    print(
        f"Spark plans {planned_partitions(spark, input_dir)} partition(s) for the input", flush=True
    )
    print(TABLE_HEADER, flush=True)
    rounds = []
    for index in range(1, args.rounds + 1):
        native = args.receiver == "native"
        bare = run_bare(context, args.rows, native)
        writer = run_writer(
            spark,
            context,
            input_dir,
            workdir / f"checkpoint-{index}",
            args.rows,
            f"bench-write-{run_id}-{index}",
            native,
        )
        rounds.append(Round(bare, writer))
        print(f"  {round_row(str(index), rounds[-1])}", flush=True)
    return rounds


def main() -> int:
    args = parse_args(sys.argv[1:])
    ensure_private_network(__file__)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    print_header(args)
    began = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="zeroeq_write_rate-"))
    context = multiprocessing.get_context("spawn")
    spark = None
    try:
        spark = start_spark()
        print(f"Spark session ready after {time.monotonic() - began:.1f} s", flush=True)
        rounds = run_rounds(spark, context, workdir, args)
        print_report(rounds, args.partitions)
    finally:
        if spark is not None:
            spark.stop()
        for child in multiprocessing.active_children():  # only if a round was interrupted
            child.terminate()
            child.join(5.0)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\ntotal time {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
