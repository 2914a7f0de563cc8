"""Republish a stream from one spark_zmq format into another, mapping columns with SQL.

Reads with ``--from`` and its reader options, turns each row into the columns the ``--to``
writer wants with ``--select`` expressions, and writes, one micro-batch at a time::

    # Goby navigation messages (JSON scheme) as ZeroEQ events named after their type
    spark-submit "$(spark-zmq job republish)" --from goby --from-option subscribe=/nav/JSON/ \\
        --to zeroeq --to-option session=alice \\
        --select "concat('goby::', type) AS event" --select "text AS payload" \\
        --checkpoint /data/nav_republish
    # EBUS broadcasts into Goby's JSON scheme
    spark-submit "$(spark-zmq job republish)" --from ebus --from-option channels=sensors/ \\
        --to goby --select "'sensors' AS group" --select "'JSON' AS scheme" \\
        --select "'nlohmann::json' AS type" --select "data AS text" --checkpoint /data/cp

Rows the writer cannot send follow its ``mode`` option (``--to-option mode=...``). The spool
(``spoolPath``) defaults to the checkpoint's path + ``_spool``, beside it, so that both survive
together and a restart from the checkpoint sends each row once (an explicit
``--from-option spoolPath=...`` wins).
"""

from __future__ import annotations

import argparse
import sys

from spark_zmq.cli import FORMATS
from spark_zmq.cli.common import add_format_options
from spark_zmq.jobs.common import add_run_arguments, run, with_spool_beside
from spark_zmq.spark.progress import ProgressPrinter, with_gap_count
from spark_zmq.spark.session import job_session


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="source", required=True, choices=sorted(FORMATS))
    add_format_options(parser, "--from-option", help="a reader option (repeatable)")
    parser.add_argument("--to", dest="target", required=True, choices=sorted(FORMATS))
    add_format_options(parser, "--to-option", help="a writer option (repeatable)")
    parser.add_argument(
        "--select",
        action="append",
        required=True,
        metavar="SQL",
        help="a SQL expression over the reader's columns giving one of the "
        'writer\'s (repeatable), e.g. "data AS text"',
    )
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint folder")
    add_run_arguments(parser, trigger=1.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = job_session(f"republish {args.source} to {args.target}")
    options = with_spool_beside(args.checkpoint, dict(args.from_option))
    reader = spark.readStream.format(args.source).options(**options)
    rows = with_gap_count(reader.load()).where("error IS NULL").selectExpr(*args.select)
    writer = (
        rows.writeStream.format(args.target)
        .option("checkpointLocation", args.checkpoint)
        .options(**dict(args.to_option))
    )
    spark.streams.addListener(ProgressPrinter())
    query = (
        writer.queryName(f"republish_{args.source}_to_{args.target}")
        .trigger(processingTime=f"{args.trigger:g} seconds")
        .start()
    )
    print(f"republishing {args.source} as {args.target}", flush=True)
    return run(query, args.seconds, "republish")


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
