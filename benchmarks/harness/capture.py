"""Capture alone in a process of its own (no Spark): a publisher into ``Capture`` into a spool,
and what that process spends: CPU time (by thread) per message, and memory as the spool
fills."""

from __future__ import annotations

import multiprocessing.connection
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.children import Child, report_errors
from harness.measure import (
    capture_thread_id,
    cpu_by_thread,
    cpu_seconds,
    peak_rss_kib,
    rss_kib,
    thread_cpu_seconds,
)
from harness.publisher import SUBSCRIBE_TIMEOUT, PublisherProcess, PublishPlan, PublishResult
from harness.receivers import IDLE_SECONDS
from harness.trials import Bench
from spark_zmq.protocols.zeroeq import MEERKAT, event_id
from spark_zmq.spark.session import LOOPBACK

MEMORY_PAYLOAD_BYTES = 1024
#: capture's name in these trials, and so its thread's: ``spark_zmq <name>``
CAPTURE_NAME = "bench"


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


def capture_memory_main(
    port: int,
    count: int,
    root: str,
    max_bytes: int,
    timeout: float,
    core: str | None,
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
            spool, max_message_bytes=64 << 20, flush_interval=0.1, name=CAPTURE_NAME, core=core
        )
        baseline = rss_kib()
        at_first: dict[str, Any] = {}  # cpu, threads, received

        def first_seen(received: int) -> None:
            at_first.update(cpu=cpu_seconds(), threads=thread_cpu_seconds(), received=received)

        capture.start()
        key = f"{LOOPBACK}:{port}"
        StaticDiscovery(
            [Endpoint(key, f"tcp://{key}", {"publisher": key}, (b"", event_id(MEERKAT)))]
        ).start(capture)
        try:
            first, quarters = watch_capture(capture, count, timeout, first_seen)
            capture.sync(timeout=300)
            cpu = cpu_seconds() - at_first.get("cpu", 0.0)
            threads = cpu_by_thread(at_first.get("threads", {}), capture_thread_id(CAPTURE_NAME))
            seconds = time.monotonic() - first if first else 0.0
            held = sum(state.end - state.start for state in spool.snapshot().values())
            received = sum(capture.received().values())
            result = MemoryResult(
                received,
                held,
                spool.nbytes,
                baseline,
                peak_rss_kib(),
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


def watch_capture(
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
