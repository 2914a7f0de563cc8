"""Capture's CPU time per message at a paced rate, variants side by side in one run.

A publisher process (XPUB, the compiled core's send loop, ~1 ms ticks as in ``zeroeq_rate``)
sends 100-byte ZeroEQ events at ``--rate``; a fresh capture process (``Capture`` into a spool,
no Spark) receives them. Its CPU time is counted from the first message it sees until all of
them are in the spool, as ``zeroeq_rate``'s CPU part does, and split by thread from
``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds, not clock ticks): capture's thread, zmq's I/O
thread(s) and the rest (the main thread, which here only watches the counters every 20 ms).
Wake-ups are the threads' voluntary context switches.

What is compared, each repeat in turn (so that a noisy neighbour hits all alike):

* ``--variant LABEL=TREE``: capture imported from the source tree ``TREE`` (with its compiled
  core built in place, e.g. ``git archive <commit> | tar -x -C /tmp/base && cd /tmp/base &&
  ../venv/bin/python setup.py build_ext --inplace``); default: this checkout, as ``current``;
* ``--bare``: a plain pyzmq SUB loop (``recv_multipart`` per message) in the same conditions;
* ``--flush-ms 100,250``: each variant once per value of capture's ``flushIntervalMs`` (a
  flush costs about the same whatever it holds, so fewer flushes cost less per message).

Run it as ``python benchmarks/capture_cpu.py [--rate 50000] [--seconds 4] [--repeats 5]
[--variant base=/tmp/base] [--bare] [--flush-ms 100]``; it re-executes itself in a private
network namespace. The report gives each variant's median (and range) of us per message,
overall and by thread.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.hermetic import ensure_private_network
from harness.measure import capture_thread_id, cpu_ns, split_threads, thread_times
from harness.trees import CHECKOUT, add_variant_argument, source_trees, tree_environment

PAYLOAD_BYTES = 100  # the shared publisher's (harness.publisher)
TICK_SECONDS = 0.001
#: a receiver that saw messages and then nothing for this long stops waiting
IDLE_SECONDS = 3.0
TIMEOUT = 120.0
BARE = "bare pyzmq loop"


# -- receivers (run as a subprocess of their own: ``--role``) --------------------------------------


def capture_role(port: int, count: int, receive_hwm: int, flush_ms: int) -> dict[str, Any]:
    """The package's Capture alone, into a spool in a temporary folder, flushing every
    ``flush_ms`` (``flushIntervalMs``)."""
    import spark_zmq
    from spark_zmq.capture.loop import Capture
    from spark_zmq.capture.pushback import PushBack
    from spark_zmq.capture.spooling import SegmentWriter
    from spark_zmq.protocols.contract import Endpoint, StaticDiscovery
    from spark_zmq.protocols.zeroeq import MEERKAT, event_id
    from spark_zmq.spool.writer import Spool

    full_queues = [0]  # QUEUE_FULL reports: runs of receive_hwm messages without an empty queue
    queue_full = PushBack.queue_full

    def counted(self: PushBack, received: int) -> None:
        full_queues[0] += 1
        queue_full(self, received)

    PushBack.queue_full = counted  # type: ignore[method-assign]
    flushed = [0, 0]  # spool writes: CPU ns of capture's thread in them, and how many
    flush = SegmentWriter.flush

    def timed(self: SegmentWriter, conn: Any) -> None:
        began = time.thread_time_ns()
        try:
            flush(self, conn)
        finally:
            flushed[0] += time.thread_time_ns() - began
            flushed[1] += 1

    SegmentWriter.flush = timed  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as folder:
        spool = Spool(folder, max_bytes=8 << 30)
        capture = Capture(
            spool,
            max_message_bytes=64 << 20,
            flush_interval=flush_ms / 1000,
            name="cpu",
            receive_hwm=receive_hwm,
        )
        capture.start()
        key = f"127.0.0.1:{port}"
        endpoint = Endpoint(key, f"tcp://{key}", {"publisher": key}, (b"", event_id(MEERKAT)))
        StaticDiscovery([endpoint]).start(capture)
        try:

            def received() -> int:
                return sum(capture.received().values())

            first = _wait_for_first(received)
            recorder = _start_perf()
            before, cpu0, start = thread_times(), cpu_ns(), time.monotonic()
            flushed[:] = [0, 0]
            got0 = received()
            _wait_for_all(received, count)
            capture.sync(timeout=60)
            _stop_perf(recorder)
            result = _result(
                cpu0,
                start,
                received() - got0,
                split_threads(before, capture_thread_id("cpu") or -1),
            )
            result["first"] = first
            result["queue_full"] = full_queues[0]
            result["flush_ns"], result["flushes"] = flushed
            result["core"] = f"{capture.core} from {spark_zmq.__path__[0]}"
            poller = getattr(capture._core, "_poller", None)
            if poller is not None and hasattr(poller, "statistics"):
                result["statistics"] = poller.statistics()
        finally:
            capture.close()
            spool.close()
    return result


def _start_perf() -> subprocess.Popen | None:
    """``perf record -g`` of this process from now on, if CAPTURE_CPU_PERF names its file."""
    path = os.environ.get("CAPTURE_CPU_PERF")
    if not path:
        return None
    command = ["perf", "record", "-q", "-g", "-F", "4999", "-o", path, "-p", str(os.getpid())]
    recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    time.sleep(0.3)  # perf attaches
    return recorder


def _stop_perf(recorder: subprocess.Popen | None) -> None:
    if recorder is not None:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(30)


def bare_role(port: int, count: int, receive_hwm: int) -> dict[str, Any]:
    """A plain pyzmq SUB loop: ``recv_multipart`` per message, nothing kept."""
    import threading

    import zmq

    context = zmq.Context()
    sock = context.socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, receive_hwm)
    sock.setsockopt(zmq.RCVTIMEO, 500)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(f"tcp://127.0.0.1:{port}")
    try:
        sock.recv_multipart()
        recorder = _start_perf()
        before, cpu0, start = thread_times(), cpu_ns(), time.monotonic()
        got, idle_since = 0, time.monotonic()
        while got < count - 1 and time.monotonic() - idle_since < IDLE_SECONDS:
            try:
                sock.recv_multipart()
            except zmq.Again:
                continue
            got += 1
            idle_since = time.monotonic()
        result = _result(cpu0, start, got, split_threads(before, threading.get_native_id()))
        _stop_perf(recorder)
        return result
    finally:
        sock.close()
        context.term()


def _result(cpu0: int, start: float, messages: int, threads: dict[str, Any]) -> dict[str, Any]:
    return {
        "cpu_ns": cpu_ns() - cpu0,
        "seconds": time.monotonic() - start,
        "messages": messages,
        "threads": threads,
    }


def _wait_for_first(received: Any) -> int:
    deadline = time.monotonic() + TIMEOUT
    while not received():
        if time.monotonic() > deadline:
            raise TimeoutError("no message arrived")
        time.sleep(0.02)
    return int(received())


def _wait_for_all(received: Any, count: int) -> None:
    last, changed = received(), time.monotonic()
    while last < count and time.monotonic() - changed < IDLE_SECONDS:
        time.sleep(0.02)
        now = received()
        if now != last:
            last, changed = now, time.monotonic()


# -- the parent -----------------------------------------------------------------------------------


def run_trial(
    label: str,
    tree: str | None,
    rate: float,
    count: int,
    receive_hwm: int,
    perf: str = "",
    flush_ms: int = 100,
) -> dict[str, Any]:
    """One publisher and one receiver process (``tree``'s capture, or the bare loop if None);
    with ``perf``, the receiver runs under ``perf record -g`` writing that file."""
    # here, not at the top: the receiver roles import this file with another tree's spark_zmq
    from harness.publisher import SEND_PATIENCE, PublisherProcess, PublishPlan

    context = multiprocessing.get_context("spawn")
    # send HWM 0: nothing dropped; nice -10 where allowed; a full queue is given 10 ms
    plan = PublishPlan(count, rate, send_hwm=0, native=True, nice=-10, patience=SEND_PATIENCE)
    publisher = PublisherProcess(context, plan)
    try:
        port = publisher.port
        env = tree_environment(tree or str(CHECKOUT))
        env.setdefault("SPARK_ZMQ_LOG_LEVEL", "WARNING")
        role = "capture" if tree else "bare"
        command = [sys.executable, __file__, "--role", role, "--port", str(port)]
        command += ["--count", str(count), "--receive-hwm", str(receive_hwm)]
        command += ["--flush-ms", str(flush_ms)]
        if perf:
            env["CAPTURE_CPU_PERF"] = perf
        receiver = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=TIMEOUT + 60, check=False
        )
        publisher.result(60.0)
        if receiver.returncode:
            raise RuntimeError(f"{label}: receiver failed: {receiver.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(receiver.stdout.strip().splitlines()[-1])
        return result
    finally:
        publisher.finish()


def us_per_message(ns: float, messages: int) -> float:
    return ns / 1000 / messages if messages else float("nan")


def describe(result: dict[str, Any]) -> str:
    messages = result["messages"]
    rate = messages / result["seconds"] if result["seconds"] else 0.0
    parts = [f"{us_per_message(result['cpu_ns'], messages):5.2f} us/msg", f"{rate:8,.0f} msg/s"]
    for group, (ns, wakes) in result["threads"].items():
        per_s = wakes / result["seconds"] if result["seconds"] else 0.0
        parts.append(f"{group} {us_per_message(ns, messages):.2f} ({per_s:,.0f} wakes/s)")
    if "flush_ns" in result:
        flush_us = us_per_message(result["flush_ns"], messages)
        parts.append(f"of capture's: spool writes {flush_us:.2f} ({result['flushes']})")
    if "core" in result:
        parts.append(result["core"])
    if result.get("queue_full"):
        parts.append(f"receive queue found full {result['queue_full']} times")
    if "statistics" in result:
        parts.append(" ".join(f"{k}={v}" for k, v in result["statistics"].items()))
    return ", ".join(parts)


def summarize(label: str, results: list[dict[str, Any]]) -> str:
    def median_of(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"

    total = [us_per_message(r["cpu_ns"], r["messages"]) for r in results]
    line = f"{label:<18} {median_of(total):<20}"
    for group in ("capture", "zmq I/O", "other"):
        values = [us_per_message(r["threads"][group][0], r["messages"]) for r in results]
        line += f" {median_of(values):<20}"
    if all("flush_ns" in r for r in results):
        values = [us_per_message(r["flush_ns"], r["messages"]) for r in results]
        line += f" {median_of(values)}"
    return line


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rate", type=float, default=50_000.0, help="msg/s (default 50000; 0: unpaced)"
    )
    parser.add_argument(
        "--receive-hwm",
        type=int,
        default=0,
        help="capture's receive high-water mark (default 0, Capture's and zeroeq_rate's)",
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="per trial (default 4)")
    parser.add_argument("--repeats", type=int, default=5, help="trials per variant (default 5)")
    add_variant_argument(parser, "capture (its core built in place)")
    parser.add_argument("--bare", action="store_true", help="also the bare pyzmq SUB loop")
    parser.add_argument(
        "--flush-ms",
        default="100",
        help="capture's flushIntervalMs, comma-separated: each variant runs at each value "
        "(default 100, the option's default)",
    )
    parser.add_argument(
        "--perf",
        metavar="FOLDER",
        help="record each receiver with perf record -g into FOLDER/<label>-<repeat>.data",
    )
    parser.add_argument("--role", choices=("capture", "bare"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args(sys.argv[1:])
    if args.role:
        if args.role == "capture":
            result = capture_role(args.port, args.count, args.receive_hwm, int(args.flush_ms))
        else:
            result = bare_role(args.port, args.count, args.receive_hwm)
        print(json.dumps(result))
        return 0
    ensure_private_network(__file__)
    variants: list[tuple[str, str | None]] = [*source_trees(args.variant)]
    flushes = [int(ms) for ms in args.flush_ms.split(",")]
    runs: list[tuple[str, str | None, int]] = [
        (label if len(flushes) == 1 else f"{label} {ms} ms", tree, ms)
        for label, tree in variants
        for ms in flushes
    ]
    if args.bare:
        runs.append((BARE, None, flushes[0]))
    count = max(1, round((args.rate or 200_000.0) * args.seconds))
    pace = (
        f"{args.rate:,.0f} msg/s paced in {TICK_SECONDS * 1e3:g} ms ticks"
        if args.rate
        else (f"{count:,} messages unpaced")
    )
    print(
        f"capture CPU per message: {pace}, {PAYLOAD_BYTES}-byte events, {args.seconds:g} s x "
        f"{args.repeats} per variant, receive HWM {args.receive_hwm}, nproc={os.cpu_count()}, "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in runs}
    for repeat in range(args.repeats):
        for label, tree, flush_ms in runs:
            perf = ""
            if args.perf:
                perf = str(Path(args.perf, f"{label.replace(' ', '_')}-{repeat + 1}.data"))
            result = run_trial(label, tree, args.rate, count, args.receive_hwm, perf, flush_ms)
            results[label].append(result)
            print(f"  {repeat + 1} {label:<18} {describe(result)}", flush=True)
    print("\nus per message, median [min-max] of the repeats:")
    print(
        f"{'variant':<18} {'process':<20} {'capture thread':<20} {'zmq I/O thread':<20} "
        f"{'other':<20} spool writes (in capture's)"
    )
    for label, _, _ in runs:
        print(summarize(label, results[label]))
    print(f"(load average at the end: {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
