"""How fast does ``writeStream.format("zeroeq")`` get events to a subscriber, with each of the
writer's send loops, compared with a bare pyzmq XPUB publisher sending the same messages?

Measured side by side in one run, on loopback only, in rounds. Each round measures every side,
one right after the other (the writers' order alternates from round to round), so a round's
ratios compare like with like on a shared, noisy machine (the ratios matter more than the
absolute rates):

1. bare: a separate process binds an XPUB (the writer's send high-water mark, XPUB_NODROP),
   waits until the subscriber has subscribed, then sends N prebuilt ZeroEQ messages as fast as
   it can with ``send_multipart``. That is what a hand-written Python loop achieves.
2. spark <core>: a Spark query reads the same N rows (``event``, ``payload``) from Parquet and
   writes them with ``format("zeroeq")``, trigger ``availableNow``, with the option
   ``sendCore`` = ``native`` (the compiled send loop) or ``python`` (``--send-cores``). Each
   Python worker's publisher announces itself over ZeroConf, the subscriber discovers it and
   subscribes, and the task (``waitForSubscribers``) sends.
3. alone <core>: the writer without Spark: a separate process reads the same Parquet file into
   Arrow batches of 10,000 rows (Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch``) and
   hands them to the generic writer's ``write``, as a Spark task does. What the writer's own
   code costs per message, apart from the JVM's; it also reports the writer process's CPU time
   and the time the encoding alone takes.

The messages are the same in all: frame 1 is the 16-byte event id, frame 2 a 100-byte payload
that starts with an 8-byte big-endian sequence number. The same subscriber code receives them,
in its own process with its own zmq context, by default with the compiled capture core's receive
loop (``--receiver native``: a Python loop per message was the slower side of the comparison).
It uses ZeroConf discovery for the writers and the bare publisher's port directly. It counts
every sequence number, so it can tell whether each message arrived exactly once, and it times
the first to the last message: the rates are taken there, at the receiver. For the Spark
writers, the run also times the whole query, from ``start()`` to its termination, and splits
that into start-up (until the first message arrives), streaming and the end of the batch
(after the last message).

Run it as ``python benchmarks/zeroeq_write_rate.py [--quick] [--rows N] [--partitions 2]
[--send-cores native,python] [--skip-alone]``. It re-executes itself through
``scripts/netns.sh``, so every socket lives in a private network namespace that holds only
``lo``, and it uses only 127.0.0.1.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq
from harness.children import Child, report_errors
from harness.hermetic import ensure_private_network

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
#: rows per Arrow batch that the writer alone gets (Spark's arrow.maxRecordsPerBatch default)
ARROW_BATCH_ROWS = 10_000
SEND_CORES = ("native", "python")
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


# -- the writer without Spark ---------------------------------------------------------------------


def writer_options(session: str, core: str) -> dict[str, str]:
    """The writer's options, the same for a Spark query and the writer alone."""
    return {
        "session": session,
        "waitForSubscribers": str(WAIT_FOR_SUBSCRIBERS),
        "sendHighWaterMark": str(SEND_HWM),
        "discoveryInterfaces": LOOPBACK,
        "sendCore": core,
    }


@dataclass(frozen=True)
class AloneSend:
    """What the writer alone reports: ``time.monotonic()`` around ``write``, the process's CPU
    time in it (all threads: zmq's I/O thread, ZeroConf's), and the time the encoding alone
    took in a pass before (``encode_columns`` for the compiled loop, ``encode`` otherwise)."""

    started: float
    ended: float
    cpu_seconds: float
    encode_seconds: float
    sent: int


def alone_writer_main(
    input_dir: str, session: str, core: str, conn: multiprocessing.connection.Connection
) -> None:
    """The generic writer's ``write`` on the input's rows in Arrow batches, as a Spark task
    calls it; reports ``ready``, then ``sent``, then keeps the publisher until released."""

    def body() -> None:
        import pyarrow.parquet as pq

        from spark_zmq.protocols.zeroeq import ZeroEQ
        from spark_zmq.spark.writer import ZmqStreamWriter, close_publishers

        protocol = ZeroEQ()
        options = protocol.parse_writer_options(writer_options(session, core))
        settings = protocol.write_settings(options)
        batches = [
            batch
            for path in sorted(Path(input_dir).glob("*.parquet"))
            for batch in pq.read_table(path).to_batches(max_chunksize=ARROW_BATCH_ROWS)
        ]
        encode = protocol.encode_columns if core == "native" else protocol.encode
        began = time.perf_counter()
        for batch in batches:
            encode(batch, settings)
        encode_seconds = time.perf_counter() - began
        writer = ZmqStreamWriter(protocol, options)
        conn.send(("ready", None))
        cpu, started = time.process_time(), time.monotonic()
        counts = writer.write(iter(batches))
        ended, cpu = time.monotonic(), time.process_time() - cpu
        conn.send(("sent", AloneSend(started, ended, cpu, encode_seconds, counts.sent)))
        conn.poll(RELEASE_TIMEOUT)
        close_publishers()

    report_errors(conn, body)


