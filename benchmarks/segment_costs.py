"""What a spool segment costs to write and to read when each holds one message: the shape a
session of many quiet publishers gives the spool (300 publishers at 10 msg/s, flushed every
100 ms).

For each tree (``--variant LABEL=TREE``, default this checkout as ``current``; ``git archive
<commit> | tar -x -C /tmp/base`` makes one), in a process of its own: a spool of
``--partitions`` (300) partitions written as capture writes it, ``--flushes`` (100) flushes of
one 100-byte ZeroEQ event per partition (``Spool.append_all`` once per flush where the tree has
it, else one ``Spool.append`` per partition, as that tree's capture did); then one read task
over every partition's whole range (``spark.rows.read_rows`` of a ``ReadTask``: the rows in
the ZeroEQ schema, as Spark gets them), ``--repeats`` (3) times. Printed per tree: write and
read time per segment (the best of the repeats for the read), the files the spool holds (by
inode: a flush file linked by many partitions counts once), and each tree against the first.
No network is used.

Run it as ``python benchmarks/segment_costs.py [--partitions 300] [--flushes 100]
[--variant base=/tmp/base --variant current=.]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from harness.trees import add_variant_argument, run_in_tree, source_trees

PAYLOAD_BYTES = 100
EVENT = "zeroeq::test::Echo"


def measure(partitions: int, flushes: int, repeats: int) -> dict:
    """Write and read one spool in this process (the tree on the path); the figures."""
    from spark_zmq.capture.buffer import spool_table
    from spark_zmq.protocols.zeroeq import ZeroEQ
    from spark_zmq.protocols.zeroeq.wire import event_id
    from spark_zmq.spark.rows import ReadTask, SpoolRange, read_rows
    from spark_zmq.spool.index import Source
    from spark_zmq.spool.writer import Spool
    from spark_zmq.stream_settings import ReaderSettings

    frames = [event_id(EVENT), b"." * PAYLOAD_BYTES]
    keys = [f"127.0.0.1:{5000 + n}" for n in range(partitions)]
    sources = {key: Source(f"tcp://{key}", {"instance": key}) for key in keys}
    with tempfile.TemporaryDirectory() as root:
        spool = Spool(root, max_bytes=1 << 40)
        batched = hasattr(spool, "append_all")
        began = time.perf_counter()
        for flush in range(flushes):
            tables = {key: spool_table([frames], [flush], {}) for key in keys}
            if batched:
                from spark_zmq.spool.writer import Append

                spool.append_all([Append(key, sources[key], tables[key]) for key in keys])
            else:
                for key in keys:
                    spool.append(key, sources[key], tables[key])
        write = time.perf_counter() - began
        spool.close()
        inodes = {
            os.stat(os.path.join(folder, name)).st_ino
            for folder, _, names in os.walk(root)
            for name in names
            if name.endswith(".arrow")
        }
        protocol = ZeroEQ()
        options = protocol.parse_reader_options({})
        settings = ReaderSettings.of(options, protocol.read_settings(options))
        task = ReadTask(tuple(SpoolRange(root, key, 0, flushes) for key in keys))
        reads = []
        for _ in range(repeats):
            began = time.perf_counter()
            rows = sum(
                batch.num_rows
                for batch in read_rows(protocol, settings.decoding, settings.rows, task)
            )
            reads.append(time.perf_counter() - began)
    segments = partitions * flushes
    if rows != segments:
        raise RuntimeError(f"read {rows} rows of {segments}")
    return {
        "write_us": write / segments * 1e6,
        "read_us": min(reads) / segments * 1e6,
        "files": len(inodes),
        "batched": batched,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=300, help="partitions (300)")
    parser.add_argument("--flushes", type=int, default=100, help="flushes (100)")
    parser.add_argument("--repeats", type=int, default=3, help="reads of the spool (3)")
    add_variant_argument(parser, "the spool and the read side")
    parser.add_argument("--role", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        print(json.dumps(measure(args.partitions, args.flushes, args.repeats)))
        return 0
    print(
        f"segment_costs: {args.partitions} partitions x {args.flushes} flushes of one "
        f"{PAYLOAD_BYTES}-byte event, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    arguments = ["--role", "run", "--partitions", str(args.partitions)]
    arguments += ["--flushes", str(args.flushes), "--repeats", str(args.repeats)]
    results = {
        label: run_in_tree(tree, __file__, arguments) for label, tree in source_trees(args.variant)
    }
    first = next(iter(results.values()))
    print(f"{'':<28}" + "".join(f"{label:>14}" for label in results))
    for name, key, unit in (
        ("write a segment", "write_us", "us"),
        ("read a segment (one task)", "read_us", "us"),
        ("files in the spool", "files", ""),
    ):
        print(f"{name:<28}" + "".join(f"{r[key]:>11,.1f} {unit:<2}" for r in results.values()))
        ratios = "".join(f"{r[key] / first[key]:>14.3f}" for r in results.values())
        print(f"{'  against ' + next(iter(results)):<28}{ratios}")
    print(f"(load average at the end: {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
