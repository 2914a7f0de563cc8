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


def busy(seconds: float, ready: threading.Event, done: threading.Event, ids: list[int]) -> None:
    ids.append(threading.get_native_id())
    ready.set()
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    done.wait(30)


def test_capture_cpu_is_the_capture_threads_and_not_the_others():
    """0.3 s of CPU in the thread the stats name, 0.3 s in another: about 0.3 s counted."""
    stats = CaptureStats()
    ids: list[int] = []
    threads = []
    done = threading.Event()
    for _ in range(2):
        ready = threading.Event()
        thread = threading.Thread(target=busy, args=(0.3, ready, done, ids))
        thread.start()
        ready.wait(10)
        threads.append(thread)
    stats.thread_id = ids[0]
    try:
        time.sleep(1)  # both have burnt their CPU by now (at least 0.3 s each)
        cpu = stats.cpu_seconds()
        assert cpu is not None and 0.25 <= cpu < 0.5, cpu
    finally:
        done.set()
        for thread in threads:
            thread.join()


def test_capture_cpu_counts_the_threads_of_its_zmq_context():
    """The capture context's threads carry the stats' prefix (``PREFIX/ZMQbg/IO/0``), so that
    a scrape finds them; another context's threads do not."""
    stats = CaptureStats()
    context, other = capture_context(stats.thread_prefix), zmq.Context()
    sockets = [context.socket(zmq.SUB), other.socket(zmq.SUB)]  # zmq starts its threads
    try:
        names = {
            open(f"/proc/self/task/{task}/comm").read().strip()
            for task in os.listdir("/proc/self/task")
        }
        assert f"{stats.thread_prefix}/ZMQbg/IO/0" in names, names
        assert "ZMQbg/IO/0" in names, "the other context's threads keep zmq's own names"
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
