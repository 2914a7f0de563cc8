"""Watch a stream of any spark_zmq format: one progress line per micro-batch, nothing stored.

Each line gives the batch's rows and rows/s, the spool backlog (rows captured but not yet in a
batch), the endpoints the source offers and the gaps capture reported::

    batch 12: 5000 rows, 4980 rows/s, backlog 0 rows, 3 endpoints, 0 gaps

    spark-submit "$(spark-zmq job monitor)" --format ebus --option broker=10.0.0.5 --seconds 0

Without ``--checkpoint`` a monitor is ephemeral, and says so when it starts: each run counts
what is captured from its own start, and its spool is the reader's default under the temporary
folder (nothing is stored, so nothing is owed to a later run). With ``--checkpoint`` a restart
goes on from the last batch, counting each row once, and the spool (``spoolPath``) defaults to
the checkpoint's path + ``_spool``, beside it, so that both survive together.
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
    parser.add_argument("--format", required=True, choices=sorted(FORMATS))
    add_format_options(parser, help="a reader option of the format (repeatable)")
    parser.add_argument(
        "--checkpoint",
        help="checkpoint folder, for a monitor that a restart continues "
        "(default: none, each run starts afresh)",
    )
    add_run_arguments(parser, trigger=1.0)
    return parser.parse_args(argv)


def query_options(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, str]]:
    """The reader's options and the sink's: with ``--checkpoint`` the sink keeps it and the
    spool is beside it (``<checkpoint>_spool`` unless ``spoolPath`` is given); without, neither
    names a folder, so the spool is the reader's default under the temporary folder."""
    if not args.checkpoint:
        return dict(args.option), {}
    options = with_spool_beside(args.checkpoint, dict(args.option))
    return options, {"checkpointLocation": args.checkpoint}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = job_session(f"monitor {args.format}")
    options, sink_options = query_options(args)
    reader = spark.readStream.format(args.format).options(**options)
    spark.streams.addListener(ProgressPrinter())
    query = (
        with_gap_count(reader.load())
        .writeStream.format("noop")
        .options(**sink_options)
        .queryName(f"monitor_{args.format}")
        .trigger(processingTime=f"{args.trigger:g} seconds")
        .start()
    )
    if args.checkpoint:
        print(f"monitoring {args.format}; a restart on {args.checkpoint} goes on", flush=True)
    else:
        print(
            f"monitoring {args.format}, ephemeral (no --checkpoint): this run counts what is "
            f"captured from its start, and a restart starts afresh",
            flush=True,
        )
    return run(query, args.seconds, "monitor")


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
