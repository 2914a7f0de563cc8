"""Capture a stream of any spark_zmq format into a Parquet table, partitioned by date and endpoint.

Every row the format reads lands in the table under ``date=YYYY-MM-DD/endpoint=...``, with one
progress line per micro-batch on stdout. It runs until ``--seconds`` have passed (0: until it is
stopped); rows captured but not yet written then stay in the spool, and the next run with the
same checkpoint and spool writes them::

    spark-submit "$(spark-zmq job capture_to_parquet)" --format goby --option platform=auv \\
        --option subscribe=/nav/ --output /data/goby --seconds 0
    spark-submit "$(spark-zmq job capture_to_parquet)" --format yamz \\
        --option "address=yamz://*/tps?det=tpc" --output /data/tps

Options are the format's reader options (docs/options.md). The checkpoint is ``--output`` +
``_checkpoint`` unless ``--checkpoint``; the spool (``spoolPath``) defaults to the checkpoint's
path + ``_spool``, beside it, so that both survive together.
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import functions as F

from spark_zmq.cli import FORMATS
from spark_zmq.cli.common import add_format_options
from spark_zmq.jobs.common import add_run_arguments, run, with_spool_beside
from spark_zmq.spark.progress import ProgressPrinter, with_gap_count
from spark_zmq.spark.session import job_session


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Example: --format zeroeq --option session=alice --output out/alice --seconds 600",
    )
    parser.add_argument("--format", required=True, choices=sorted(FORMATS))
    add_format_options(parser, help="a reader option of the format (repeatable)")
    parser.add_argument("--output", required=True, help="the Parquet table's folder")
    parser.add_argument("--checkpoint", help="checkpoint folder (default: OUTPUT_checkpoint)")
    add_run_arguments(parser, trigger=5.0)
    return parser.parse_args(argv)


def locations(args: argparse.Namespace) -> tuple[str, str, dict[str, str]]:
    """The table's folder (absolute), the checkpoint (``--checkpoint``, else the table's +
    ``_checkpoint``) and the reader's options, whose ``spoolPath`` is beside the checkpoint
    (``<checkpoint>_spool``) unless given."""
    output = os.path.abspath(args.output)
    checkpoint = args.checkpoint or output.rstrip("/") + "_checkpoint"
    return output, checkpoint, with_spool_beside(checkpoint, dict(args.option))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = job_session(f"capture {args.format} to parquet")
    output, checkpoint, options = locations(args)
    reader = spark.readStream.format(args.format).options(**options)
    rows = with_gap_count(reader.load()).withColumn("date", F.to_date("received_at"))
    spark.streams.addListener(ProgressPrinter())
    query = (
        rows.writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .partitionBy("date", "endpoint")
        .queryName(f"capture_{args.format}")
        .trigger(processingTime=f"{args.trigger:g} seconds")
        .start()
    )
    print(f"capturing {args.format} into {output}", flush=True)
    status = run(query, args.seconds, "capture")
    if status == 0:
        print(f"stopped; the table is {output}", flush=True)
    return status


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
