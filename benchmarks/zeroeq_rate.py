"""How fast can ZeroEQ events arrive before something is lost, with and without the connector?

Measured side by side in one run, on loopback only:

0. messages lost per rate by each receiver, the receivers taking turns rate by rate
   (``rate_losses``: the bare loop alone and beside a Spark query, the connector with and
   without ``captureNice``),
1. the highest publish rate that a bare pyzmq SUB loop receives with no gaps,
2. the highest rate at which ``format("zeroeq")`` delivers every message into a
   ``foreachBatch`` sink, once per capture core (``--cores``: the compiled one and the Python
   loop), and the ratio of each to the bare loop's,
3. publish -> ``foreachBatch`` latency (p50, p99) at each search's best rate, and at a modest
   rate with the cores taking turns,
4. process CPU time per message of the bare loop and of capture alone with each core (no
   Spark), paced and unpaced,
5. capture's peak memory while it writes about 1 GiB into its spool (no Spark).

The publisher is the same for every receiver: a separate process with an XPUB socket, send
high-water mark 1000, pacing 100-byte events at a requested rate, dropping a message at once
when its send queue is full as the real publishers do (``--patient``: it waits up to 10 ms
first), at SCHED_FIFO so that its own stalls are not the receivers' losses; by default it
sends with the compiled core's send loop (``--publisher native``), since a Python publisher on
a small machine is the first thing to give out. A rate counts as reached only when every
sequence number arrived exactly once *and* the publisher itself kept up (the report says when
it did not). The
publisher counts what its high-water mark drops, so the report tells gaps made at the publisher
from gaps made after it. The connector runs on its defaults (``startingOffsets=latest``
delivers everything a run's capture received), each trial with a fresh spool and checkpoint,
except for ``maxRecordsPerTrigger`` (``--max-records-per-trigger``): the sink collects each
micro-batch into the driver. The bare loop queues at most what capture queues
(``--bare-rcvhwm``, capture's ``receiveHighWaterMark``): both fall behind the same way.

Run it as ``python benchmarks/zeroeq_rate.py [--quick]``: it re-executes itself through
``scripts/netns.sh``, so every socket lives in a private network namespace that holds only
``lo``, and only 127.0.0.1 is ever used.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import platform
import resource
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import zmq
from children import Child, report_errors
from hermetic import ensure_private_network
from rate_losses import add_loss_arguments, measure_losses

from spark_zmq.protocols.zeroeq import MEERKAT, event_id
from spark_zmq.spark.session import LOOPBACK
from spark_zmq.stream_options import RECEIVE_HIGH_WATER_MARK

TICK_EVENT = "bench::Tick"
#: sequence number and send time (ns), both 8-byte big-endian, at the start of every payload
HEAD = struct.Struct(">QQ")
PAYLOAD_BYTES = 100
SEND_HWM = 1000
#: the publisher must reach this share of the requested rate for a trial to count
KEEP_UP = 0.97
#: the publisher sends one burst per tick, sized to stay on schedule
TICK_SECONDS = 0.001
#: how long the patient publisher (``--patient``) waits for room in a full send queue before it
#: drops; the default publisher drops at once, as every ZeroEQ, Goby and yamz publisher does
SEND_PATIENCE = 0.01
#: a receiver that has seen messages and then nothing for this long stops waiting
IDLE_SECONDS = 3.0
SUBSCRIBE_TIMEOUT = 120.0
#: longest a publisher keeps its socket open after sending, waiting for the bench to release it
RELEASE_TIMEOUT = 600.0
MEMORY_PAYLOAD_BYTES = 1024
MS = 1e6
#: the issue's target for the connector's no-gap rate over the bare SUB loop's
RATIO_TARGET = 1.5
#: capture's default receive queue per endpoint, from the option's one definition
CAPTURE_RECEIVE_HWM: int = RECEIVE_HIGH_WATER_MARK.parsed_default()
#: admission per micro-batch: about 70 MB of 100-byte events in the driver per batch
MAX_RECORDS_PER_TRIGGER = 500_000
CORES = ("native", "python")


# -- plans and results ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PublishPlan:
    """What one publisher process sends. ``rate`` 0 means as fast as it can."""

    count: int
    rate: float
    payload_bytes: int = PAYLOAD_BYTES
    send_hwm: int = SEND_HWM
    first: int = 0  # sequence number of the first message (several publishers, one count)
    #: send with the compiled publisher (native_publisher.send_sequence) rather than
    #: send_multipart per message: the publisher is then not the first to give out
    native: bool = False
    #: the publisher process's nice value (its zmq I/O thread's too); negative: it wins the CPU
    #: from the receivers and Spark, so that its send high-water mark overflows only when the
    #: receiving side stops taking, not when the publisher itself waits for a core
    nice: int = 0
    #: seconds a message waits for room in a full send queue before it is dropped: 0 (the
    #: default) drops at once, as the real publishers do; SEND_PATIENCE with ``--patient``
    patience: float = 0.0
    #: SCHED_FIFO (``run_in_real_time``) instead of ``nice``
    realtime: bool = False


@dataclass(frozen=True)
class PublishResult:
    """``sent`` counts every message handed to zmq, ``dropped`` those of them that the send
    high-water mark dropped (the subscriber's queue at the publisher was full)."""

    sent: int
    seconds: float
    dropped: int
    #: the publisher's longest delay behind its schedule, ms: a publisher that waited this long
    #: for a core sends a burst this long at once; more than its queue holds drops by itself
    late_ms: float = 0.0

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class ReceiveResult:
    """What a bare SUB loop saw: distinct sequence numbers, repeats and anything unexpected,
    and the CPU time its process used (all threads, zmq's I/O thread too)."""

    unique: int
    duplicates: int
    foreign: int
    missing: str
    cpu_seconds: float = 0.0


@dataclass
class Trial:
    """One publisher run at one rate into one receiver, as the report shows it."""

    receiver: str
    rate: float
    planned: int
    sent: int = 0
    publisher_rate: float = 0.0
    publisher_dropped: int = 0
    publisher_late_ms: float = 0.0
    received: int = 0
    duplicates: int = 0
    invalid: int = 0
    latency_ms: tuple[float, float] | None = None  # (p50, p99), connector only
    missing: str = ""  # where the gaps are, e.g. "0-5, 2800-2807"
    error: str = ""
    cpu_seconds: float = 0.0  # the bare receiver's process CPU time

    def record_publisher(self, result: PublishResult) -> None:
        self.sent, self.publisher_rate = result.sent, result.rate
        self.publisher_dropped = result.dropped
        self.publisher_late_ms = result.late_ms

    @property
    def gaps(self) -> int:
        return self.planned - self.received

    @property
    def publisher_kept_up(self) -> bool:
        return self.sent == self.planned and self.publisher_rate >= KEEP_UP * self.rate

    @property
    def success(self) -> bool:
        return (
            not self.error
            and self.publisher_kept_up
            and self.gaps == 0
            and self.duplicates == 0
            and self.invalid == 0
        )

    @property
    def verdict(self) -> str:
        if self.error:
            return "error"
        if self.gaps or self.duplicates or self.invalid:
            return "GAPS" + ("; publisher behind" if not self.publisher_kept_up else "")
        return "ok" if self.publisher_kept_up else "publisher behind"


@dataclass
class SearchOutcome:
    """Trials of one receiver's search, the best gap-free one and the trial that bounded it."""

    receiver: str
    trials: list[Trial] = field(default_factory=list)

    @property
    def best(self) -> Trial | None:
        good = [t for t in self.trials if t.success]
        return max(good, key=lambda t: t.rate) if good else None

    @property
    def bound(self) -> Trial | None:
        """The lowest failed rate above the best one: what stopped the search."""
        floor = self.best.rate if self.best else 0.0
        failed = [t for t in self.trials if not t.success and t.rate > floor]
        return min(failed, key=lambda t: t.rate) if failed else None

    @property
    def limited_by_publisher(self) -> bool:
        """The publisher fell behind on its own. One that dropped at its send high-water mark
        found its queue full: the receiving side did not take (a patient publisher fell
        behind waiting on it)."""
        bound = self.bound
        return (
            bound is not None
            and not bound.error
            and not bound.publisher_kept_up
            and bound.publisher_dropped == 0
        )


# -- publisher process ----------------------------------------------------------------------------


def publisher_main(
    plan: PublishPlan, release: Any, conn: multiprocessing.connection.Connection
) -> None:
    """Bind an XPUB on a random loopback port, report it, wait for a subscriber to everything,
    send ``plan``, report, then keep the socket open until released so nothing queued is lost
    at close."""

    def body() -> None:
        if plan.realtime:
            run_in_real_time()
        elif plan.nice:
            with contextlib.suppress(PermissionError):  # not root: the default priority
                os.setpriority(os.PRIO_PROCESS, 0, plan.nice)
        context = zmq.Context()  # its I/O thread starts now, with the process's priority
        sock = context.socket(zmq.XPUB)
        sock.setsockopt(zmq.SNDHWM, plan.send_hwm)
        # At the high-water mark, report EAGAIN instead of dropping silently; _send_all then
        # drops the message itself and counts it: the same wire behaviour, but it says where
        # messages were lost.
        sock.setsockopt(zmq.XPUB_NODROP, 1)
        sock.setsockopt(zmq.LINGER, 2000)
        try:
            conn.send(("port", sock.bind_to_random_port(f"tcp://{LOOPBACK}")))
            _wait_for_subscriber(sock, SUBSCRIBE_TIMEOUT)
            conn.send(("sent", _send_all(sock, plan)))
            release.wait(RELEASE_TIMEOUT)
        finally:
            sock.close()
            context.term()

    report_errors(conn, body)


def run_in_real_time() -> None:
    """SCHED_FIFO priority 1 for this thread and the threads it starts (zmq's I/O thread): the
    real publishers run on other hosts, so the publisher must not wait for a core behind the
    receivers and Spark (at nice -20 it still fell 40 to 180 ms behind on a loaded 2-core
    machine, and its own late burst overflowed its queue). Not permitted: nice -20, or as is."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except PermissionError:
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, -20)


def _wait_for_subscriber(sock: zmq.Socket, timeout: float) -> None:
    """Block until a subscription to every message (prefix b"") arrives: from then on the
    publisher's trie delivers everything to that subscriber."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sock.poll(100) and sock.recv() == b"\x01":
            return
    raise TimeoutError(f"no subscriber within {timeout:.0f} s")


def _send_all(sock: zmq.Socket, plan: PublishPlan) -> PublishResult:
    """Send ``plan.count`` events, paced: each ~1 ms tick sends what the schedule says is due by
    now, so a late tick catches up and the average rate is the requested one."""
    wire_id = event_id(TICK_EVENT)
    padding = bytes(plan.payload_bytes - HEAD.size)
    pack, send, wall_ns, clock = HEAD.pack, sock.send_multipart, time.time_ns, time.perf_counter
    count, rate, again, first = plan.count, plan.rate, zmq.Again, plan.first
    native = (
        native_sender(sock, wire_id, bytes(plan.payload_bytes), plan.patience)
        if plan.native
        else None
    )
    sent = dropped = 0
    late = 0.0
    start = tick = clock()
    while sent < count:
        now = clock()
        due = count if rate <= 0 else min(count, int((now - start) * rate) + 1)
        if rate > 0:
            late = max(late, now - start - sent / rate)
        if native is not None:  # one call per tick; at most a tick's worth when unpaced
            burst = min(due - sent, max(1000, int(rate * TICK_SECONDS)))
            dropped += native(first + sent, burst)
            sent += burst
        while sent < due and native is None:
            try:
                send([wire_id, pack(first + sent, wall_ns()) + padding], zmq.NOBLOCK)
            except again:
                dropped += 1
            sent += 1
        tick += TICK_SECONDS
        delay = tick - clock()
        if delay > 0 and sent < count:
            time.sleep(delay)
        elif delay <= 0:
            tick = clock()  # behind: the schedule (not sleep debt) decides the next burst
    return PublishResult(sent, clock() - start, dropped, late * 1000)


def native_sender(
    sock: zmq.Socket, topic: bytes, body: bytes, patience: float
) -> Callable[[int, int], int]:
    """send(first, count) -> dropped, through the compiled publisher. A full send queue
    is given ``patience`` seconds before a message counts as dropped (0: at once, as the real
    publishers drop). The patient mode absorbs stalls of the receiving side shorter than
    ``patience``: exactly the stalls that lose messages with the real publishers."""
    from native_publisher import send_sequence

    address = sock.underlying
    return lambda first, count: send_sequence(address, topic, body, first, count, patience)


# -- bare SUB receiver process --------------------------------------------------------------------


def bare_receiver_main(
    port: int,
    count: int,
    timeout: float,
    receive_hwm: int,
    conn: multiprocessing.connection.Connection,
) -> None:
    """A plain SUB loop that checks sequence numbers: the reference the connector is measured
    against. Its receive high-water mark is capture's (``receive_hwm``): with none (0), zmq's
    I/O thread queues whatever the loop has not taken yet, without bound, and the loop only
    catches up after the publisher stops, so the trial measures zmq's I/O thread and memory
    rather than the loop."""

    def body() -> None:
        context = zmq.Context()
        sock = context.socket(zmq.SUB)
        sock.setsockopt(zmq.RCVHWM, receive_hwm)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, 500)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(f"tcp://{LOOPBACK}:{port}")
        try:
            cpu = cpu_seconds()
            result = _receive_sequence(sock, count, timeout)
            conn.send(("received", replace(result, cpu_seconds=cpu_seconds() - cpu)))
        finally:
            sock.close()
            context.term()

    report_errors(conn, body)


