"""How fast does ``writeStream.format("zeroeq")`` get events to a subscriber, with each of the
writer's send loops, compared with a bare pyzmq XPUB publisher sending the same messages?

Measured side by side in one run, on loopback only, in rounds. Each round measures every side,
one right after the other (the writers' order alternates from round to round), so a round's
ratios compare like with like on a shared, noisy machine (the ratios matter more than the
absolute rates):

1. bare: the benchmarks' shared publisher (``harness/publisher.py``) in a process of its own
   binds an XPUB (the writer's send high-water mark, XPUB_NODROP), waits until the subscriber
   has subscribed, then sends N ZeroEQ messages as fast as it can with ``send_multipart``,
   building each payload as it goes and waiting at a full queue as the writer does. That is
   what a hand-written Python loop achieves. (Runs before 2026-11-26 sent prebuilt messages.)
2. spark <core>: a Spark query reads the same N rows (``event``, ``payload``) from Parquet and
   writes them with ``format("zeroeq")``, trigger ``availableNow``, with the option
   ``sendCore`` = ``native`` (the compiled send loop) or ``python`` (``--send-cores``). Each
   Python worker's publisher announces itself over ZeroConf, the subscriber discovers it and
   subscribes, and the task (``waitForSubscribers``) sends.
3. alone <core>: the writer without Spark: a separate process reads the same Parquet file into
   Arrow batches of 10,000 rows (Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch``) and
   hands them to the generic writer's ``write``, as a Spark task does. What the writer's own
   code costs per message, apart from the JVM's; it also reports the writer process's CPU time
   and the time the encoding alone takes.

The messages are the same in all: frame 1 is the 16-byte event id, frame 2 a 100-byte payload
that starts with an 8-byte big-endian sequence number. The same subscriber code receives them,
in its own process with its own zmq context, by default with the compiled capture core's receive
loop (``--receiver native``: a Python loop per message was the slower side of the comparison).
It uses ZeroConf discovery for the writers and the bare publisher's port directly. It counts
every sequence number, so it can tell whether each message arrived exactly once, and it times
the first to the last message: the rates are taken there, at the receiver. For the Spark
writers, the run also times the whole query, from ``start()`` to its termination, and splits
that into start-up (until the first message arrives), streaming and the end of the batch
(after the last message).

The subscriber is in ``write_subscriber.py``, the sides in ``write_sides.py``, the report in
``write_report.py``.

Run it as ``python benchmarks/zeroeq_write_rate.py [--quick] [--rows N] [--partitions 2]
[--send-cores native,python] [--skip-alone]``. It re-executes itself through
``scripts/netns.sh``, so every socket lives in a private network namespace that holds only
``lo``, and it uses only 127.0.0.1.
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.children import reap_children
from harness.hermetic import ensure_private_network
from write_report import TABLE_HEADER, print_header, print_report, run_row
from write_sides import Round, run_alone, run_bare, run_writer
from write_subscriber import INPUT_SCHEMA, write_input

SEND_CORES = ("native", "python")
#: one file per Spark partition: no file is split, no two files share a partition
SPARK_CONF = {
    "spark.sql.files.maxPartitionBytes": str(1 << 30),
    "spark.sql.files.openCostInBytes": str(1 << 30),
}


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="20,000 rows and one round: a smoke run"
    )
    parser.add_argument("--rows", type=int, help="messages per run (default 200,000; quick 20,000)")
    parser.add_argument(
        "--partitions",
        type=int,
        default=1,
        help="input partitions, i.e. writer tasks and publishers (default 1)",
    )
    parser.add_argument("--rounds", type=int, help="rounds of every side (default 3; quick 1)")
    parser.add_argument(
        "--receiver",
        choices=("native", "python"),
        default="native",
        help="the subscriber's receive loop: the compiled capture core's (default), so that "
        "the senders are compared, or recv_multipart per message (earlier runs)",
    )
    parser.add_argument(
        "--send-cores",
        default=",".join(SEND_CORES),
        help="the writer's send loops to measure, comma-separated (option sendCore; default "
        "native,python)",
    )
    parser.add_argument(
        "--skip-alone", action="store_true", help="do not measure the writer without Spark"
    )
    args = parser.parse_args(argv)
    args.rows = args.rows or (20_000 if args.quick else 200_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.warmup_rows = min(args.rows, 10_000)
    args.send_cores = [core.strip() for core in args.send_cores.split(",") if core.strip()]
    if args.rows < args.partitions or args.partitions < 1 or args.rounds < 1:
        parser.error("--partitions and --rounds must be >= 1, and --rows >= --partitions")
    if not args.send_cores or set(args.send_cores) - set(SEND_CORES):
        parser.error(f"--send-cores takes some of {', '.join(SEND_CORES)}")
    return args


def start_spark() -> Any:
    """A local[2] session on loopback, quiet; workers log warnings only."""
    os.environ.setdefault("SPARK_ZMQ_LOG_LEVEL", "WARNING")
    from spark_zmq.spark.session import loopback_session

    return loopback_session("zeroeq_write_rate benchmark", SPARK_CONF, log_level="ERROR")


def planned_partitions(spark: Any, input_dir: Path) -> int:
    return spark.read.schema(INPUT_SCHEMA).parquet(str(input_dir)).rdd.getNumPartitions()


def run_rounds(spark: Any, context: Any, workdir: Path, args: argparse.Namespace) -> list[Round]:
    """A warm-up query per send loop (JVM JIT, Python worker, imports: not counted), then the
    rounds: bare, the Spark writer per send loop, the writer alone per send loop; the send
    loops' order alternates from round to round."""
    run_id = f"{os.getpid()}-{int(time.time())}"
    native = args.receiver == "native"
    warmup_dir = write_input(workdir / "warmup", args.warmup_rows, args.partitions)
    for core in args.send_cores:
        warm = run_writer(
            spark,
            context,
            warmup_dir,
            workdir / f"checkpoint-warmup-{core}",
            args.warmup_rows,
            f"bench-write-{run_id}-warmup-{core}",
            core,
            native,
        )
        wall = warm.figures.get("wall s", 0.0)
        print(f"warm-up query, sendCore={core}: {wall:.2f} s {warm.error}", flush=True)
    input_dir = write_input(workdir / "input", args.rows, args.partitions)
    print(
        f"Spark plans {planned_partitions(spark, input_dir)} partition(s) for the input", flush=True
    )
    print(TABLE_HEADER, flush=True)
    rounds = []
    for index in range(1, args.rounds + 1):
        cores = args.send_cores if index % 2 else args.send_cores[::-1]
        runs = {"bare": run_bare(context, args.rows, native)}
        for core in cores:
            runs[f"spark {core}"] = run_writer(
                spark,
                context,
                input_dir,
                workdir / f"checkpoint-{index}-{core}",
                args.rows,
                f"bench-write-{run_id}-{index}-{core}",
                core,
                native,
            )
        if not args.skip_alone:
            for core in cores:
                runs[f"alone {core}"] = run_alone(
                    context,
                    input_dir,
                    args.rows,
                    f"bench-alone-{run_id}-{index}-{core}",
                    core,
                    native,
                )
        order = ["bare"] + [f"{kind} {c}" for kind in ("spark", "alone") for c in args.send_cores]
        rounds.append(Round({side: runs[side] for side in order if side in runs}))
        for side in rounds[-1].runs:
            print(f"  {run_row(str(index), side, rounds[-1])}", flush=True)
    return rounds


def main() -> int:
    args = parse_args(sys.argv[1:])
    ensure_private_network(__file__)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    print_header(args)
    began = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="zeroeq_write_rate-"))
    context = multiprocessing.get_context("spawn")
    spark = None
    try:
        spark = start_spark()
        print(f"Spark session ready after {time.monotonic() - began:.1f} s", flush=True)
        rounds = run_rounds(spark, context, workdir, args)
        print_report(rounds, args.partitions)
    finally:
        if spark is not None:
            spark.stop()
        reap_children()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\ntotal time {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