# -- one round ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One side of a round: what its subscriber saw, or why it failed, and its figures besides
    its rate (by name, each name with its unit; see FIGURES)."""

    reception: Reception | None
    error: str = ""
    figures: dict[str, float] = field(default_factory=dict)


#: how each figure is shown
FIGURES = {
    "its send loop msg/s": "{:,.0f}",
    "wall s": "{:.2f}",
    "start-up s": "{:.2f}",
    "stream s": "{:.2f}",
    "end s": "{:.2f}",
    "CPU µs/msg": "{:.2f}",
    "encoding µs/msg": "{:.2f}",
}


@dataclass(frozen=True)
class Round:
    """Every side of one round, by name: ``bare``, ``spark <core>``, ``alone <core>``."""

    runs: dict[str, Run]

    def ratio(self, side: str) -> float | None:
        bare, other = self.runs["bare"].reception, self.runs[side].reception
        if bare is None or other is None or not bare.rate:
            return None
        return other.rate / bare.rate


def receive_timeout(rows: int) -> float:
    """How long a subscriber waits for everything: generous, a failure is not a hang."""
    return WAIT_FOR_SUBSCRIBERS + 60.0 + rows / 2_000


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def run_bare(context: Any, rows: int, native: bool) -> Run:
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
        reception = subscriber.expect("received", receive_timeout(rows))
        return Run(reception, figures={"its send loop msg/s": rows / (ended - started)})
    except (RuntimeError, TimeoutError) as exc:
        return Run(None, first_line(exc))
    finally:
        publisher.stop()
        if subscriber is not None:
            subscriber.stop()


def run_alone(
    context: Any, input_dir: Path, rows: int, session: str, core: str, native: bool
) -> Run:
    """The writer alone (a process of its own) -> the subscriber process, which finds its
    publisher over ZeroConf."""
    subscriber = Child(context, subscriber_main, session, (), rows, receive_timeout(rows), native)
    writer = None
    try:
        subscriber.expect("ready", CHILD_START_TIMEOUT)
        writer = Child(context, alone_writer_main, str(input_dir), session, core)
        writer.expect("ready", CHILD_START_TIMEOUT)
        sent: AloneSend = writer.expect("sent", receive_timeout(rows))
        reception = subscriber.expect("received", receive_timeout(rows))
        per_message = 1e6 / max(sent.sent, 1)
        figures = {
            "CPU µs/msg": sent.cpu_seconds * per_message,
            "encoding µs/msg": sent.encode_seconds * per_message,
        }
        return Run(reception, figures=figures)
    except (RuntimeError, TimeoutError) as exc:
        return Run(None, first_line(exc))
    finally:
        if writer is not None:
            writer.stop()
        subscriber.stop()


def start_writer(spark: Any, input_dir: Path, checkpoint: Path, session: str, core: str) -> Any:
    return (
        spark.readStream.schema(INPUT_SCHEMA)
        .parquet(str(input_dir))
        .writeStream.format("zeroeq")
        .options(**writer_options(session, core))
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
    core: str,
    native: bool,
) -> Run:
    """Parquet -> ``format("zeroeq")`` with send loop ``core`` -> the subscriber process, which
    finds the publishers of ``session`` over ZeroConf. The subscriber is browsing before the
    query starts, so its own start-up is not in the query's wall time."""
    subscriber = Child(context, subscriber_main, session, (), rows, receive_timeout(rows), native)
    query = None
    try:
        subscriber.expect("ready", CHILD_START_TIMEOUT)
        started = time.monotonic()
        query = start_writer(spark, input_dir, checkpoint, session, core)
        finished = query.awaitTermination(receive_timeout(rows) + 60.0)
        ended = time.monotonic()
        got: Reception = subscriber.expect("received", receive_timeout(rows))
        figures = {"wall s": ended - started}
        if got.first:
            figures.update(
                {
                    "start-up s": got.first - started,
                    "stream s": got.seconds,
                    "end s": ended - got.last,
                }
            )
        return Run(got, "" if finished else "the query did not finish in time", figures)
    except Exception as exc:  # a failed query is a result of the round, not a crash of the run
        return Run(None, first_line(exc))
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
    print("zeroeq_write_rate benchmark: Spark zeroeq writer (each send loop) vs bare pyzmq XPUB")
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
        f"{args.warmup_rows:,}-row warm-up query per send loop; send loops "
        f"{', '.join(args.send_cores)}; SNDHWM {SEND_HWM:,} + XPUB_NODROP on every sender, "
        f"subscriber RCVHWM 0, its receive loop {args.receiver}"
    )
    print(flush=True)


