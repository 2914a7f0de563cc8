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
    #: this capture holds the process's main thread at ``nice`` (``MainThreadHolds.hold``)
    holds_main: bool = False

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


class MainThreadHolds:
    """The captures of one process that hold its main thread at their nice value.

    Invariant: while any capture holds it, the main thread runs at the lowest nice value held;
    once the last one lets go, it runs at the value it had before the first hold. Two captures
    in one process (Spark gives each streaming source a process of its own, but a program may
    run two captures, as the tests do) therefore do not undo each other: the first to stop
    does not lower the main thread under the one still running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[int] = []  # the nice value of each hold
        self._own = 0  # the main thread's value before the first hold

    def hold(self, nice: int) -> bool:
        """Hold the main thread at ``nice`` if that raises it above its own value: whether it
        is held (a hold needs ``release``)."""
        main = os.getpid()  # the main thread's id is the process's
        with self._lock:
            try:
                current = thread_nice(main)
                own = self._own if self._held else current
                if nice >= own:
                    return False
                if nice < current:
                    os.setpriority(os.PRIO_PROCESS, main, nice)
            except OSError:
                return False
            self._own = own
            self._held.append(nice)
            return True

    def release(self, nice: int) -> None:
        """Let go of one hold at ``nice``: the main thread runs at the lowest value still held,
        or at its own once none is (always permitted: it lowers priority)."""
        with self._lock:
            self._held.remove(nice)
            target = min(self._held, default=self._own)
            try:
                os.setpriority(os.PRIO_PROCESS, os.getpid(), target)
            except OSError as exc:
                logger.warning("capture priority: main thread's nice value not restored: %s", exc)


#: this process's holds on its main thread
MAIN_THREAD = MainThreadHolds()


def restore_main_thread(outcome: PriorityOutcome | None) -> None:
    """Let go of the main thread that ``protect_capture`` held, so that a process that ran
    capture for a while (a test, a notebook that read a stream in-process) gets its own
    priority back once no capture in it runs."""
    if outcome is not None and outcome.holds_main:
        MAIN_THREAD.release(outcome.nice)


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
        outcome = replace(outcome, holds_main=main_thread and MAIN_THREAD.hold(nice))
        logger.info(
            "%s: capture priority: nice %d for capture's thread and its zmq I/O thread%s",
            name,
            outcome.nice,
            ", and this process's main thread while it runs" if outcome.holds_main else "",
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
