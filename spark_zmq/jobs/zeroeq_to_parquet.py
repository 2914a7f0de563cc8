"""Stream every event of a ZeroEQ session into a Parquet table.

On embedded defaults it is a self-contained demo: it starts demo publishers on loopback (session
``demo``, announced by ZeroConf on 127.0.0.1 only), streams their events into ``out/zeroeq_events``
until every published event is in the table, and prints what it wrote. Against a real system::

    spark-submit "$(spark-zmq job zeroeq_to_parquet)" --demo-publishers 0 --session alice \\
        --discovery-interfaces all --seconds 600 --output /data/zeroeq_events

Run it with ``bash scripts/main.sh`` to have it in a private network namespace.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_zmq.protocols.zeroeq import Publisher, make_zeroconf
from spark_zmq.spark.session import loopback_session


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--session", default="demo", help="ZeroEQ session to read (default demo)")
    parser.add_argument(
        "--discovery-interfaces",
        default="127.0.0.1",
        help="where ZeroConf browses: all, or addresses/interface names "
        "(default 127.0.0.1: nothing leaves the machine)",
    )
    parser.add_argument(
        "--demo-publishers",
        type=int,
        default=3,
        help="demo publishers to start on loopback (0: read real ones)",
    )
    parser.add_argument(
        "--events", type=int, default=200, help="events each demo publisher sends (default 200)"
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=120.0,
        help="stop after this long (with demo publishers: at the latest)",
    )
    parser.add_argument("--output", default="out/zeroeq_events", help="Parquet table folder")
    return parser.parse_args(argv)


def spark_session() -> SparkSession:
    """spark-submit's session, else a local one that listens on loopback only."""
    if _submitted():
        spark = SparkSession.builder.appName("zeroeq_to_parquet").getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        return spark
    return loopback_session("zeroeq_to_parquet")


def _submitted() -> bool:
    """True under spark-submit, which sets the master itself."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def publish_demo_events(publishers: list[Publisher], count: int, started: threading.Event) -> None:
    """Each publisher sends ``count`` events: temperatures (JSON payload) and empty heartbeats."""
    for publisher in publishers:
        publisher.wait_for_subscribers(timeout=60)
    started.set()
    for i in range(count):
        for number, publisher in enumerate(publishers):
            if i % 10 == 9:
                publisher.publish("demo::Heartbeat")
            else:
                reading = {"sensor": number, "sequence": i, "celsius": 20 + (i % 7) * 0.5}
                publisher.publish("demo::Temperature", json.dumps(reading).encode())
        time.sleep(0.002)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    spark = spark_session()
    output = os.path.abspath(args.output)
    checkpoint = output.rstrip("/") + "_checkpoint"
    zeroconf = make_zeroconf(("127.0.0.1",)) if args.demo_publishers else None
    publishers = [
        Publisher(args.session, zeroconf=zeroconf, application="zeroeq-demo")
        for _ in range(args.demo_publishers)
    ]
    expected = args.events * len(publishers)
    mine = [p.instance_name for p in publishers]
    reader = (
        spark.readStream.format("zeroeq")
        .option("session", args.session)
        .option("discoveryInterfaces", args.discovery_interfaces)
        .option("spoolPath", output.rstrip("/") + "_spool")  # lives as long as the checkpoint
    )
    if publishers:
        reader = reader.option("events", "demo::Temperature,demo::Heartbeat")
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )
    print(f"streaming ZeroEQ session {args.session!r} into {output}", flush=True)
    try:
        if publishers:
            started = threading.Event()
            sender = threading.Thread(
                target=publish_demo_events, args=(publishers, args.events, started), daemon=True
            )
            sender.start()
            wait_for_table(spark, output, mine, expected, args.seconds)
        else:
            query.awaitTermination(args.seconds)
        query.processAllAvailable()
    finally:
        query.stop()
        for publisher in publishers:
            publisher.close()
        if zeroconf is not None:
            zeroconf.close()
    return report(spark, output, mine, expected)


def rows_from(spark: SparkSession, path: str, publishers: list[str]) -> DataFrame:
    """The table's rows, only those of ``publishers`` when given (the table may hold earlier
    runs' rows too)."""
    table = spark.read.parquet(path)
    return table.where(F.col("publisher").isin(publishers)) if publishers else table


def wait_for_table(
    spark: SparkSession, path: str, publishers: list[str], expected: int, seconds: float
) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if rows_from(spark, path, publishers).count() >= expected:
                return
        except Exception:  # no file written yet
            pass
        time.sleep(1.0)


def report(spark: SparkSession, path: str, publishers: list[str], expected: int) -> int:
    """Print what this run wrote; with demo publishers, check that every event arrived."""
    rows = rows_from(spark, path, publishers)
    total = rows.count()
    print(f"\nwrote {total} rows to {path}")
    rows.groupBy("publisher", "event").count().orderBy("publisher", "event").show(truncate=False)
    (
        rows.select(
            "publisher",
            "offset",
            "event",
            F.col("payload").cast("string").alias("payload"),
            "received_at",
        )
        .orderBy("received_at")
        .show(5, truncate=False)
    )
    if publishers and total != expected:
        print(f"expected {expected} rows from the demo publishers, found {total}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
