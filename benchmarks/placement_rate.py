"""Aggregate no-gap rate of capture=driver vs capture=executors, on a 2-worker standalone cluster.

Side by side in one run, on one Spark application of a local standalone cluster (master + 2
workers of one core each, ``spark_zmq.testing.standalone``), on loopback only:

- ``driver``: the zmq sockets of every publisher in the driver-side reader process;
- ``executors``: one capture process per executor, capturing its part of the publishers
  (epochs and heartbeats in the spool).

Each trial runs 4 publisher processes (the same pacing publisher as ``zeroeq_rate.py``, each
with its own range of sequence numbers) at a quarter of the aggregate rate each, into
``format("zeroeq")`` with a ``foreachBatch`` sink that counts every sequence number. A rate
counts as reached when every message arrived exactly once and the publishers kept up. The
search steps the aggregate rate up while trials succeed and down while they fail, as
``zeroeq_rate.py`` does, and the report ends with the best rates and their ratio.

Run it as ``python benchmarks/placement_rate.py [--quick]``: it re-executes itself through
``scripts/netns.sh`` (a private network namespace holding only ``lo``).
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.hermetic import ensure_private_network
from harness.report import TABLE_HEADER, print_header, print_progress, trial_row
from harness.spark import run_connector_trial
from harness.trials import Bench, Trial, search

from spark_zmq.spark.session import LOOPBACK

PUBLISHERS = 4
PLACEMENTS = ("driver", "executors")
#: capture processes of a finished trial end this soon, so they do not take the next one's CPU
IDLE_TIMEOUT = "3"


def cluster_session(cluster: Any) -> Any:
    """A session on the standalone ``cluster``, bound to loopback, quiet."""
    os.environ.setdefault("SPARK_ZMQ_LOG_LEVEL", "WARNING")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = LOOPBACK
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("placement_rate benchmark")
    for key, value in cluster.settings().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_trial(
    spark: Any,
    workdir: Path,
    placement: str,
    rate: float,
    duration: float,
    trigger_ms: int,
    label: str | None = None,
) -> Trial:
    """PUBLISHERS publisher processes -> format("zeroeq") with ``capture=placement``; after
    the query stops, its capture processes end before the next trial."""
    bench = Bench(
        multiprocessing.get_context("spawn"),
        workdir,
        duration,
        trigger_ms,
        spark=spark,
        core=None,
        max_records_per_trigger=0,
        reader_options=(("capture", placement), ("captureIdleTimeout", IDLE_TIMEOUT)),
        publishers=PUBLISHERS,
        settle=lambda: wait_for_holders_to_end(float(IDLE_TIMEOUT) + 10),
    )
    return run_connector_trial(bench, rate, label or placement)


def trial_at(
    spark: Any, workdir: Path, placement: str, duration: float, trigger_ms: int, rate: float
) -> Trial:
    """``run_trial`` with the rate last: one step of the search."""
    return run_trial(spark, workdir, placement, rate, duration, trigger_ms)


def wait_for_holders_to_end(timeout: float) -> None:
    from spark_zmq.testing.processes import running_holders

    deadline = time.monotonic() + timeout
    while running_holders() and time.monotonic() < deadline:
        time.sleep(0.2)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short trials, coarse steps")
    parser.add_argument("--duration", type=float, help="seconds per trial (default 4; quick 2)")
    parser.add_argument(
        "--start-rate",
        type=float,
        default=16_000.0,
        help="first aggregate rate tried, msg/s (default 16000)",
    )
    parser.add_argument("--factor", type=float, help="rate step (default 1.5; quick 2)")
    parser.add_argument("--max-steps", type=int, help="trials per search (default 6; quick 3)")
    parser.add_argument("--trigger-ms", type=int, default=500, help="trigger (default 500)")
    args = parser.parse_args(argv)
    args.duration = args.duration or (2.0 if args.quick else 4.0)
    args.factor = args.factor or (2.0 if args.quick else 1.5)
    args.max_steps = args.max_steps or (3 if args.quick else 6)
    return args


def main() -> int:
    args = parse_args(sys.argv[1:])
    ensure_private_network(__file__)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    from spark_zmq.testing.standalone import StandaloneCluster

    print_header(
        args,
        f"placement_rate benchmark: {PUBLISHERS} publishers, a standalone "
        f"cluster of 2 workers x 1 core, both placements in one application",
    )
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="placement_rate-"))
    cluster = StandaloneCluster(workdir / "cluster", workers=2)
    spark = None
    outcomes = []
    try:
        spark = cluster_session(cluster)
        for placement in PLACEMENTS:
            print(f"capture={placement}:", flush=True)
            warm = run_trial(spark, workdir, placement, 2_000, 1.0, args.trigger_ms, "warm-up")
            print(f"  {trial_row(warm)}   [warm-up, not counted]", flush=True)
            outcomes.append(
                search(
                    placement,
                    functools.partial(
                        trial_at, spark, workdir, placement, args.duration, args.trigger_ms
                    ),
                    args.start_rate,
                    args.factor,
                    args.max_steps,
                    print_progress,
                )
            )
    finally:
        if spark is not None:
            spark.stop()
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print("\n== all trials ==")
    print(TABLE_HEADER)
    for outcome in outcomes:
        for trial in outcome.trials:
            print(trial_row(trial))
    print("\n== best aggregate rate with no gap ==")
    best = {o.receiver: (o.best.rate if o.best else 0.0) for o in outcomes}
    for outcome in outcomes:
        bound = outcome.bound
        limit = (
            f"; {bound.rate:,.0f} msg/s failed ({bound.verdict})"
            if bound
            else "; no failing rate found (raise --start-rate or --max-steps)"
        )
        print(f"  capture={outcome.receiver:<9} {best[outcome.receiver]:>9,.0f} msg/s{limit}")
    if best.get("driver"):
        print(f"  ratio executors/driver: {best['executors'] / best['driver']:.2f}")
    print(f"\ntotal time {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
