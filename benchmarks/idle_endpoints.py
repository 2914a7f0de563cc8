"""What an idle endpoint costs capture: CPU a second with N connected endpoints that send
nothing, against none.

For each N of ``--counts`` (0, 100, 300, 1,000): N wire-level publishers (XPUB sockets bound to
loopback, in a child process, so that their zmq threads do not count) and one ``Capture`` of
them in this process (the compiled core if it is built, the default ``flushIntervalMs`` of
100 ms, a spool in a temporary folder). Once every publisher has capture's subscription, the
process's CPU time (user + system, every thread: capture's and zmq's) is measured over
``--seconds`` (20) of silence. Printed per N: CPU a second (a fraction of a core), and the CPU
an endpoint adds a second over N=0, in microseconds.

Run it as ``python benchmarks/idle_endpoints.py [--counts 0,100,300,1000] [--seconds 20]``; it
re-executes itself in a private network namespace, as every benchmark does.
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.synchronize
import os
import sys
import tempfile
import time

from harness.hermetic import ensure_private_network
from harness.report import print_environment

#: how long the publishers wait for capture's subscriptions
SUBSCRIBE_TIMEOUT = 120.0


def publishers_main(
    count: int, keys: multiprocessing.Queue, done: multiprocessing.synchronize.Event
) -> None:
    """Bind ``count`` XPUB sockets, report their keys, take the subscriptions, and idle."""
    import zmq

    from spark_zmq.testing.wire import bound_xpubs

    context = zmq.Context()
    context.set(zmq.MAX_SOCKETS, count + 64)
    sockets, bound = bound_xpubs(context, count)
    keys.put(bound)
    for socket in sockets:
        if not socket.poll(int(SUBSCRIBE_TIMEOUT * 1000)):
            raise TimeoutError("no subscription from capture")
        socket.recv()
    keys.put("subscribed")
    done.wait()
    context.destroy(linger=0)


def idle_cpu(n: int, seconds: float) -> float:
    """CPU seconds a second of this process while it captures ``n`` idle endpoints."""
    from spark_zmq.capture.loop import Capture
    from spark_zmq.protocols.contract import Endpoint, StaticDiscovery
    from spark_zmq.spool.writer import Spool

    spawn = multiprocessing.get_context("spawn")
    keys_queue, done = spawn.Queue(), spawn.Event()
    child = spawn.Process(target=publishers_main, args=(n, keys_queue, done))
    child.start()
    with tempfile.TemporaryDirectory() as folder:
        spool = Spool(os.path.join(folder, "spool"), 1 << 30)
        capture = Capture(spool, max_message_bytes=1 << 20, flush_interval=0.1, name="idle")
        capture.start()
        try:
            keys = keys_queue.get(timeout=SUBSCRIBE_TIMEOUT)
            endpoints = [Endpoint(k, f"tcp://{k}", {}, (b"",)) for k in keys]
            StaticDiscovery(endpoints).start(capture)
            if n and keys_queue.get(timeout=SUBSCRIBE_TIMEOUT) != "subscribed":
                raise RuntimeError("the publishers did not report their subscriptions")
            time.sleep(2.0)  # connections settled
            before, began = os.times(), time.monotonic()
            time.sleep(seconds)
            after, elapsed = os.times(), time.monotonic() - began
        finally:
            done.set()
            capture.close()
            spool.close()
            child.join(30)
    return (after.user + after.system - before.user - before.system) / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="0,100,300,1000", help="endpoint counts N")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured per N (20)")
    args = parser.parse_args()
    ensure_private_network(__file__)
    print_environment("idle_endpoints benchmark: capture's CPU with N idle endpoints")
    counts = [int(n) for n in args.counts.split(",")]
    results = {n: idle_cpu(n, args.seconds) for n in counts}
    base = results.get(0)
    print(f"\n{'N':>6} {'CPU a second':>14} {'an endpoint adds':>18}")
    for n, cpu in results.items():
        per = f"{(cpu - base) / n * 1e6:,.1f} us/s" if base is not None and n else "-"
        print(f"{n:>6} {cpu:>14.4f} {per:>18}")
    print(f"(load average at the end: {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
