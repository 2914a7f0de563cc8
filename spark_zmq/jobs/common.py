"""What the streaming jobs share: the arguments that say how long and how often to run, where a
job's spool lives, and running a query to its end with one exit status (a format's options are
the command line's ``add_format_options``)."""

from __future__ import annotations

import argparse
import math
import sys

from pyspark.sql.streaming import StreamingQuery


def add_run_arguments(parser: argparse.ArgumentParser, trigger: float) -> None:
    """``--trigger`` (the micro-batch interval, default ``trigger`` seconds) and ``--seconds``
    (how long the job runs; 0 until it is stopped)."""
    parser.add_argument(
        "--trigger",
        type=float,
        default=trigger,
        metavar="SECONDS",
        help=f"micro-batch interval (default {trigger:g})",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=0.0,
        help="stop after this long (default 0: run until stopped)",
    )


def with_spool_beside(checkpoint: str, options: dict[str, str]) -> dict[str, str]:
    """The reader ``options`` with ``spoolPath`` defaulted to the checkpoint's path +
    ``_spool``, beside it.

    A restart from a checkpoint is exactly once only while the spool survives with it (rows
    captured but not yet committed live only in the spool; docs/guarantees.md), so every job
    with a checkpoint keeps the two together rather than leaving the spool to the reader's
    default under the temporary folder. An explicit ``spoolPath`` wins."""
    return {"spoolPath": checkpoint.rstrip("/") + "_spool", **options}


def run(query: StreamingQuery, seconds: float, what: str) -> int:
    """Let ``query`` run for ``seconds`` (0: until it ends or is stopped), stop it, and return
    the job's exit status: 1, with ``what failed: ...`` on stderr, if the query failed."""
    try:
        query.awaitTermination(math.ceil(seconds) if seconds else None)
    finally:
        query.stop()
    if query.exception() is not None:
        print(f"{what} failed: {query.exception()}", file=sys.stderr)
        return 1
    return 0