TABLE_HEADER = f"{'round':<7}{'side':<14}{'msg/s':>10}{'/ bare':>8}  {'once':<6}figures"


def run_row(label: str, side: str, result: Round) -> str:
    run = result.runs[side]
    rate = f"{run.reception.rate:>10,.0f}" if run.reception else f"{'failed':>10}"
    ratio = result.ratio(side)
    once = "-" if run.reception is None else ("yes" if run.reception.exactly_once else "NO")
    return (
        f"{label:<7}{side:<14}{rate}{f'{ratio:.2f}' if ratio is not None else '-':>8}  "
        f"{once:<6}{figures_cell(run.figures)}"
    )


def figures_cell(figures: dict[str, float]) -> str:
    return "; ".join(f"{name} {FIGURES[name].format(value)}" for name, value in figures.items())


def median_row(side: str, rounds: Sequence[Round]) -> str:
    runs = [r.runs[side] for r in rounds]
    rates = [run.reception.rate for run in runs if run.reception]
    ratios = [ratio for r in rounds if (ratio := r.ratio(side)) is not None]
    once = all(run.reception and run.reception.exactly_once for run in runs)
    names = [name for name in FIGURES if any(name in run.figures for run in runs)]
    figures = {
        name: statistics.median([run.figures[name] for run in runs if name in run.figures])
        for name in names
    }
    rate = f"{statistics.median(rates):>10,.0f}" if rates else f"{'-':>10}"
    ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
    return (
        f"{'median':<7}{side:<14}{rate}{ratio:>8}  {'all' if once else 'NOT':<6}"
        f"{figures_cell(figures)}"
    )


def round_notes(index: int, result: Round, partitions: int) -> list[str]:
    """Errors, losses, and publishers a subscriber found other than expected."""
    notes = []
    for side, run in result.runs.items():
        if run.error:
            notes.append(f"round {index} {side}: {run.error}")
        if run.reception is not None and not run.reception.exactly_once:
            notes.append(f"round {index} {side}: {run.reception.problems()}")
        expected = partitions if side.startswith("spark") else 1
        if run.reception is not None and run.reception.publishers != expected:
            notes.append(
                f"round {index} {side}: the subscriber connected to "
                f"{run.reception.publishers} publishers, expected {expected}"
            )
    return notes