def _receive_sequence(sock: zmq.Socket, count: int, timeout: float) -> ReceiveResult:
    """Receive until sequence number ``count - 1`` arrives (zmq keeps one connection's order,
    so nothing earlier can follow it), the stream goes idle, or ``timeout``."""
    seen = bytearray(count)
    unique = duplicates = foreign = 0
    idle = 0.0
    recv, sequence_of, last = sock.recv_multipart, struct.Struct(">Q").unpack_from, count - 1
    deadline = time.monotonic() + timeout
    while True:
        try:
            frames = recv()
        except zmq.Again:
            idle += 0.5
            if time.monotonic() > deadline or (unique and idle >= IDLE_SECONDS):
                break
            continue
        idle = 0.0
        if len(frames) != 2 or len(frames[1]) < HEAD.size:
            foreign += 1
            continue
        seq = sequence_of(frames[1])[0]
        if seq > last:
            foreign += 1
        elif seen[seq]:
            duplicates += 1
        else:
            seen[seq] = 1
            unique += 1
            if seq == last:
                break
    return ReceiveResult(
        unique, duplicates, foreign, describe_missing(np.frombuffer(seen, dtype=np.uint8) > 0)
    )


def cpu_seconds() -> float:
    """CPU time of this process so far, user and system, all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def thread_cpu_seconds() -> dict[int, tuple[str, float]]:
    """CPU time so far of each thread of this process: {thread id: (name, seconds)}, in clock
    ticks (10 ms at the usual 100 Hz)."""
    ticks = os.sysconf("SC_CLK_TCK")
    threads = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat", encoding="ascii") as stat:
                text = stat.read()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        threads[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return threads


def cpu_by_thread(
    before: dict[int, tuple[str, float]], capture_thread: int | None
) -> tuple[tuple[str, float], ...]:
    """CPU time since ``before`` of capture's thread, zmq's background threads and the rest."""
    split = {"capture thread": 0.0, "zmq I/O thread": 0.0, "other threads": 0.0}
    for tid, (name, seconds) in thread_cpu_seconds().items():
        used = seconds - before.get(tid, (name, 0.0))[1]
        if tid == capture_thread:
            split["capture thread"] += used
        elif name.startswith("ZMQbg"):
            split["zmq I/O thread"] += used
        else:
            split["other threads"] += used
    return tuple(split.items())


def describe_missing(present: np.ndarray, shown: int = 2) -> str:
    """The first runs of missing sequence numbers, e.g. ``0-5, 28000-28008 (+3 runs)``: a loss
    at the very start (a start-up race) looks different from drops mid-stream (an overflowing
    high-water mark)."""
    missing = np.flatnonzero(~present)
    if not len(missing):
        return ""
    breaks = np.flatnonzero(np.diff(missing) > 1)
    starts = np.concatenate(([missing[0]], missing[breaks + 1]))
    ends = np.concatenate((missing[breaks], [missing[-1]]))
    pairs = zip(starts[:shown].tolist(), ends[:shown].tolist(), strict=True)
    runs = [f"{a}" if a == b else f"{a}-{b}" for a, b in pairs]
    more = f" (+{len(starts) - shown} runs)" if len(starts) > shown else ""
    return ", ".join(runs) + more


# -- one bare trial and the publisher's handle ----------------------------------------------------


class PublisherProcess:
    """The parent's handle on a publisher process: its port, its result, and its release."""

    def __init__(self, context: Any, plan: PublishPlan) -> None:
        self._release = context.Event()
        self._child = Child(context, publisher_main, plan, self._release)
        try:
            self.port: int = self._child.expect("port", 60.0)
        except BaseException:
            self.finish()
            raise

    def result(self, timeout: float) -> PublishResult:
        return self._child.expect("sent", timeout)

    def finish(self) -> None:
        """Let it close its socket (everything is received by now) and reap it."""
        self._release.set()
        self._child.stop()


