"""What the streaming jobs share: the arguments that say how long and how often to run, where a
job's spool lives, and running a query to its end with one exit status (a format's options are
the command line's ``add_format_options``)."""

from __future__ import annotations

import argparse
import math
import signal
import sys
import threading
import time

from pyspark.sql.streaming import StreamingQuery


def add_run_arguments(parser: argparse.ArgumentParser, trigger: float) -> None:
    """``--trigger`` (the micro-batch interval, default ``trigger`` seconds) and ``--seconds``
    (how long the job runs; 0 until it is stopped: SIGTERM or SIGINT, ``run``)."""
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
        help="stop after this long (default 0: run until stopped by SIGTERM or SIGINT)",
    )


def with_spool_beside(checkpoint: str, options: dict[str, str]) -> dict[str, str]:
    """The reader ``options`` with ``spoolPath`` defaulted to the checkpoint's path +
    ``_spool``, beside it.

    A restart from a checkpoint is exactly once only while the spool survives with it (rows
    captured but not yet committed live only in the spool; docs/guarantees.md), so every job
    with a checkpoint keeps the two together rather than leaving the spool to the reader's
    default under the temporary folder. An explicit ``spoolPath`` wins."""
    return {"spoolPath": checkpoint.rstrip("/") + "_spool", **options}


#: seconds between two checks of the job's end (its time, a signal, the query's own end): a
#: job stops at most this long after its ``--seconds``
RUN_CHECK_SECONDS = 1


def run(query: StreamingQuery, seconds: float, what: str) -> int:
    """Let ``query`` run for ``seconds`` (0: until it ends), or until SIGTERM or SIGINT reaches
    the job's Python process (a supervisor's or a user's stop), stop it, and return the job's
    exit status: 1, with ``what failed: ...`` on stderr, if the query failed. A stop by signal
    is a clean stop: the query ends its micro-batch, capture writes what it received into the
    spool (the next run with the same checkpoint reads it), and the status is 0."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    deadline = time.monotonic() + seconds if seconds else math.inf
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            if query.awaitTermination(RUN_CHECK_SECONDS):
                break  # the query ended by itself (AvailableNow, or it failed: that raised)
    finally:
        query.stop()
    if query.exception() is not None:
        print(f"{what} failed: {query.exception()}", file=sys.stderr)
        return 1
    return 0
