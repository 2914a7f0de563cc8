"""What the spool's writes cost per partition as a flush holds more of them, source trees side
by side: the spool's share of "capture's CPU grows with the endpoints".

For each count in ``--partitions``, a fresh spool in a temporary folder takes ``--flushes``
flushes of 3,000 100-byte messages in all (3,000/N for each of N partitions, as a capture of N
publishers at a fixed total rate writes them), each after a commit of every partition
(``truncate``) of what the one before wrote, as in a query with a 1-s trigger and 1-s
flushes, and followed by capture's ``write_commits``; the last ``--flushes`` minus
``--warm`` are timed, so that the indexes are written anew in them as often as they are in a
long run. Reported: the process's CPU per flush with its commits, and per partition; and the
growth of its resident memory over the timed flushes per segment written (retention keeps
every one of them: what a writer's memory costs per segment it retains).

Each tree (``--variant LABEL=TREE``, default this checkout as ``current``; e.g. ``git archive
<commit> | tar -x -C /tmp/base`` for an earlier commit, no build needed) runs in a process of
its own, the trees taking turns at each count, ``--repeats`` times; the report gives the
median of the repeats, and each tree's figure against the first tree's.

Run it as ``python benchmarks/spool_flushes.py [--partitions 10,300,1000] [--flushes 300]
[--warm 100] [--repeats 3] [--variant base=/tmp/base]``; it re-executes itself in a private
network namespace, as every benchmark does (it opens no socket).
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
TOTAL_MESSAGES = 3000


def flush_role(partitions: int, flushes: int, warm: int) -> dict[str, float]:
    """In a tree's process: the CPU of a flush and its commits (µs), ``partitions`` in it."""
    from spark_zmq.capture.buffer import spool_table
    from spark_zmq.spool.index import Source
    from spark_zmq.spool.writer import FlushPart, Spool

    each = max(1, TOTAL_MESSAGES // partitions)
    rows = spool_table(
        [[b"." * PAYLOAD_BYTES]] * (each * partitions), list(range(each * partitions)), {}
    )
    keys = [f"tcp://127.0.0.1:{40000 + n}" for n in range(partitions)]
    parts = [FlushPart(key, Source(key, {"publisher": str(n)}), each) for n, key in enumerate(keys)]
    with tempfile.TemporaryDirectory() as folder:
        spool = Spool(folder, max_bytes=1 << 40)
        spool.append_rows(rows, parts)  # (claims every partition)
        cpu, resident = 0, 0
        for flush in range(flushes):
            if flush == warm:
                resident = resident_bytes()
            started = time.process_time_ns()
            for key in keys:  # the micro-batch's commit of what the last flush wrote
                spool.truncate(key, spool.partitions[key].end)
            spool.append_rows(rows, parts)  # (the commits go with its writes)
            spool.write_commits()  # what capture calls after its flush: nothing waits
            if flush >= warm:
                cpu += time.process_time_ns() - started
        grown = resident_bytes() - resident  # segments kept: 7-day retention, no bound hit
        spool.close()
    timed = flushes - warm
    return {
        "flush_us": cpu / timed / 1e3,
        "partition_us": cpu / timed / partitions / 1e3,
        "segment_bytes": grown / timed / partitions,
    }


def resident_bytes() -> int:
    """The process's resident memory now (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run(tree: str, partitions: int, flushes: int, warm: int) -> dict[str, float]:
    arguments = ["--role", "flush", "--partitions", str(partitions)]
    arguments += ["--flushes", str(flushes), "--warm", str(warm)]
    return run_in_tree(tree, __file__, arguments)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="10,300,1000", help="partitions in a flush")
    parser.add_argument("--flushes", type=int, default=300, help="flushes per trial")
    parser.add_argument("--warm", type=int, default=100, help="flushes not timed, first")
    parser.add_argument("--repeats", type=int, default=3, help="trials per tree and count")
    add_variant_argument(parser, "the spool")
    parser.add_argument("--role", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args(sys.argv[1:])
    if args.role:
        print(json.dumps(flush_role(int(args.partitions), args.flushes, args.warm)))
        return 0
    ensure_private_network(__file__)
    trees = source_trees(args.variant)
    counts = [int(n) for n in args.partitions.split(",")]
    print(
        f"spool flushes: {args.flushes} flushes of {TOTAL_MESSAGES:,} {PAYLOAD_BYTES}-byte "
        f"messages over N partitions, each followed by a commit of every partition, the last "
        f"{args.flushes - args.warm} timed; {args.repeats} trials per tree, load "
        f"{os.getloadavg()[0]:.1f}",
        flush=True,
    )
    medians = median_by_count(
        trees,
        counts,
        args.repeats,
        lambda tree, partitions: run(tree, partitions, args.flushes, args.warm),
        lambda result: (
            f"{result['flush_us']:10,.0f} us CPU a flush, "
            f"{result['partition_us']:7.1f} us a partition, "
            f"{result['segment_bytes']:5.0f} bytes resident a segment kept"
        ),
        ["partition_us", "segment_bytes"],
    )
    print("\nCPU a partition and flush, commits included, median of the trials")
    print("(against the first tree):")
    cpu = medians["partition_us"]
    print_against_first(trees, counts, cpu, "N partitions", lambda us: f"{us:>14,.1f} us", 24)
    print("\nResident memory a segment kept (the process's growth over the timed flushes,")
    print("every segment kept: retention's 7 days, no bound reached), median of the trials:")
    kept = medians["segment_bytes"]
    print_against_first(trees, counts, kept, "N partitions", lambda b: f"{b:>10,.0f} bytes", 24)
    return 0


if __name__ == "__main__":
    sys.exit(main())
