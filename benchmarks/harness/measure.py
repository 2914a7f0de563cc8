"""What a benchmark process measures of itself: CPU time (whole process and by thread) and
resident memory, from ``resource`` and ``/proc``."""

from __future__ import annotations

import os
import resource
import threading
from pathlib import Path
from typing import Any

#: per thread: (name, CPU seconds)
ThreadTimes = dict[int, tuple[str, float]]


def cpu_seconds() -> float:
    """CPU time of this process so far, user and system, all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def thread_cpu_seconds() -> ThreadTimes:
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


def cpu_by_thread(before: ThreadTimes, capture_thread: int | None) -> tuple[tuple[str, float], ...]:
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


def rss_kib() -> int:
    """Current resident set size (VmRSS), KiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def peak_rss_kib() -> int:
    """Peak resident set size of this process (ru_maxrss), KiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def capture_thread_id(name: str) -> int | None:
    """The native id of the thread that runs capture ``name`` (it names its thread
    ``spark_zmq <name>``), found among this process's threads rather than in capture's own
    attributes."""
    for thread in threading.enumerate():
        if thread.name == f"spark_zmq {name}":
            return thread.native_id
    return None


# -- finer: nanoseconds and wake-ups from schedstat (capture_cpu.py) --------------------------


def thread_times() -> dict[int, tuple[str, int, int]]:
    """{thread id: (name, CPU ns, voluntary context switches)} of this process."""
    threads = {}
    for tid in os.listdir("/proc/self/task"):
        base = f"/proc/self/task/{tid}"
        try:
            name = Path(f"{base}/comm").read_text().strip()
            ns = int(Path(f"{base}/schedstat").read_text().split()[0])
            status = Path(f"{base}/status").read_text()
        except OSError:
            continue
        switches = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
        threads[int(tid)] = (name, ns, switches)
    return threads


def split_threads(before: dict[int, tuple[str, int, int]], capture_tid: int) -> dict[str, Any]:
    """CPU ns and wake-ups since ``before``: capture's thread, zmq's I/O thread(s), the rest."""
    split: dict[str, list[int]] = {
        "capture": [0, 0],
        "zmq I/O": [0, 0],
        "other": [0, 0],
    }
    for tid, (name, ns, switches) in thread_times().items():
        _, ns0, switches0 = before.get(tid, (name, 0, 0))
        group = "other"
        if tid == capture_tid:
            group = "capture"
        elif name.startswith("ZMQbg"):
            group = "zmq I/O"
        split[group][0] += ns - ns0
        split[group][1] += switches - switches0
    return split


def cpu_ns() -> int:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return round((usage.ru_utime + usage.ru_stime) * 1e9)
