"""The publisher every benchmark sends with: a process of its own with an XPUB socket, pacing
ZeroEQ events at a requested rate, behaving as a real ZeroEQ, Goby or yamz publisher does.

A real publisher drops a message at once when its send queue (the high-water mark) is full;
so does this one by default. XPUB_NODROP turns the drop into EAGAIN, so that the publisher
drops the message itself and counts it: the same wire behaviour, but the report can tell gaps
made at the publisher from gaps made after it. ``patience`` (the ``--patient`` mode of earlier
runs) waits that long for room first; ``BLOCK`` waits for good (a reference that loses
nothing, as the writer does with its own high-water mark).

Every message is two frames: the event id, and a payload that starts with its sequence number
and send time (``HEAD``, both 8-byte big-endian), zero padding after. The compiled send loop
(``native``) writes the same bytes as the Python loop; it is the default of the rate
benchmarks, since a Python publisher on a small machine is the first thing to give out.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing.connection
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq

from harness.children import Child, report_errors
from spark_zmq.protocols.zeroeq import event_id
from spark_zmq.spark.session import LOOPBACK

TICK_EVENT = "bench::Tick"
#: sequence number and send time (ns), both 8-byte big-endian, at the start of every payload
HEAD = struct.Struct(">QQ")
PAYLOAD_BYTES = 100
SEND_HWM = 1000
#: the publisher sends one burst per tick, sized to stay on schedule
TICK_SECONDS = 0.001
#: how long the patient publisher (``--patient``) waits for room in a full send queue before it
#: drops; the default publisher drops at once, as every ZeroEQ, Goby and yamz publisher does
SEND_PATIENCE = 0.01
#: ``patience`` that never drops: the send waits for room as long as it takes (Python loop)
BLOCK = math.inf
SUBSCRIBE_TIMEOUT = 120.0
#: longest a publisher keeps its socket open after sending, waiting for the bench to release it
RELEASE_TIMEOUT = 600.0


@dataclass(frozen=True)
class PublishPlan:
    """What one publisher process sends. ``rate`` 0 means as fast as it can."""

    count: int
    rate: float
    payload_bytes: int = PAYLOAD_BYTES
    #: the send high-water mark; 0: unbounded (nothing is ever dropped)
    send_hwm: int = SEND_HWM
    first: int = 0  # sequence number of the first message (several publishers, one count)
    #: send with the compiled send loop (``send_sequence``) rather than send_multipart per
    #: message: the publisher is then not the first to give out
    native: bool = False
    #: the publisher process's nice value (its zmq I/O thread's too); negative: it wins the CPU
    #: from the receivers and Spark, so that its send high-water mark overflows only when the
    #: receiving side stops taking, not when the publisher itself waits for a core
    nice: int = 0
    #: seconds a message waits for room in a full send queue before it is dropped: 0 (the
    #: default) drops at once, as the real publishers do; SEND_PATIENCE with ``--patient``;
    #: BLOCK waits for good (Python loop only)
    patience: float = 0.0
    #: SCHED_FIFO (``run_in_real_time``) instead of ``nice``
    realtime: bool = False
    #: the ZeroEQ event whose id is the first frame; a subscriber may subscribe to that prefix
    event: str = TICK_EVENT


def add_priority_argument(parser: argparse.ArgumentParser) -> None:
    """``--publisher-nice N``: the publisher process's nice value; without it, the publisher
    runs SCHED_FIFO (``publisher_priority``)."""
    parser.add_argument(
        "--publisher-nice",
        type=int,
        default=None,
        help="nice value of the publisher process (default: none, it runs SCHED_FIFO, as root; "
        "else nice -20). The real publishers run on other hosts: on a shared 2-core machine a "
        "publisher that waits for a core sends a late burst at once and overflows its own send "
        "high-water mark, a loss that is not the receiver's",
    )


def publisher_priority(nice: int | None) -> tuple[int, bool]:
    """``PublishPlan``'s (``nice``, ``realtime``) for ``--publisher-nice`` (None: SCHED_FIFO)."""
    return (0, True) if nice is None else (nice, False)


@dataclass(frozen=True)
class PublishResult:
    """``sent`` counts every message handed to zmq, ``dropped`` those of them that the send
    high-water mark dropped (the subscriber's queue at the publisher was full)."""

    sent: int
    seconds: float  # from the subscription to the last send
    dropped: int
    #: the publisher's longest delay behind its schedule, ms: a publisher that waited this long
    #: for a core sends a burst this long at once; more than its queue holds drops by itself
    late_ms: float = 0.0
    ended: float = 0.0  # wall-clock time (time.time()) of the last send

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds > 0 else 0.0


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

    @property
    def address(self) -> str:
        """``host:port`` of its XPUB, as the readers' ``publishers`` option takes it."""
        return f"{LOOPBACK}:{self.port}"

    def result(self, timeout: float) -> PublishResult:
        result: PublishResult = self._child.expect("sent", timeout)
        return result

    def finish(self) -> None:
        """Let it close its socket (everything is received by now) and reap it."""
        self._release.set()
        self._child.stop()