def planned_count(rate: float, duration: float) -> int:
    return max(1, round(rate * duration))


@dataclass(frozen=True)
class Bench:
    """What every trial of one run shares."""

    context: Any  # multiprocessing "spawn" context
    workdir: Path  # the run's temporary folder, deleted at the end
    duration: float  # seconds of publishing per trial
    trigger_ms: int  # the connector query's processingTime trigger
    spark: Any = None  # the run's SparkSession, if the connector is measured
    native_publisher: bool = False  # the publisher sends with the compiled core's loop
    publisher_nice: int = 0  # the publisher process's nice value
    #: seconds the publisher waits at a full send queue before it drops (0: drops at once)
    patience: float = 0.0
    publisher_realtime: bool = False  # the publisher runs SCHED_FIFO (``run_in_real_time``)
    core: str = "auto"  # the connector's captureCore
    bare_receive_hwm: int = CAPTURE_RECEIVE_HWM  # the bare SUB loop's ZMQ_RCVHWM
    #: the connector query's maxRecordsPerTrigger (0: none)
    max_records_per_trigger: int = MAX_RECORDS_PER_TRIGGER
    #: further options of the connector query (a candidate's settings, e.g. captureNice)
    reader_options: tuple[tuple[str, str], ...] = ()


def publish_plan(bench: Bench, count: int, rate: float) -> PublishPlan:
    """The run's publisher (send loop, nice value, patience) sending ``count`` at ``rate``."""
    return PublishPlan(
        count,
        rate,
        native=bench.native_publisher,
        nice=bench.publisher_nice,
        patience=bench.patience,
        realtime=bench.publisher_realtime,
    )


def run_bare_trial(bench: Bench, rate: float, duration: float | None = None) -> Trial:
    """Publisher and bare SUB receiver, each in its own process."""
    context, duration = bench.context, duration or bench.duration
    trial = Trial("bare", rate, planned_count(rate, duration))
    publisher = receiver = None
    try:
        plan = publish_plan(bench, trial.planned, rate)
        publisher = PublisherProcess(context, plan)
        receiver = Child(
            context,
            bare_receiver_main,
            publisher.port,
            trial.planned,
            SUBSCRIBE_TIMEOUT + 2 * duration + 30,
            bench.bare_receive_hwm,
        )
        trial.record_publisher(publisher.result(SUBSCRIBE_TIMEOUT + 10 * duration + 30))
        got: ReceiveResult = receiver.expect("received", SUBSCRIBE_TIMEOUT + 2 * duration + 60)
        trial.received, trial.duplicates, trial.invalid = got.unique, got.duplicates, got.foreign
        trial.missing, trial.cpu_seconds = got.missing, got.cpu_seconds
    except (RuntimeError, TimeoutError) as exc:
        trial.error = str(exc)
    finally:
        if publisher is not None:
            publisher.finish()
        if receiver is not None:
            receiver.stop()
    return trial


# -- connector into a Spark sink ------------------------------------------------------------------


def start_spark() -> Any:
    """One local session for the whole run, bound to loopback, quiet."""
    # capture logs every endpoint join at INFO; the benchmark's output is on stdout
    os.environ.setdefault("SPARK_ZMQ_LOG_LEVEL", "WARNING")
    from spark_zmq.spark.session import loopback_session

    return loopback_session("zeroeq_rate benchmark", log_level="ERROR")


