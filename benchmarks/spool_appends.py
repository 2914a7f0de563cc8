"""What a spool append costs as segments nobody committed pile up, source trees side by side.

A partition's segments stay uncommitted as long as no query commits them: a capture service
nobody reads, or a query with a long trigger, adds one every ``flushIntervalMs``. For each
count in ``--pending``, a fresh spool in a temporary folder gets that many one-message segments
(not timed), then ``--appends`` appends of a table of ``--messages`` 100-byte messages (5,000:
a flush at 50,000 msg/s) are timed: the process's CPU time and the wall time per append.

Each tree (``--variant LABEL=TREE``, default this checkout as ``current``; e.g. ``git archive
<commit> | tar -x -C /tmp/base`` for an earlier commit, no build needed) runs in a process of
its own, the trees taking turns at each count, ``--repeats`` times; the report gives the
median of the repeats, and each tree's figure against the first tree's.

Run it as ``python benchmarks/spool_appends.py [--pending 100,1000,4000] [--appends 200]
[--messages 5000] [--repeats 3] [--variant base=/tmp/base]``; it re-executes itself in a
private network namespace, as every benchmark does (it opens no socket).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from harness.hermetic import ensure_private_network
from harness.trees import (
    add_variant_argument,
    median_by_count,
    print_against_first,
    run_in_tree,
    source_trees,
)

PAYLOAD_BYTES = 100


def append_role(pending: int, appends: int, messages: int) -> dict[str, float]:
    """In a tree's process: the CPU and wall time per append (µs), ``pending`` segments in."""
    from spark_zmq.capture.buffer import spool_table
    from spark_zmq.spool.index import Source
    from spark_zmq.spool.writer import Spool

    source = Source("tcp://127.0.0.1:1", {"publisher": "bench"})
    payload = b"." * PAYLOAD_BYTES
    one = spool_table([[payload]], [0], {})
    flush = spool_table([[payload]] * messages, list(range(messages)), {})
    with tempfile.TemporaryDirectory() as folder:
        spool = Spool(folder, max_bytes=1 << 40)
        for _ in range(pending):
            spool.append("k", source, one)
        cpu, wall = time.process_time_ns(), time.perf_counter_ns()
        for _ in range(appends):
            spool.append("k", source, flush)
        cpu, wall = time.process_time_ns() - cpu, time.perf_counter_ns() - wall
        spool.close()
    return {"cpu_us": cpu / appends / 1e3, "wall_us": wall / appends / 1e3}


def run(tree: str, pending: int, appends: int, messages: int) -> dict[str, float]:
    arguments = ["--role", "append", "--pending", str(pending)]
    arguments += ["--appends", str(appends), "--messages", str(messages)]
    return run_in_tree(tree, __file__, arguments)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", default="100,1000,4000", help="uncommitted segments first")
    parser.add_argument("--appends", type=int, default=200, help="appends timed per trial")
    parser.add_argument("--messages", type=int, default=5000, help="messages per timed append")
    parser.add_argument("--repeats", type=int, default=3, help="trials per tree and count")
    add_variant_argument(parser, "the spool")
    parser.add_argument("--role", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args(sys.argv[1:])
    if args.role:
        print(json.dumps(append_role(int(args.pending), args.appends, args.messages)))
        return 0
    ensure_private_network(__file__)
    trees = source_trees(args.variant)
    counts = [int(n) for n in args.pending.split(",")]
    print(
        f"spool appends: {args.appends} appends of {args.messages:,} {PAYLOAD_BYTES}-byte messages "
        f"after N uncommitted segments, {args.repeats} trials per tree, load "
        f"{os.getloadavg()[0]:.1f}",
        flush=True,
    )
    medians = median_by_count(
        trees,
        counts,
        args.repeats,
        lambda tree, pending: run(tree, pending, args.appends, args.messages),
        lambda result: (
            f"{result['cpu_us']:9.0f} us CPU {result['wall_us']:9.0f} us wall per append"
        ),
        ["cpu_us"],
    )["cpu_us"]
    print("\nCPU per append, median of the trials (against the first tree):")
    print_against_first(
        trees, counts, medians, "N uncommitted", lambda cpu: f"{cpu:>12,.0f} us", 22
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