class PublisherGroup:
    """Several publisher processes that share one count (each its own run of sequence numbers,
    ``PublishPlan.first``) and report as one: what a query reading several endpoints gets."""

    def __init__(self, context: Any, plans: list[PublishPlan]) -> None:
        self.members: list[PublisherProcess] = []
        try:
            for plan in plans:
                self.members.append(PublisherProcess(context, plan))
        except BaseException:
            self.finish()
            raise

    @property
    def addresses(self) -> str:
        """The readers' ``publishers`` option: every member's ``host:port``."""
        return ",".join(member.address for member in self.members)

    def result(self, timeout: float) -> PublishResult:
        """Every member's result as one: counts summed; time, delay and end the longest."""
        results = [member.result(timeout) for member in self.members]
        return PublishResult(
            sum(r.sent for r in results),
            max(r.seconds for r in results),
            sum(r.dropped for r in results),
            max(r.late_ms for r in results),
            max(r.ended for r in results),
        )

    def finish(self) -> None:
        for member in self.members:
            member.finish()


def publisher_main(
    plan: PublishPlan, release: Any, conn: multiprocessing.connection.Connection
) -> None:
    """Bind an XPUB on a random loopback port, report it, wait for a subscriber to the plan's
    event, send ``plan``, report, then keep the socket open until released so nothing queued is
    lost at close."""

    def body() -> None:
        set_priority(plan)
        context = zmq.Context()  # its I/O thread starts now, with the process's priority
        sock = context.socket(zmq.XPUB)
        sock.setsockopt(zmq.SNDHWM, plan.send_hwm)
        sock.setsockopt(zmq.XPUB_NODROP, 1)  # EAGAIN at the mark: dropped by us, and counted
        sock.setsockopt(zmq.SNDTIMEO, send_timeout_ms(plan.patience))
        sock.setsockopt(zmq.LINGER, 2000)
        try:
            conn.send(("port", sock.bind_to_random_port(f"tcp://{LOOPBACK}")))
            wait_for_subscriber(sock, event_id(plan.event), SUBSCRIBE_TIMEOUT)
            conn.send(("sent", send_all(sock, plan)))
            release.wait(RELEASE_TIMEOUT)
        finally:
            sock.close()
            context.term()

    report_errors(conn, body)


def set_priority(plan: PublishPlan) -> None:
    """The plan's priority for this process, before the zmq context (its I/O thread inherits
    it); not permitted: as is."""
    if plan.realtime:
        run_in_real_time()
    elif plan.nice:
        with contextlib.suppress(PermissionError):  # not root: the default priority
            os.setpriority(os.PRIO_PROCESS, 0, plan.nice)


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


def send_timeout_ms(patience: float) -> int:
    """ZMQ_SNDTIMEO for the Python loop: 0 drops at once, -1 waits for good."""
    return -1 if math.isinf(patience) else round(patience * 1000)


def wait_for_subscriber(sock: zmq.Socket, topic: bytes, timeout: float) -> None:
    """Block until a subscription arrives whose prefix matches ``topic`` (b"" matches all):
    from then on the publisher's trie delivers every message to that subscriber."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not sock.poll(100):
            continue
        message = sock.recv()
        if message[:1] == b"\x01" and topic.startswith(message[1:]):
            return
    raise TimeoutError(f"no subscriber within {timeout:.0f} s")


def send_all(sock: zmq.Socket, plan: PublishPlan) -> PublishResult:
    """Send ``plan.count`` events, paced: each ~1 ms tick sends what the schedule says is due by
    now, so a late tick catches up and the average rate is the requested one."""
    send = native_sender(sock, plan) if plan.native else python_sender(sock, plan)
    count, rate, clock = plan.count, plan.rate, time.perf_counter
    sent = dropped = 0
    late = 0.0
    start = tick = clock()
    while sent < count:
        now = clock()
        due = count if rate <= 0 else min(count, int((now - start) * rate) + 1)
        if rate > 0:
            late = max(late, now - start - sent / rate)
        # one call per tick; at most a tick's worth (and at least 1000) at a time
        burst = min(due - sent, max(1000, int(rate * TICK_SECONDS)))
        dropped += send(plan.first + sent, burst)
        sent += burst
        tick += TICK_SECONDS
        delay = tick - clock()
        if delay > 0 and sent < count:
            time.sleep(delay)
        elif delay <= 0:
            tick = clock()  # behind: the schedule (not sleep debt) decides the next burst
    return PublishResult(sent, clock() - start, dropped, late * 1000, time.time())


def python_sender(sock: zmq.Socket, plan: PublishPlan) -> Callable[[int, int], int]:
    """send(first, count) -> dropped, with send_multipart per message; a message that finds
    the queue full after the socket's SNDTIMEO (``plan.patience``) is dropped and counted."""
    wire_id, padding = event_id(plan.event), bytes(plan.payload_bytes - HEAD.size)
    pack, send, wall_ns, again = HEAD.pack, sock.send_multipart, time.time_ns, zmq.Again

    def send_run(first: int, count: int) -> int:
        dropped = 0
        for sequence in range(first, first + count):
            try:
                send([wire_id, pack(sequence, wall_ns()) + padding])
            except again:
                dropped += 1
        return dropped

    return send_run


def native_sender(sock: zmq.Socket, plan: PublishPlan) -> Callable[[int, int], int]:
    """send(first, count) -> dropped, through the compiled send loop. A full send queue is
    given ``plan.patience`` seconds before a message counts as dropped (0: at once, as the real
    publishers drop). The patient mode absorbs stalls of the receiving side shorter than
    ``patience``: exactly the stalls that lose messages with the real publishers."""
    if math.isinf(plan.patience):
        raise ValueError("the compiled send loop takes a finite patience; BLOCK: the Python loop")
    # the benchmarks' one import of the compiled publisher loop
    from native_publisher import send_sequence  # benchmarks/native_publisher.pyx (setup.sh)

    address, topic, body = sock.underlying, event_id(plan.event), bytes(plan.payload_bytes)
    return lambda first, count: send_sequence(address, topic, body, first, count, plan.patience)
