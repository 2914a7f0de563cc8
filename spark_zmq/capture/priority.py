"""Capture's scheduling priority: its receive thread and its zmq I/O thread get the CPU first.

While a micro-batch runs, Spark's JVM and the Python read tasks can take every core of the
driver's host. Messages keep arriving, and the publishers of ZeroEQ, Goby and yamz drop at once
when their 1,000-message send queue is full (12 ms at 85,000 msg/s): if capture's thread or
zmq's I/O thread waits that long for a core, messages are lost before capture ever sees them.
A lower nice value makes the kernel run them ahead of the read tasks whenever they wake.

How (Linux): nice is a per-thread attribute, and a thread starts with its creator's. The capture
thread lowers its own nice value (``setpriority`` on its thread id) before it opens anything, and
capture's zmq context is created by that thread, so zmq's I/O thread (and its reaper) inherit
the value. libzmq's own ``ZMQ_THREAD_PRIORITY`` is not used: under ``SCHED_OTHER`` it calls
``nice(-20)`` whatever value is given, and aborts the process (``errno_assert``) when that is
not permitted.

Raising priority needs ``CAP_SYS_NICE`` (root has it) or an ``RLIMIT_NICE`` that allows the
value; without either, capture runs at the priority it was given and says so once.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace

from spark_zmq.log import logger


@dataclass(frozen=True)
class PriorityOutcome:
    """What ``raise_this_thread`` did: the nice value the thread runs at, and whether it is
    the one asked for."""

    asked: int
    nice: int
    reason: str = ""  # why not, when ``nice`` is not ``asked``
    #: the main thread's nice value before capture raised it (None: not raised)
    main_before: int | None = None

    @property
    def took_effect(self) -> bool:
        return self.nice == self.asked


def thread_nice(tid: int) -> int:
    """The nice value of thread ``tid`` of any process (``getpriority`` on a thread id)."""
    return os.getpriority(os.PRIO_PROCESS, tid)


def raise_this_thread(nice: int) -> PriorityOutcome:
    """Give the calling thread nice value ``nice`` (threads it starts from now on inherit it).
    Never raises: a refusal (no ``CAP_SYS_NICE``, ``RLIMIT_NICE`` too low) leaves the thread
    as it was, and the outcome says why."""
    tid = threading.get_native_id()
    before = thread_nice(tid)
    if nice == before:
        return PriorityOutcome(nice, before)
    try:
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    except PermissionError:
        return PriorityOutcome(nice, before, "not permitted: needs CAP_SYS_NICE or RLIMIT_NICE")
    except OSError as exc:
        return PriorityOutcome(nice, before, str(exc))
    return PriorityOutcome(nice, thread_nice(tid))


def raise_main_thread(nice: int) -> int | None:
    """Give the process's main thread nice value ``nice`` too, if it is above it: its value
    before, or None if it was not raised."""
    main = os.getpid()  # the main thread's id is the process's
    try:
        before = thread_nice(main)
        if before <= nice:
            return None
        os.setpriority(os.PRIO_PROCESS, main, nice)
    except OSError:
        return None
    return before


def restore_main_thread(outcome: PriorityOutcome | None) -> None:
    """Give the main thread back the nice value it had before ``protect_capture`` (always
    permitted: it lowers priority), so that a process that ran capture for a while (a test, a
    notebook that read a stream in-process) does not keep capture's priority."""
    if outcome is None or outcome.main_before is None:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, os.getpid(), outcome.main_before)
    except OSError as exc:
        logger.warning("capture priority: main thread's nice value not restored: %s", exc)


def protect_capture(
    name: str, nice: int | None, main_thread: bool = False
) -> PriorityOutcome | None:
    """Called first thing in capture's thread: its priority, and one log line that says which
    protection took effect. ``nice`` None: leave the priority alone (``captureNice=off``).
    ``main_thread``: the process is capture's own (the query's source process, a holder, the
    service), and its main thread, which answers Spark's calls holding Python's lock that
    capture's thread needs at every flush, gets the same priority: otherwise capture waits
    for the lock while that thread waits for a core."""
    if nice is None:
        logger.info("%s: capture priority: left as is (captureNice=off)", name)
        return None
    outcome = raise_this_thread(nice)
    if outcome.took_effect:
        main_before = raise_main_thread(nice) if main_thread else None
        outcome = replace(outcome, main_before=main_before)
        logger.info(
            "%s: capture priority: nice %d for capture's thread and its zmq I/O thread%s",
            name,
            outcome.nice,
            "" if main_before is None else ", and this process's main thread while it runs",
        )
    else:
        logger.warning(
            "%s: capture priority: could not set nice %d for capture's thread and its zmq I/O "
            "thread (%s): they run at nice %d beside Spark's tasks, and a busy host may make "
            "publishers drop. Grant CAP_SYS_NICE or raise RLIMIT_NICE, or set captureNice=off "
            "to silence this line",
            name,
            nice,
            outcome.reason,
            outcome.nice,
        )
    return outcome
