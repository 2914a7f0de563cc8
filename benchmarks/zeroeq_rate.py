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

The sections are ``rate_losses.py`` (0), ``rate_search.py`` (1 to 3) and ``rate_capture.py``
(4, 5); what they share (the publisher, the receivers, the trials, the report) is in
``harness/``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from harness.children import reap_children
from harness.hermetic import ensure_private_network
from harness.publisher import SEND_PATIENCE, add_priority_argument, publisher_priority
from harness.report import print_header
from harness.spark import spark_session
from harness.trials import CAPTURE_RECEIVE_HWM, MAX_RECORDS_PER_TRIGGER, Bench, SearchOutcome, Trial
from rate_capture import measure_cpu, measure_memory
from rate_losses import add_loss_arguments, measure_losses
from rate_search import measure_bare, measure_connector, measure_latency, print_rates

CORES = ("native", "python")


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
    add_priority_argument(parser)
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
    nice, realtime = publisher_priority(args.publisher_nice)
    bench = Bench(
        multiprocessing.get_context("spawn"),
        workdir,
        args.duration,
        args.trigger_ms,
        native_publisher=args.publisher == "native",
        publisher_nice=nice,
        patience=SEND_PATIENCE if args.patient else 0.0,
        publisher_realtime=realtime,
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
        reap_children()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\ntotal time {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
