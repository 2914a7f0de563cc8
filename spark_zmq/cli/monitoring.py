"""``spark-zmq metrics-targets``: where the capture processes of a spool (``capture=executors``,
option ``metrics``) serve their metrics, as a Prometheus file-based service discovery file.

Each capture process serves on a free port of its host and names it in its record in the spool
(``@capture/``); a job that runs this command every minute into a file that Prometheus'
``file_sd_configs`` watches keeps the scrape targets in step with the executors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from urllib.parse import urlparse

from spark_zmq.spool.processes import load_records

#: seconds since its last heartbeat within which a capture process is a target
LIVE_WITHIN = 60.0


def add_metrics_targets_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "metrics-targets",
        help="print where a spool's capture processes serve their metrics (Prometheus file_sd)",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
    )
    parser.add_argument("--spool", required=True, metavar="PATH", help="the spool folder")


def run_metrics_targets(args: argparse.Namespace) -> int:
    spool = os.path.abspath(args.spool)
    if not os.path.isdir(spool):
        print(f"spark-zmq metrics-targets: no spool at {spool}", file=sys.stderr)
        return 1
    now = time.time()
    groups = [
        {
            "targets": [urlparse(record.metrics).netloc],
            "labels": {"executor": record.executor, "role": record.role, "host": record.host},
        }
        for record in sorted(load_records(spool).values(), key=lambda r: r.process)
        if record.metrics and not record.gone and now - record.at < LIVE_WITHIN
    ]
    print(json.dumps(groups, indent=1))
    return 0
