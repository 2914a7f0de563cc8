"""Soak and faults: a stream held for a while at a fixed rate while its parts fail, then counted.

An EBUS broker (``python -m spark_zmq ebus broker``), publisher processes that broadcast
``{"p": publisher, "s": sequence, "t": send time}`` on channel ``soak/<p>`` at a fixed rate, and
a query (``format("ebus")``, ``capture=executors`` on ``local[2]`` unless ``--capture driver``
or ``--capture service``, into a Parquet table) run for ``--minutes``. With ``--capture service``
a capture service (``spark-zmq capture --format ebus`` with the query's broker options) fills
the soak's spool, and the query reads it with ``capture=service`` (it captures nothing itself).
Every ``--fault-every`` seconds one fault of the ``FAULTS`` table is injected, in turn:

- ``publisher``: a publisher restarts (it goes on with its sequence numbers),
- ``broker``: the broker restarts on the same ports,
- ``driver-kill``: the query's whole process group (the driver JVM and its Python workers; the
  query runs in a session of its own) is killed (SIGKILL), and the query restarts on the same
  checkpoint and spool. Capture processes of ``capture=executors`` run in sessions of their
  own, and stop when they see their executor's JVM gone; with ``capture=driver`` capture dies
  with the driver; with ``capture=service`` the service lives on (nothing should be lost),
- ``query``: the query stops (SIGTERM) and restarts from its checkpoint and spool,
- ``capture``: a capture process is killed (SIGKILL) and replaced through its lease
  (``capture=executors`` only: with ``capture=driver`` there is no such process),
- ``capture-service``: the capture service's process group is stopped, by SIGTERM and by SIGKILL
  in turn, and the service restarts on the same spool (``capture=service`` only); its downtime
  is a gap row ("capture of partition K was not running between T1 and T2").

A run goes on past its end until each kind of fault has come once, the service's restart twice
(``FAULTS_AT_LEAST``; at most 2 minutes more).

At the end capture must be running (the spool grows: a restarted capture owes its downtime's gap
row until the first message it receives again, or until it stops, after the table was counted),
then the publishers stop, the query drains its spool into the table, and the table is
checked (with Spark, which reads only committed files). Every message missing from the table
belongs to a *hole*: a run of one publisher's sequence numbers between two of its delivered
messages (the one before stored at offset o1 of its partition, the one after at o2; a hole at
the start or the end of a publisher's stream has no message on that side: o1 = -1, or no o2).
A missing message is dated by when its publisher was due to send it (each publisher run's first
sequence number and start are in its state file, and it sends at ``--rate``), and counted as
the first of:

1. *lost while capture was down, marked*: a gap row of the hole's partition (``error``
   starting with ``gap:``) sits at an offset after o1 (capture wrote it after the last message
   before the hole), and its time span [T1, T2], widened by ``MARK_SLACK`` seconds, holds the
   message's date. T1 and T2 are the first and second times its text names (every gap text of
   ``spark_zmq/capture/*.py`` names when the loss began: "between T1 and T2", "had no holder
   between T1 and T2", "dropped at T1 and re-established", "failed at T1"); a text naming one
   time ends at the gap row's ``received_at``, when capture wrote it. A text naming none (a
   damaged spool segment: "at offsets [a, b)") marks every message of a hole it sits in
   (after o1, before o2);
2. *lost before the first capture*: a message before its publisher's first delivered one:
   sent before capture first connected (expected: ZeroMQ pub/sub keeps nothing for a reader
   that is not connected yet);
3. *lost while a peer was down*: dated within a restart of its publisher or of the broker
   (from the stop to ``PEER_SETTLE`` seconds after the new process started): a publisher's
   socket that (re)connects drops what it sends before the broker's subscription reaches it,
   which no capture can see (expected);
4. *lost, unmarked*: none of these. It must be 0.

It prints messages sent, captured (rows the spool received, gap rows apart), delivered,
duplicated, the four kinds of loss, lost after capture (offsets below the last committed end
missing from the table: must be 0), peak memory and peak spool size. Exit status 1 if
anything was duplicated, lost after capture, or lost unmarked.

Run it as ``python benchmarks/soak.py [--minutes 10] [--short] [--capture driver|service]``; it
re-executes itself inside ``scripts/netns.sh`` (a private network namespace holding only
``lo``).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.hermetic import ensure_private_network
from soak_accounting import Schedule, count
from soak_run import (
    CHANNEL,
    PLACEMENTS,
    Run,
    capture_options,
    drain,
    stop,
    wait_for_capture,
    wait_for_spool_growth,
)

from spark_zmq.testing.standalone import free_port

# -- the parts, each run as ``soak.py <part> ...`` in a process of its own --------------------


def run_publisher(args: argparse.Namespace) -> int:
    """Broadcast at ``--rate``. ``--state`` keeps the next sequence number across restarts,
    and each run's first sequence number and start (epoch seconds): sequence ``s`` of a run is
    due at ``start + (s - first) / rate``, which dates the messages that never arrived."""
    import zmq

    from spark_zmq.protocols.ebus import pack

    state = Path(args.state)
    saved: dict[str, Any] = (
        json.loads(state.read_text()) if state.exists() else {"next": 0, "runs": []}
    )
    sequence = saved["next"]
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    sock: zmq.Socket = zmq.Context.instance().socket(zmq.PUB)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.connect(f"tcp://127.0.0.1:{args.pub_port}")
    channel = f"{CHANNEL}{args.index}".encode()
    start, sent = time.monotonic(), 0
    runs = [*saved["runs"], [sequence, time.time()]]
    while not stopping:
        due = int((time.monotonic() - start) * args.rate)
        while sent < due:
            message = {"p": args.index, "s": sequence, "t": time.time()}
            sock.send_multipart([channel, pack(message)])
            sequence, sent = sequence + 1, sent + 1
        state.write_text(json.dumps({"next": sequence, "runs": runs}))
        time.sleep(0.01)
    state.write_text(json.dumps({"next": sequence, "runs": runs}))
    sock.close()
    return 0


def run_query(args: argparse.Namespace) -> int:
    """The query under test, until SIGTERM."""
    from spark_zmq.spark.session import loopback_session

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    spark = loopback_session("soak", {"spark.sql.session.timeZone": "UTC"}, log_level="ERROR")
    query = (
        spark.readStream.format("ebus")
        .options(**capture_options(args.sub_port), capture=args.capture, spoolPath=args.spool)
        .load()
        .select("partition", "offset", "channel", "data", "error", "received_at")
        .writeStream.format("parquet")
        .option("path", args.sink)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )
    while query.isActive and not stopping:  # a py4j call would not see the signal
        time.sleep(0.2)
    failure = query.exception()
    query.stop()
    spark.stop()
    if failure is not None:
        print(f"query failed: {failure}", file=sys.stderr, flush=True)
    return 1 if failure is not None else 0


def soak(args: argparse.Namespace) -> dict:
    """Run the soak; its result: the figures (counts), the faults injected, peaks, wall time."""
    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="soak-"))
    pub, sub, frontend, backend = (free_port() for _ in range(4))
    run = Run(folder, args.publishers, args.rate, args.capture, pub, sub, frontend, backend)
    kinds = run.kinds()
    print(
        f"soak: {args.minutes:g} min, {args.publishers} publishers x {args.rate:g} msg/s, "
        f"capture={args.capture}, a fault every {args.fault_every:g} s in turn: "
        f"{', '.join(kinds)} (seed {args.seed}); logs in {folder}",
        flush=True,
    )
    started = time.monotonic()
    try:
        run.start_broker()
        if args.capture == "service":
            run.start_service()
        run.start_query()
        for index in range(args.publishers):
            run.start_publisher(index)
        ready = wait_for_capture(run, timeout=180)
        print(f"  {ready - started:6.1f} s  capture running; faults begin", flush=True)
        end = ready + args.minutes * 60
        next_fault, turn = ready + args.fault_every, 0
        # past the end while a kind of fault is still to come (a slow restart delays the rest)
        while time.monotonic() < end or (run.faults_to_come() and time.monotonic() < end + 120):
            run.sample()
            if time.monotonic() >= next_fault:
                what = run.inject(kinds[turn % len(kinds)], rng)
                print(f"  {time.monotonic() - started:6.1f} s  {what}", flush=True)
                turn += 1
                next_fault += args.fault_every
            time.sleep(0.5)
        resumed = wait_for_spool_growth(run, timeout=120)
        print(f"  {resumed - started:6.1f} s  capture running after the last fault", flush=True)
        for process in run.senders.values():
            stop(process)
        states = [
            json.loads((folder / f"publisher-{i}.json").read_text()) for i in range(args.publishers)
        ]
        sent = {i: state["next"] for i, state in enumerate(states)}
        schedules = {
            i: Schedule([(first, start) for first, start in state["runs"]], args.rate)
            for i, state in enumerate(states)
        }
        print("  publishers stopped; draining the spool into the table", flush=True)
        drained = drain(run, timeout=180)
        run.sample()
    finally:
        run.stop_all()
    return {
        "figures": count(run, sent, schedules),
        "capture": args.capture,
        "faults": dict.fromkeys(kinds, 0) | run.faults,
        "peak_capture_rss": run.peak_capture_rss,
        "peak_query_rss": run.peak_query_rss,
        "peak_spool": run.peak_spool,
        "seconds": time.monotonic() - started,
        "drained": drained,
    }


def report(result: dict) -> bool:
    """Print the result; True if nothing was duplicated, nothing lost after capture, nothing
    lost unmarked, and the query committed everything the spool held before it was stopped."""
    figures = result["figures"]
    mib = 2**20
    lines = [(name, f"{value:>10,}") for name, value in figures.items()]
    lines += [
        ("faults injected", ", ".join(f"{k} {v}" for k, v in result["faults"].items())),
        ("peak RSS of a capture process", f"{result['peak_capture_rss'] / mib:>10.0f} MiB"),
        ("peak RSS of the query (JVM + Python)", f"{result['peak_query_rss'] / mib:>10.0f} MiB"),
        ("peak spool size", f"{result['peak_spool'] / mib:>10.1f} MiB"),
        ("wall time", f"{result['seconds']:>10.0f} s"),
    ]
    print("\n== soak result ==")
    for name, value in lines:
        print(f"  {name:<40} {value}")
    wrong = [
        name
        for name in ("duplicated", "lost after capture", "lost, unmarked")
        if figures[name] != 0
    ]
    if not result["drained"]:
        print("FAIL: the query did not commit what the spool held within the drain's bound")
        return False
    if wrong:
        print(f"FAIL: {', '.join(wrong)} must be 0")
        return False
    print("PASS: nothing duplicated, nothing lost after capture, every loss marked or expected")
    return True


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parts = parser.add_subparsers(dest="part")
    publisher = parts.add_parser("publisher")
    publisher.add_argument("--index", type=int, required=True)
    publisher.add_argument("--pub-port", type=int, required=True)
    publisher.add_argument("--rate", type=float, required=True)
    publisher.add_argument("--state", required=True)
    query = parts.add_parser("query")
    for name in ("--spool", "--checkpoint", "--sink"):
        query.add_argument(name, required=True)
    query.add_argument("--sub-port", type=int, required=True)
    query.add_argument("--capture", choices=PLACEMENTS, required=True)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long (default 10)")
    parser.add_argument(
        "--short", action="store_true", help="the CI version: 1 minute, a fault every 8 s"
    )
    parser.add_argument(
        "--rate", type=float, default=200.0, help="messages per second per publisher (default 200)"
    )
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--fault-every", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--capture",
        choices=PLACEMENTS,
        default="executors",
        help="the query's capture placement (default executors)",
    )
    parser.add_argument("--result", metavar="PATH", help="also write the result as JSON there")
    args = parser.parse_args(argv)
    if args.short:
        args.minutes, args.fault_every = 1.0, 8.0
    return args


def main() -> int:
    args = parse_args(sys.argv[1:])
    if args.part == "publisher":
        return run_publisher(args)
    if args.part == "query":
        return run_query(args)
    ensure_private_network(__file__)
    result = soak(args)
    if args.result:
        Path(args.result).write_text(json.dumps(result, indent=1))
    return 0 if report(result) else 1


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