def print_report(rounds: Sequence[Round], partitions: int) -> None:
    print("\n== results (rates at the receiver, first to last message) ==")
    print(TABLE_HEADER)
    sides = list(rounds[0].runs)
    for index, result in enumerate(rounds, 1):
        for side in sides:
            print(run_row(str(index), side, result))
    for side in sides:
        print(median_row(side, rounds))
    print(
        "\nbare: its send loop = the bare publisher's own rate (prebuilt messages; the "
        "receiver is the slower side when this is higher).\nspark: wall = start() -> query "
        "terminated; start-up = start() -> first message received (batch planning, Python "
        "worker, publisher + ZeroConf announcement, discovery, subscription), end = last "
        "message -> query terminated (commit, availableNow check).\nalone: CPU = the writer "
        "process's CPU time in write() per message, all threads (zmq's I/O thread too); "
        "encoding = the encoding alone, per message (a pass before write())."
    )
    if any(run.figures.get("end s", 0) < 0 for result in rounds for run in result.runs.values()):
        print(
            "a negative end: the query had finished before the last message arrived; the "
            "tasks had handed everything to zmq, and the rest was still queued (up to the "
            "send high-water mark per subscriber) on its way to the subscriber"
        )
    if partitions > 1:
        print(
            f"note: the Spark writers ran {partitions} publishers (one per partition) into one "
            f"subscriber; the bare side and the writer alone run one publisher"
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
    parser.add_argument("--rounds", type=int, help="rounds of every side (default 3; quick 1)")
    parser.add_argument(
        "--receiver",
        choices=("native", "python"),
        default="native",
        help="the subscriber's receive loop: the compiled capture core's (default), so that "
        "the senders are compared, or recv_multipart per message (earlier runs)",
    )
    parser.add_argument(
        "--send-cores",
        default=",".join(SEND_CORES),
        help="the writer's send loops to measure, comma-separated (option sendCore; default "
        "native,python)",
    )
    parser.add_argument(
        "--skip-alone", action="store_true", help="do not measure the writer without Spark"
    )
    args = parser.parse_args(argv)
    args.rows = args.rows or (20_000 if args.quick else 200_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.warmup_rows = min(args.rows, 10_000)
    args.send_cores = [core.strip() for core in args.send_cores.split(",") if core.strip()]
    if args.rows < args.partitions or args.partitions < 1 or args.rounds < 1:
        parser.error("--partitions and --rounds must be >= 1, and --rows >= --partitions")
    if not args.send_cores or set(args.send_cores) - set(SEND_CORES):
        parser.error(f"--send-cores takes some of {', '.join(SEND_CORES)}")
    return args


def start_spark() -> Any:
    """A local[2] session on loopback, quiet; workers log warnings only."""
    os.environ.setdefault("SPARK_ZMQ_LOG_LEVEL", "WARNING")
    from spark_zmq.spark.session import loopback_session

    return loopback_session("zeroeq_write_rate benchmark", SPARK_CONF, log_level="ERROR")


def planned_partitions(spark: Any, input_dir: Path) -> int:
    return spark.read.schema(INPUT_SCHEMA).parquet(str(input_dir)).rdd.getNumPartitions()


def run_rounds(spark: Any, context: Any, workdir: Path, args: argparse.Namespace) -> list[Round]:
    """A warm-up query per send loop (JVM JIT, Python worker, imports: not counted), then the
    rounds: bare, the Spark writer per send loop, the writer alone per send loop; the send
    loops' order alternates from round to round."""
    run_id = f"{os.getpid()}-{int(time.time())}"
    native = args.receiver == "native"
    warmup_dir = write_input(workdir / "warmup", args.warmup_rows, args.partitions)
    for core in args.send_cores:
        warm = run_writer(
            spark,
            context,
            warmup_dir,
            workdir / f"checkpoint-warmup-{core}",
            args.warmup_rows,
            f"bench-write-{run_id}-warmup-{core}",
            core,
            native,
        )
        wall = warm.figures.get("wall s", 0.0)
        print(f"warm-up query, sendCore={core}: {wall:.2f} s {warm.error}", flush=True)
    input_dir = write_input(workdir / "input", args.rows, args.partitions)
    print(
        f"Spark plans {planned_partitions(spark, input_dir)} partition(s) for the input", flush=True
    )
    print(TABLE_HEADER, flush=True)
    rounds = []
    for index in range(1, args.rounds + 1):
        cores = args.send_cores if index % 2 else args.send_cores[::-1]
        runs = {"bare": run_bare(context, args.rows, native)}
        for core in cores:
            runs[f"spark {core}"] = run_writer(
                spark,
                context,
                input_dir,
                workdir / f"checkpoint-{index}-{core}",
                args.rows,
                f"bench-write-{run_id}-{index}-{core}",
                core,
                native,
            )
        if not args.skip_alone:
            for core in cores:
                runs[f"alone {core}"] = run_alone(
                    context,
                    input_dir,
                    args.rows,
                    f"bench-alone-{run_id}-{index}-{core}",
                    core,
                    native,
                )
        order = ["bare"] + [f"{kind} {c}" for kind in ("spark", "alone") for c in args.send_cores]
        rounds.append(Round({side: runs[side] for side in order if side in runs}))
        for side in rounds[-1].runs:
            print(f"  {run_row(str(index), side, rounds[-1])}", flush=True)
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
