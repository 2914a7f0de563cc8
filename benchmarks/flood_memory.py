"""Capture's memory under a peer that floods faster than it takes, with and without a receive
bound, side by side in one run.

A PUB in another process sends messages of each ``--sizes`` (KiB; default 64 and 1024) as fast
as it can for ``--seconds``; capture
(``spark_zmq.capture.loop.Capture``, as the driver or a holder runs it, no Spark) reads it into a
spool that a stand-in reader truncates every 0.2 s. For each ``receiveHighWaterMark`` it prints
the messages captured, the peak RSS of the capturing process, and whether capture logged the
flood. Run it as ``python benchmarks/flood_memory.py [--seconds 8] [--bounds 200,10000,0]
[--sizes 64,1024]``; it re-executes itself in a private network namespace.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from typing import Any

from harness.hermetic import ensure_private_network


def flood(port: int, seconds: float, size: int) -> None:
    import zmq

    sock = zmq.Context().socket(zmq.PUB)
    sock.bind(f"tcp://127.0.0.1:{port}")
    time.sleep(1.0)  # the subscriber connects
    body, end = b"f" * size, time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(64):
            sock.send_multipart([b"e" * 16, body])
    sock.close(0)


def trial(bound: int, seconds: float, size: int) -> tuple[int, int, bool]:
    """(messages captured, peak RSS in MiB, flood logged) of one capture under one flood."""
    from spark_zmq.capture.loop import Capture
    from spark_zmq.protocols.contract import Endpoint
    from spark_zmq.spool.writer import Spool
    from spark_zmq.testing.logs import logged_warnings
    from spark_zmq.testing.processes import rss_bytes
    from spark_zmq.testing.standalone import free_port

    port = free_port()
    flooder = multiprocessing.get_context("spawn").Process(target=flood, args=(port, seconds, size))
    flooder.start()
    peak = 0
    with logged_warnings() as warnings, tempfile.TemporaryDirectory() as folder:
        spool = Spool(folder, 64 << 30)
        capture = Capture(
            spool,
            max_message_bytes=2 * size + 1024,
            flush_interval=0.1,
            receive_hwm=bound,
            name=f"bound {bound}",
        )
        capture.start()
        capture.endpoint_joined(Endpoint("flood", f"tcp://127.0.0.1:{port}", {}, (b"",)))
        while flooder.is_alive():
            time.sleep(0.2)
            peak = max(peak, rss_bytes(os.getpid()) >> 20)
            for key, state in spool.snapshot().items():  # a reader committing as it goes
                spool.truncate(key, state.end)
        received = sum(capture.received().values())
        capture.close()
        spool.close()
    return received, peak, any("sends faster than capture takes" in w for w in warnings)


def report(bound: int, seconds: float, size: int, results: Any) -> None:
    results.put(trial(bound, seconds, size))


def in_fresh_process(bound: int, seconds: float, size: int) -> tuple[int, int, bool]:
    """A trial in a process of its own, so that its peak RSS is its own."""
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    process = spawn.Process(target=report, args=(bound, seconds, size, results))
    process.start()
    outcome = results.get(timeout=seconds + 120)
    process.join(30)
    return outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="flood length (default 8)")
    parser.add_argument(
        "--bounds",
        default="200,10000,0",
        help="receiveHighWaterMark values, comma-separated (default 200,10000,0)",
    )
    parser.add_argument(
        "--sizes", default="64,1024", help="message sizes in KiB, comma-separated (default 64,1024)"
    )
    args = parser.parse_args()
    ensure_private_network(__file__)
    for size in (int(kib) << 10 for kib in args.sizes.split(",")):
        print(
            f"flood of {size >> 10} KiB messages for {args.seconds:g} s per trial; each trial "
            f"in a fresh process"
        )
        print(f"{'receiveHighWaterMark':>22} {'captured':>10} {'peak RSS':>10}  flood logged")
        results = {}
        for bound in (int(b) for b in args.bounds.split(",")):
            received, peak, logged = in_fresh_process(bound, args.seconds, size)
            results[bound] = peak
            print(
                f"{bound:>22,} {received:>10,} {peak:>8,} MiB  {'yes' if logged else 'no'}",
                flush=True,
            )
        if 0 in results and len(results) > 1:
            bounded = min(v for k, v in results.items() if k)
            print(f"peak RSS, unbounded / smallest bound: {results[0] / bounded:.1f}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
