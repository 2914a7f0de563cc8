"""What a capture counts about itself for its metrics (``capture.stats``): the CPU of its
threads (its own and its zmq context's, named by their prefix), read from the kernel, and
its flush times by bucket. Counted through a real capture: tests/cli/test_capture_service.py."""

from __future__ import annotations

import os
import threading
import time

import zmq

from spark_zmq.capture.limits import capture_context
from spark_zmq.capture.stats import FLUSH_BUCKETS, CaptureStats, FlushTimes
from support.common import wait_until


def busy(seconds: float, burnt: threading.Event, done: threading.Event, ids: list[int]) -> None:
    """Use ``seconds`` of CPU, say so, and live on until ``done``."""
    ids.append(threading.get_native_id())
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    burnt.set()
    done.wait(60)


def test_capture_cpu_is_the_capture_threads_and_not_the_others():
    """0.3 s of CPU in the thread the stats name, 0.3 s in another: about 0.3 s counted."""
    stats = CaptureStats()
    ids: list[int] = []
    threads, burnt = [], []
    done = threading.Event()
    for _ in range(2):
        burnt.append(threading.Event())
        thread = threading.Thread(target=busy, args=(0.3, burnt[-1], done, ids))
        thread.start()
        threads.append(thread)
    try:
        assert all(event.wait(60) for event in burnt), "the threads did not burn their CPU"
        stats.thread_id = ids[0]
        cpu = stats.cpu_seconds()
        assert cpu is not None and 0.25 <= cpu < 0.5, cpu
    finally:
        done.set()
        for thread in threads:
            thread.join()


def thread_names() -> set[str]:
    names = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.add(comm.read().strip())
        except OSError:
            continue  # it ended
    return names


def test_capture_cpu_counts_the_threads_of_its_zmq_context():
    """The capture context's threads carry the stats' prefix (``PREFIX/ZMQbg/IO/0``), so that
    a scrape finds them; another context's threads do not (a thread names itself once it runs:
    the test waits for that)."""
    stats = CaptureStats()
    context, other = capture_context(stats.thread_prefix), zmq.Context()
    sockets = [context.socket(zmq.SUB), other.socket(zmq.SUB)]  # zmq starts its threads
    try:
        wait_until(
            lambda: f"{stats.thread_prefix}/ZMQbg/IO/0" in thread_names(),
            timeout=30,
            what="capture's zmq I/O thread under its prefix",
        )
        assert "ZMQbg/IO/0" in thread_names(), "the other context's threads keep zmq's names"
        assert stats.cpu_seconds() is not None
    finally:
        for sock in sockets:
            sock.close(0)
        context.term()
        other.term()


def test_flush_times_fall_in_cumulative_buckets():
    flushes = FlushTimes()
    for seconds in (0.0005, 0.003, 0.003, 0.2, 10.0):
        flushes.observe(seconds)
    histogram = flushes.histogram()
    by_bound = dict(zip([*FLUSH_BUCKETS, float("inf")], histogram.buckets, strict=True))
    assert by_bound[0.001] == 1 and by_bound[0.005] == 3 and by_bound[0.25] == 4
    assert by_bound[5.0] == 4 and by_bound[float("inf")] == 5
    assert abs(histogram.total - 10.2065) < 1e-9