def payload_heads(payload: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """Sequence numbers and send times of an Arrow binary column, vectorised (a Python loop per
    row would slow the sink, and so the query, at the rates measured), plus the number of rows
    that carry no benchmark payload (null: a gap row from capture; or too short)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sequences, sent_ns, invalid = [], [], 0
    for chunk in payload.chunks:
        valid = pc.and_(pc.is_valid(chunk), pc.greater_equal(pc.binary_length(chunk), HEAD.size))
        valid = pc.fill_null(valid, False)
        kept = chunk.filter(valid)
        invalid += len(chunk) - len(kept)
        if not len(kept):
            continue
        width = np.int64 if pa.types.is_large_binary(kept.type) else np.int32
        starts = np.frombuffer(kept.buffers()[1], dtype=width)[
            kept.offset : kept.offset + len(kept)
        ]
        data = np.frombuffer(kept.buffers()[2], dtype=np.uint8)
        heads: np.ndarray = data[starts.astype(np.int64)[:, None] + np.arange(HEAD.size)]
        words = heads.view(">u8")  # (rows, 2): sequence number, send time
        sequences.append(words[:, 0].astype(np.int64))
        sent_ns.append(words[:, 1].astype(np.int64))
    if not sequences:
        return np.empty(0, np.int64), np.empty(0, np.int64), invalid
    return np.concatenate(sequences), np.concatenate(sent_ns), invalid


class BatchCollector:
    """The ``foreachBatch`` sink: counts every sequence number and records per-row latency.

    Latency is taken once the batch's payloads are in the driver's hands (after ``toArrow``),
    i.e. when the rows have really reached the sink, not when Spark merely planned the batch.
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self.seen = np.zeros(count, dtype=np.int32)
        self.out_of_range = 0
        self.invalid = 0
        self.rows = 0
        self.latencies: list[np.ndarray] = []
        self._lock = threading.Lock()

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        table = batch_df.select("payload").toArrow()
        arrived = time.time_ns()
        sequences, sent_ns, invalid = payload_heads(table.column("payload"))
        inside = (sequences >= 0) & (sequences < self.count)
        with self._lock:
            np.add.at(self.seen, sequences[inside], 1)
            self.out_of_range += int((~inside).sum())
            self.invalid += invalid
            self.rows += table.num_rows
            self.latencies.append(arrived - sent_ns)

    @property
    def unique(self) -> int:
        with self._lock:
            return int(np.count_nonzero(self.seen))

    @property
    def duplicates(self) -> int:
        with self._lock:
            return int(np.clip(self.seen - 1, 0, None).sum())

    def latency_ms(self) -> tuple[float, float] | None:
        with self._lock:
            if not self.latencies:
                return None
            values = np.concatenate(self.latencies) / MS
        p50, p99 = np.percentile(values, [50, 99])
        return float(p50), float(p99)


def _bounded_call(call: Callable[[], None], timeout: float) -> bool:
    """Run a blocking Spark call in a helper thread; False if it did not finish in time (the
    caller then stops the query, which releases the call)."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as exc:  # the query failed: re-raised below
            errors.append(exc)

    thread = threading.Thread(target=target, name="processAllAvailable", daemon=True)
    thread.start()
    thread.join(max(0.0, timeout))
    if errors:
        raise errors[0]
    return not thread.is_alive()


def drain_query(query: Any, collector: BatchCollector, timeout: float) -> None:
    """After the publisher is done: let the query process what capture has, until every
    sequence number arrived or a full ``processAllAvailable`` pass brings nothing new."""
    deadline = time.monotonic() + timeout
    rows_before = -1
    while collector.unique < collector.count and time.monotonic() < deadline:
        if not _bounded_call(query.processAllAvailable, deadline - time.monotonic()):
            return
        if collector.rows == rows_before:
            return
        rows_before = collector.rows


def run_connector_trial(
    bench: Bench, rate: float, receiver: str = "connector", duration: float | None = None
) -> Trial:
    """Publisher process -> ``format("zeroeq")`` -> ``foreachBatch``. The publisher binds first
    (the query needs its port) but sends nothing until the query's capture has subscribed."""
    duration = duration or bench.duration
    trial = Trial(receiver, rate, planned_count(rate, duration))
    collector = BatchCollector(trial.planned)
    folder = Path(tempfile.mkdtemp(prefix="trial-", dir=bench.workdir))
    publisher = query = None
    try:
        plan = publish_plan(bench, trial.planned, rate)
        publisher = PublisherProcess(bench.context, plan)
        query = (
            bench.spark.readStream.format("zeroeq")
            .option("publishers", f"{LOOPBACK}:{publisher.port}")
            .option("spoolPath", str(folder / "spool"))
            .option("captureCore", bench.core)
            .options(**admission(bench))
            .options(**dict(bench.reader_options))
            .load()
            .writeStream.foreachBatch(collector)
            .option("checkpointLocation", str(folder / "checkpoint"))
            .trigger(processingTime=f"{bench.trigger_ms} milliseconds")
            .start()
        )
        trial.record_publisher(publisher.result(SUBSCRIBE_TIMEOUT + 10 * duration + 30))
        time.sleep(0.5)
        drain_query(query, collector, 60.0 + 5 * duration)
    except Exception as exc:  # a failed query or child is a trial result, not a crash
        trial.error = error_text(exc)
    finally:
        if query is not None:
            stop_query(query)
        if publisher is not None:
            publisher.finish()
        shutil.rmtree(folder, ignore_errors=True)
    record_delivery(trial, collector)
    return trial


def admission(bench: Bench) -> dict[str, str]:
    """The connector query's admission option, if the run sets one."""
    if bench.max_records_per_trigger <= 0:
        return {}
    return {"maxRecordsPerTrigger": str(bench.max_records_per_trigger)}


def error_text(exc: Exception) -> str:
    """A failed trial's error, one line."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def record_delivery(trial: Trial, collector: BatchCollector) -> None:
    """What the sink saw, into the trial's row."""
    trial.received, trial.duplicates = collector.unique, collector.duplicates
    trial.invalid = collector.invalid + collector.out_of_range
    trial.latency_ms = collector.latency_ms()
    trial.missing = describe_missing(collector.seen > 0)


def stop_query(query: Any) -> None:
    """Stop and surface nothing: a failure was already recorded, and the run must go on."""
    with contextlib.suppress(Exception):
        query.stop()


# -- the search -----------------------------------------------------------------------------------


def search(
    receiver: str,
    run: Callable[[float], Trial],
    start: float,
    factor: float,
    max_steps: int,
    on_trial: Callable[[Trial], None],
) -> SearchOutcome:
    """Step the rate by ``factor`` (up while trials succeed, down while they fail) until one
    good and one bad rate bracket the limit, then try their midpoint once."""
    outcome = SearchOutcome(receiver)
    rate = start
    good: float | None = None
    bad: float | None = None
    for _ in range(max_steps):
        trial = run(rate)
        outcome.trials.append(trial)
        on_trial(trial)
        if trial.success:
            good = rate
        else:
            bad = rate if bad is None else min(bad, rate)
        if good is not None and bad is not None:
            break
        rate = rate * factor if trial.success else rate / factor
        if rate < 100:
            break
    if good is not None and bad is not None and bad > good:
        middle = round((good + bad) / 2, -2) or (good + bad) / 2
        if good < middle < bad:
            trial = run(middle)
            outcome.trials.append(trial)
            on_trial(trial)
    return outcome


# -- capture's memory with a full spool -----------------------------------------------------------


@dataclass(frozen=True)
class MemoryResult:
    """What the capture subprocess reports: counts, bytes on disk, and its memory."""

    messages: int
    rows_held: int
    spool_bytes: int
    baseline_rss_kib: int
    peak_rss_kib: int
    rss_at_quarters_kib: tuple[int, ...]
    capture_seconds: float
    #: the capture process's CPU time from the first message seen to all spooled: start-up
    #: (threads, sockets, the connection) is a cost per query, not per message
    cpu_seconds: float = 0.0
    cpu_messages: int = 0  # the messages received in that time
    core: str = ""  # the receive loop that ran
    #: the same CPU time by thread: capture's own, zmq's I/O thread(s), the rest
    cpu_by_thread: tuple[tuple[str, float], ...] = ()

    @property
    def cpu_us_per_message(self) -> float:
        return self.cpu_seconds / self.cpu_messages * 1e6 if self.cpu_messages else 0.0

    @property
    def rate(self) -> float:
        return self.messages / self.capture_seconds if self.capture_seconds > 0 else 0.0


def rss_kib() -> int:
    """Current resident set size (VmRSS), KiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def capture_memory_main(
    port: int,
    count: int,
    root: str,
    max_bytes: int,
    timeout: float,
    core: str,
    conn: multiprocessing.connection.Connection,
) -> None:
    """The package's capture alone in a fresh process, receiving ``count`` messages into a spool
    under ``root`` with the receive loop ``core``; reports its RSS before starting, at each
    quarter of the data and at peak, and its CPU time from the first message seen until all is
    in the spool."""

    def body() -> None:
        from spark_zmq.capture.loop import Capture
        from spark_zmq.protocols.contract import Endpoint, StaticDiscovery
        from spark_zmq.spool.writer import Spool

        spool = Spool(root, max_bytes=max_bytes)
        capture = Capture(
            spool, max_message_bytes=64 << 20, flush_interval=0.1, name="bench", core=core
        )
        baseline = rss_kib()
        at_first: dict[str, Any] = {}

        def first_seen(received: int) -> None:
            at_first.update(cpu=cpu_seconds(), threads=thread_cpu_seconds(), received=received)

        capture.start()
        key = f"{LOOPBACK}:{port}"
        StaticDiscovery(
            [Endpoint(key, f"tcp://{key}", {"publisher": key}, (b"", event_id(MEERKAT)))]
        ).start(capture)
        try:
            first, quarters = _watch_capture(capture, count, timeout, first_seen)
            capture.sync(timeout=300)
            cpu = cpu_seconds() - at_first.get("cpu", 0.0)
            threads = cpu_by_thread(at_first.get("threads", {}), capture._thread.native_id)
            seconds = time.monotonic() - first if first else 0.0
            held = sum(state.end - state.start for state in spool.snapshot().values())
            received = sum(capture.received().values())
            result = MemoryResult(
                received,
                held,
                spool.nbytes,
                baseline,
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                quarters,
                seconds,
                cpu,
                received - at_first.get("received", received),
                capture.core,
                threads,
            )
        finally:
            capture.close()
            spool.close()
        conn.send(("memory", result))

    report_errors(conn, body)


def _watch_capture(
    capture: Any, count: int, timeout: float, first_seen: Callable[[int], None]
) -> tuple[float, tuple[int, ...]]:
    """Poll capture's counters until ``count`` messages arrived (or idle/timeout); returns when
    the first arrived and the RSS as each quarter of them was reached. ``first_seen`` is called
    with the count when the first messages are seen."""
    deadline = time.monotonic() + timeout
    first = last_change = 0.0
    received = 0
    quarters: list[int] = []
    while received < count and time.monotonic() < deadline:
        time.sleep(0.02)
        now_received = sum(capture.received().values())
        now = time.monotonic()
        if now_received != received:
            if not first:
                first_seen(now_received)
            first, last_change, received = first or now, now, now_received
        elif first and now - last_change > 2 * IDLE_SECONDS:
            break
        while len(quarters) < 4 and received >= count * (len(quarters) + 1) / 4:
            quarters.append(rss_kib())
    return first, tuple(quarters)


def run_memory_trial(
    bench: Bench, count: int, rate: float, payload_bytes: int = MEMORY_PAYLOAD_BYTES
) -> tuple[MemoryResult | None, PublishResult | None, str]:
    """``count`` events (send high-water mark 0: nothing dropped) into a capture subprocess
    running ``bench.core``; the spool is deleted afterwards."""
    context, workdir = bench.context, bench.workdir
    plan = PublishPlan(
        count,
        rate,
        payload_bytes=payload_bytes,
        send_hwm=0,
        native=bench.native_publisher,
        nice=bench.publisher_nice,
    )
    root = Path(tempfile.mkdtemp(prefix="memory-", dir=workdir))
    max_bytes = max(4 << 30, 2 * count * payload_bytes)
    publisher = capture = None
    try:
        publisher = PublisherProcess(context, plan)
        capture = Child(
            context,
            capture_memory_main,
            publisher.port,
            count,
            str(root / "spool"),
            max_bytes,
            SUBSCRIBE_TIMEOUT + 600.0,
            bench.core,
        )
        sent = publisher.result(SUBSCRIBE_TIMEOUT + 900.0)
        memory: MemoryResult = capture.expect("memory", 900.0)
        return memory, sent, ""
    except (RuntimeError, TimeoutError) as exc:
        return None, None, str(exc)
    finally:
        if publisher is not None:
            publisher.finish()
        if capture is not None:
            capture.stop()
        shutil.rmtree(root, ignore_errors=True)


# -- report ---------------------------------------------------------------------------------------


def print_header(args: argparse.Namespace, title: str = "zeroeq_rate benchmark") -> None:
    import pyarrow
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    java_line = (
        (java.stderr or java.stdout).splitlines()[0] if (java.stderr or java.stdout) else "unknown"
    )
    commit = subprocess.run(
        ["git", "-C", str(Path(__file__).parent), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print(title)
    print(f"  command   : {shlex.join([sys.executable, *sys.argv])}")
    print(f"  when      : {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}")
    print(
        f"  machine   : nproc={len(os.sched_getaffinity(0))} ({platform.machine()}, "
        f"{platform.platform()})"
    )
    print(f"  python    : {platform.python_version()} ({sys.executable})")
    print(f"  zmq       : pyzmq {zmq.pyzmq_version()}, libzmq {zmq.zmq_version()}")
    print(
        f"  spark     : pyspark {pyspark.__version__}, pyarrow {pyarrow.__version__}, "
        f"numpy {np.__version__}, {java_line}"
    )
    print(
        f"  network   : private namespace (interfaces: "
        f"{', '.join(n for _, n in socket.if_nameindex())}), {LOOPBACK} only"
    )
    print(
        f"  settings  : trial {args.duration:g} s, trigger {args.trigger_ms} ms, "
        f"start {args.start_rate:,.0f} msg/s, "
        f"x{args.factor:g} per step (max {args.max_steps}), payload {PAYLOAD_BYTES} B, "
        f"SNDHWM {SEND_HWM}, publisher must reach {KEEP_UP:.0%} of the rate"
    )
    if hasattr(args, "bare_rcvhwm"):
        cap = args.max_records_per_trigger
        mode = (
            f"PATIENT: waits up to {SEND_PATIENCE * 1000:g} ms at a full send queue"
            if getattr(args, "patient", False)
            else "drops at once at its send HWM, as the real publishers do"
        )
        print(f"  publisher : {mode}")
        print(
            f"  receivers : bare SUB loop RCVHWM {args.bare_rcvhwm:,}; connector "
            f"receiveHighWaterMark {CAPTURE_RECEIVE_HWM:,} (default), maxRecordsPerTrigger "
            f"{f'{cap:,}' if cap > 0 else 'none'}"
        )
    from spark_zmq.native import status

    print(
        f"  capture   : cores {', '.join(getattr(args, 'cores', ['auto']))}; compiled core "
        f"{status()}; publisher {getattr(args, 'publisher', 'python')} send loop, "
        f"{describe_publisher_priority(getattr(args, 'publisher_nice', 0))}"
    )
    print(flush=True)


def describe_publisher_priority(nice: int | None) -> str:
    return "SCHED_FIFO 1 (real time)" if nice is None else f"nice {nice}"


TABLE_HEADER = (
    f"{'receiver':<13} {'rate/s':>9} {'sent':>9} {'received':>9} {'gaps':>8} "
    f"{'dups':>5} {'bad':>4} {'pub rate/s':>10} {'HWM drop':>8} {'p50 ms':>8} "
    f"{'p99 ms':>8} {'pub late':>8}  result"
)


def trial_row(trial: Trial) -> str:
    p50, p99 = (f"{v:8.1f}" for v in trial.latency_ms) if trial.latency_ms else ("       -",) * 2
    note = f" ({trial.error[:90]})" if trial.error else ""
    note += f"  missing: {trial.missing}" if trial.missing else ""
    return (
        f"{trial.receiver:<13} {trial.rate:>9,.0f} {trial.sent:>9,} {trial.received:>9,} "
        f"{trial.gaps:>8,} {trial.duplicates:>5} {trial.invalid:>4} "
        f"{trial.publisher_rate:>10,.0f} {trial.publisher_dropped:>8,} {p50} {p99} "
        f"{trial.publisher_late_ms:>6.1f}ms  "
        f"{trial.verdict}{note}"
    )


def print_progress(trial: Trial) -> None:
    print("  " + trial_row(trial), flush=True)


def describe_limit(outcome: SearchOutcome) -> str:
    bound = outcome.bound
    if bound is None:
        return "no failing rate found within the step budget (raise --max-steps)"
    if bound.error:
        return f"trial at {bound.rate:,.0f} msg/s failed: {bound.error[:120]}"
    if not bound.publisher_kept_up and bound.gaps == 0:
        return (
            f"the publisher: asked for {bound.rate:,.0f} msg/s it sent "
            f"{bound.publisher_rate:,.0f} msg/s (< {KEEP_UP:.0%}); the receiver lost nothing"
        )
    if not bound.publisher_kept_up and bound.publisher_dropped:
        return (
            f"the receiving side: at {bound.rate:,.0f} msg/s the publisher's send queue was "
            f"full and it dropped {bound.publisher_dropped:,} "
            f"messages ({bound.gaps:,} lost in all); waiting on it, the publisher sent "
            f"{bound.publisher_rate:,.0f} msg/s"
        )
    if not bound.publisher_kept_up:
        return (
            f"the publisher fell behind ({bound.publisher_rate:,.0f} of {bound.rate:,.0f} "
            f"msg/s) and {bound.gaps:,} messages were lost"
        )
    return (
        f"gaps: at {bound.rate:,.0f} msg/s {bound.gaps:,} of {bound.planned:,} messages were "
        f"lost ({bound.publisher_dropped:,} of them at the publisher's send HWM), "
        f"{bound.duplicates} duplicated"
    )


def print_rate_summary(outcomes: Sequence[SearchOutcome]) -> None:
    """Max no-gap rate of each receiver, what bounded it, and the ratio when both ran."""
    print("\n== rate ==")
    for outcome in outcomes:
        best = outcome.best
        shown = f"{best.rate:,.0f} msg/s" if best else "none (even the lowest rate failed)"
        print(f"max no-gap rate, {outcome.receiver:<9}: {shown}")
        print(f"  bounded by {describe_limit(outcome)}")
        counted = [t for t in outcome.trials if not t.error]
        lost = sum(t.gaps for t in counted)
        if lost:
            at_hwm = sum(t.publisher_dropped for t in counted)
            print(
                f"  over all its trials {lost:,} messages were lost: {at_hwm:,} dropped by the "
                f"publisher's send HWM, {lost - at_hwm:,} after leaving the publisher"
            )
    by_name = {outcome.receiver: outcome for outcome in outcomes}
    bare = by_name.get("bare")
    connectors = [o for o in outcomes if o.receiver != "bare"]
    if bare is None or not connectors:
        return
    for connector in connectors:
        label = f"ratio {connector.receiver} / bare"
        if bare.best and connector.best:
            ratio = connector.best.rate / bare.best.rate
            met = "met" if ratio >= RATIO_TARGET else "NOT met"
            print(f"{label:<28}: {ratio:.2f} (target >= {RATIO_TARGET}: {met})")
        else:
            print(f"{label:<28}: n/a")
    if bare.limited_by_publisher:
        print(
            "NOTE: even the bare SUB loop was limited by the publisher, not by receiving: the "
            "ratios compare the connector with what the publisher can send on this machine, "
            "not with a receive-side ceiling."
        )
    for connector in connectors:
        if connector.limited_by_publisher:
            print(
                f"NOTE: the {connector.receiver} search ended because the publisher fell behind "
                f"(it shares the cores with Spark, capture and the sink), not because of a gap."
            )


def print_latency(connector: SearchOutcome, modest: list[Trial], trigger_ms: int) -> None:
    print(
        f"\n== latency ({connector.receiver}), publish -> row in foreachBatch (taken after "
        f"toArrow) =="
    )
    labelled = [("at the max no-gap rate", connector.best)]
    labelled += [(f"at a modest rate, #{n + 1}", trial) for n, trial in enumerate(modest)]
    for label, trial in labelled:
        if trial is None or trial.latency_ms is None:
            print(f"{label:<24}: n/a")
            continue
        p50, p99 = trial.latency_ms
        print(
            f"{label:<24}: {trial.rate:>9,.0f} msg/s  p50 {p50:8.1f} ms  p99 {p99:8.1f} ms"
            f"{'' if trial.success else '  (that trial had gaps or errors)'}"
        )
    print(
        f"  (processingTime trigger of {trigger_ms} ms: a row waits ~{trigger_ms // 2} ms for a "
        f"trigger on average)"
    )


def print_memory(
    label: str, result: MemoryResult | None, sent: PublishResult | None, error: str
) -> None:
    print(f"-- {label}")
    if result is None or sent is None:
        print(f"   failed: {error}")
        return
    quarters = ", ".join(f"{q / 1024:,.0f}" for q in result.rss_at_quarters_kib)
    print(f"   publisher        : {sent.sent:,} messages at {sent.rate:,.0f} msg/s (SNDHWM 0)")
    print(
        f"   captured         : {result.messages:,} messages, {result.rows_held:,} rows held; "
        f"{result.rate:,.0f} msg/s (first message -> all in the spool)"
    )
    print(
        f"   spool bytes held : {result.spool_bytes:,} ({result.spool_bytes / (1 << 30):.2f} GiB)"
    )
    print(
        f"   baseline RSS     : {result.baseline_rss_kib / 1024:,.1f} MiB "
        f"(after imports, before capture started)"
    )
    print(f"   peak RSS         : {result.peak_rss_kib / 1024:,.1f} MiB (ru_maxrss)")
    print(f"   RSS as 25/50/75/100% had arrived: {quarters} MiB")
    print(
        f"   CPU              : {result.cpu_seconds:.2f} s, "
        f"{result.cpu_us_per_message:.2f} us/message ({result.core} receive loop; from the "
        f"first message on)"
    )


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short smoke run (1 s trials, x2 steps, 0.1 GiB spool): ~2 minutes",
    )
    parser.add_argument("--duration", type=float, help="seconds per trial (default 8; quick 1)")
    parser.add_argument(
        "--start-rate", type=float, default=20_000.0, help="first rate tried, msg/s (default 20000)"
    )
    parser.add_argument("--factor", type=float, help="rate step (default 1.5; quick 2)")
    parser.add_argument(
        "--max-steps",
        type=int,
        help="trials per search before the refinement (default 10; quick 5)",
    )
    parser.add_argument(
        "--latency-rate",
        type=float,
        default=10_000.0,
        help="modest rate of the separate latency trial (default 10000)",
    )
    parser.add_argument(
        "--trigger-ms",
        type=int,
        default=500,
        help="processingTime trigger of the connector's query (default 500)",
    )
    parser.add_argument(
        "--spool-gb", type=float, help="GiB to hold in capture's spool (default 1.0; quick 0.1)"
    )
    parser.add_argument(
        "--spool-rate",
        type=float,
        help="pace of the memory trial's publisher, msg/s, 0 = as fast as it can "
        "(default: both, first unpaced, then paced at half the rate "
        "capture reached unpaced)",
    )
    parser.add_argument(
        "--publisher",
        choices=("native", "python"),
        default="native",
        help="the publisher's send loop: the compiled core's (default) or send_multipart per "
        "message (what earlier runs used; on 2 cores it gives out before the receivers)",
    )
    parser.add_argument(
        "--publisher-nice",
        type=int,
        default=None,
        help="nice value of the publisher process (default: none, it runs SCHED_FIFO, as root; "
        "else nice -20). The real publishers run on other hosts: on a shared 2-core machine a "
        "publisher that waits for a core sends a late burst at once and overflows its own send "
        "high-water mark, a loss that is not the receiver's",
    )
    parser.add_argument(
        "--cores",
        default=",".join(CORES),
        help="capture's receive loops to measure, in this order (default native,python): one "
        "connector search and one CPU trial each",
    )
    parser.add_argument(
        "--bare-rcvhwm",
        type=int,
        default=CAPTURE_RECEIVE_HWM,
        help=f"receive high-water mark of the bare SUB loop (default {CAPTURE_RECEIVE_HWM:,}, "
        "capture's receiveHighWaterMark; 0: unbounded, what runs before 2026-11-25 used, "
        "when zmq's I/O thread queued what the loop had not taken and the loop caught up "
        "after the publisher stopped)",
    )
    parser.add_argument(
        "--max-records-per-trigger",
        type=int,
        default=MAX_RECORDS_PER_TRIGGER,
        help=f"the connector query's maxRecordsPerTrigger (default {MAX_RECORDS_PER_TRIGGER:,}; "
        "0: none). The sink collects each micro-batch into the driver: without a bound, the "
        "batch after a backlog outgrows the driver's default 1 GiB heap",
    )
    parser.add_argument(
        "--patient",
        action="store_true",
        help=f"the publisher waits up to {SEND_PATIENCE * 1000:g} ms for room in a full send "
        "queue before it drops (earlier runs' publisher). Default: it drops at once, as every "
        "ZeroEQ, Goby and yamz publisher does",
    )
    add_loss_arguments(parser)
    parser.add_argument(
        "--cpu-rate",
        type=float,
        default=50_000.0,
        help="paced rate of the CPU-per-message trials, msg/s (default 50000); each core is "
        "also measured unpaced",
    )
    parser.add_argument(
        "--skip",
        choices=("losses", "bare", "connector", "cpu", "memory"),
        action="append",
        default=[],
        help="leave a part out (repeatable)",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    args.duration = args.duration or (1.0 if quick else 8.0)
    args.rates = [float(rate) for rate in args.rates.split(",") if rate.strip()]
    if quick:
        args.rates, args.repeats = args.rates[:2], 1
    args.factor = args.factor or (2.0 if quick else 1.5)
    args.max_steps = args.max_steps or (5 if quick else 10)
    args.spool_gb = args.spool_gb if args.spool_gb is not None else (0.1 if quick else 1.0)
    args.cores = [core.strip() for core in args.cores.split(",") if core.strip()]
    if not set(args.cores) <= set(CORES):
        parser.error(f"--cores: each one of {', '.join(CORES)}")
    if args.factor <= 1 or args.duration <= 0 or args.start_rate <= 0 or args.spool_gb <= 0:
        parser.error("--factor must be > 1; --duration, --start-rate and --spool-gb > 0")
    return args


@contextlib.contextmanager
def spark_session() -> Iterator[Any]:
    """The run's one Spark session; stopped (with any query left) however the run ends."""
    spark = start_spark()
    try:
        yield spark
    finally:
        for query in spark.streams.active:
            stop_query(query)
        spark.stop()


def measure_bare(args: argparse.Namespace, bench: Bench) -> SearchOutcome:
    print("bare pyzmq SUB loop:", flush=True)
    return search(
        "bare",
        lambda rate: run_bare_trial(bench, rate),
        args.start_rate,
        args.factor,
        args.max_steps,
        print_progress,
    )


def measure_connector(args: argparse.Namespace, bench: Bench) -> SearchOutcome:
    """A warm-up trial (the first query pays for starting Python workers and JIT), then the
    search, with capture's receive loop ``bench.core``."""
    receiver = f"conn-{bench.core[:3]}"
    print(f"connector ({bench.core} capture core) -> foreachBatch:", flush=True)
    warm = run_connector_trial(bench, 5_000, "warm-up", duration=1.0)
    print(f"  {trial_row(warm)}   [warm-up, not counted]", flush=True)
    outcome = search(
        receiver,
        lambda rate: run_connector_trial(bench, rate, receiver),
        args.start_rate,
        args.factor,
        args.max_steps,
        print_progress,
    )
    return outcome


def measure_latency(args: argparse.Namespace, bench: Bench) -> dict[str, list[Trial]]:
    """Latency trials at the modest rate, the cores taking turns (twice each), so that neither
    gets the colder JVM or the quieter minute: by connector receiver name."""
    print(f"latency at {args.latency_rate:,.0f} msg/s, the cores taking turns:", flush=True)
    trials: dict[str, list[Trial]] = {}
    for _ in range(2):
        for core in args.cores:
            trial = run_connector_trial(
                replace(bench, core=core), args.latency_rate, f"lat-{core[:3]}"
            )
            print_progress(trial)
            trials.setdefault(f"conn-{core[:3]}", []).append(trial)
    return trials


def print_rates(
    outcomes: Sequence[SearchOutcome], modest: dict[str, list[Trial]], trigger_ms: int
) -> None:
    print("\n== all trials ==")
    print(TABLE_HEADER)
    later = [trial for trials in modest.values() for trial in trials]
    for trial in [t for outcome in outcomes for t in outcome.trials] + later:
        print(trial_row(trial))
    print(
        "(HWM drop: messages the publisher's send high-water mark dropped, part of the gaps; "
        "pub late: the publisher's longest delay behind its schedule)"
    )
    print_rate_summary(outcomes)
    for outcome in outcomes:
        if outcome.receiver in modest:
            print_latency(outcome, modest[outcome.receiver], trigger_ms)


def measure_cpu(args: argparse.Namespace, bench: Bench) -> None:
    """Process CPU time per message of the bare SUB loop and of capture alone with each core
    (no Spark), one after the other with the same publisher: paced at --cpu-rate, then as fast
    as the publisher sends (capture's own ceiling)."""
    for rate in (args.cpu_rate, 0.0):
        pace = f"{rate:,.0f} msg/s" if rate else "unpaced"
        print(
            f"\n== CPU per message, {pace}, {PAYLOAD_BYTES}-byte events, no Spark "
            f"(process CPU time / messages) ==",
            flush=True,
        )
        count = planned_count(rate or 4 * args.cpu_rate, args.duration)
        rows: list[tuple[str, float, int, float, str]] = []
        if rate:
            bare = run_bare_trial(bench, rate)
            note = bare.error or bare.verdict
            rows.append(("bare pyzmq SUB loop", bare.cpu_seconds, bare.received, 0.0, note))
        for core in args.cores:
            result, sent, error = run_memory_trial(
                replace(bench, core=core), count, rate, PAYLOAD_BYTES
            )
            if result is None or sent is None:
                rows.append((f"capture, {core}", 0.0, 0, 0.0, f"failed: {error}"))
                continue
            split = ", ".join(
                f"{name} {seconds / max(1, result.cpu_messages) * 1e6:.2f}"
                for name, seconds in result.cpu_by_thread
            )
            note = f"{result.core} loop; us/msg by thread: {split}"
            rows.append(
                (f"capture, {core}", result.cpu_seconds, result.cpu_messages, result.rate, note)
            )
        print_cpu_rows(rows)


def print_cpu_rows(rows: list[tuple[str, float, int, float, str]]) -> None:
    """One line per receiver: CPU seconds, messages, us per message, and its ratio to the first
    line's us per message."""
    print(
        f"{'receiver':<22} {'CPU s':>7} {'messages':>10} {'us/msg':>7} {'ratio':>6} {'msg/s':>10}"
    )
    first = None
    for label, cpu, messages, rate, note in rows:
        per = cpu / messages * 1e6 if messages else float("nan")
        first = first or per
        shown_rate = f"{rate:>10,.0f}" if rate else f"{'-':>10}"
        print(
            f"{label:<22} {cpu:>7.2f} {messages:>10,} {per:>7.2f} {per / first:>6.2f} "
            f"{shown_rate}  {note}"
        )
    print(
        "(capture: CPU time and messages from its first message to all in the spool, start-up "
        "left out; msg/s: its rate in that time)"
    )


def measure_memory(args: argparse.Namespace, bench: Bench) -> None:
    """Capture alone: unpaced (its throughput; any backlog sits in its receive queue, since it
    uses receive high-water mark 0) and then paced at half that rate (its steady-state memory),
    unless --spool-rate picks one pace."""
    print(
        f"\n== capture alone, ~{args.spool_gb:g} GiB of 1 KiB events into its spool (no Spark) ==",
        flush=True,
    )
    first = memory_trial(bench, args.spool_gb, args.spool_rate or 0.0)
    if args.spool_rate is None and first is not None and first.rate > 0:
        memory_trial(bench, args.spool_gb, round(first.rate / 2, -3) or first.rate / 2)


def memory_trial(bench: Bench, gib: float, pace: float) -> MemoryResult | None:
    count = max(1, round(gib * (1 << 30) / MEMORY_PAYLOAD_BYTES))
    memory, sent, error = run_memory_trial(bench, count, pace)
    label = "publisher as fast as it can" if pace <= 0 else f"publisher paced at {pace:,.0f} msg/s"
    print_memory(label, memory, sent, error)
    return memory


def measure_with_spark(
    args: argparse.Namespace, bench: Bench
) -> tuple[list[SearchOutcome], dict[str, list[Trial]]]:
    """The sections that need the run's one Spark session: the loss table, then the searches
    (the bare loop's first, while no query runs)."""
    outcomes: list[SearchOutcome] = []
    modest: dict[str, list[Trial]] = {}
    with spark_session() as spark:
        if "losses" not in args.skip:
            measure_losses(args, replace(bench, spark=spark))
        if "bare" not in args.skip:
            outcomes.append(measure_bare(args, bench))
        if "connector" not in args.skip:
            for core in args.cores:
                outcomes.append(measure_connector(args, replace(bench, spark=spark, core=core)))
            modest = measure_latency(args, replace(bench, spark=spark))
    return outcomes, modest


def main() -> int:
    args = parse_args(sys.argv[1:])
    ensure_private_network(__file__)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    print_header(args)
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="zeroeq_rate-"))
    bench = Bench(
        multiprocessing.get_context("spawn"),
        workdir,
        args.duration,
        args.trigger_ms,
        native_publisher=args.publisher == "native",
        publisher_nice=args.publisher_nice or 0,
        patience=SEND_PATIENCE if args.patient else 0.0,
        publisher_realtime=args.publisher_nice is None,
        core=args.cores[0] if args.cores else "auto",
        bare_receive_hwm=args.bare_rcvhwm,
        max_records_per_trigger=args.max_records_per_trigger,
    )
    try:
        outcomes: list[SearchOutcome] = []
        modest: dict[str, list[Trial]] = {}
        if "losses" not in args.skip or "connector" not in args.skip:
            outcomes, modest = measure_with_spark(args, bench)
        elif "bare" not in args.skip:
            outcomes.append(measure_bare(args, bench))
        if outcomes:
            print_rates(outcomes, modest, args.trigger_ms)
        if "cpu" not in args.skip:
            measure_cpu(args, bench)
        if "memory" not in args.skip:
            measure_memory(args, bench)
    finally:
        for child in multiprocessing.active_children():  # only if a trial was interrupted
            child.terminate()
            child.join(5.0)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\ntotal time {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
