"""What one message of many empty frames costs a receiver: zmq alone, and capture on each core.

A PUB in another process sends one message of ``--frames`` empty frames (default 1,000,000:
2 MiB on the wire), then a good message. Each trial runs in a fresh process and prints its RSS
before, at its peak and after (MiB):

- ``zmq``: a bare SUB that waits until the message is readable (libzmq hands a multipart
  message over only once all its frames have arrived, and queues each frame as a 64-byte
  ``zmq_msg_t`` until then), then takes its frames without keeping them. Its growth is zmq's
  share, which no receiver avoids.
- ``native`` and ``python``: capture (``spark_zmq.capture.loop.Capture``, default
  ``maxMessageParts``) until the good message is in the spool; what it grows beyond zmq's
  share is capture's own. The rows it wrote are printed too (the large message should be one
  gap row).

Run it as ``python benchmarks/many_frames_memory.py [--frames 1000000]``; it re-executes itself
in a private network namespace.
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


def rss_mib() -> int:
    from spark_zmq.testing.processes import rss_bytes

    return rss_bytes(os.getpid()) >> 20


def send(port: int, frames: int) -> None:
    import zmq

    sock = zmq.Context().socket(zmq.XPUB)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.bind(f"tcp://127.0.0.1:{port}")
    sock.recv()  # a subscription: the receiver is connected
    time.sleep(0.3)
    for _ in range(frames - 1):
        sock.send(b"", zmq.SNDMORE)
    sock.send(b"")
    sock.send_multipart([b"after", b"1"])
    time.sleep(120)  # killed by the trial once it is done


def bare_zmq(port: int) -> dict:
    import zmq

    before = rss_mib()
    sub: zmq.Socket = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{port}")
    assert sub.poll(60_000), "nothing arrived"
    peak = rss_mib()  # the whole message is queued now
    while True:
        sub.recv(copy=False)
        if not sub.getsockopt(zmq.RCVMORE):
            break
    return {"before": before, "peak": peak, "after": rss_mib(), "rows": []}


def capture(port: int, core: str) -> dict:
    os.environ["SPARK_ZMQ_CAPTURE_CORE"] = core
    from spark_zmq.capture.loop import Capture
    from spark_zmq.protocols.contract import Endpoint
    from spark_zmq.spool.layout import load_index
    from spark_zmq.spool.reader import read_range
    from spark_zmq.spool.writer import Spool

    folder = tempfile.mkdtemp()
    spool = Spool(folder, 64 << 30)
    running = Capture(spool, max_message_bytes=64 << 20, flush_interval=0.1, receive_hwm=10000)
    running.start()
    key = f"127.0.0.1:{port}"
    before = peak = rss_mib()
    running.endpoint_joined(Endpoint(key, f"tcp://{key}"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        peak = max(peak, rss_mib())
        index = load_index(folder, key)
        if index is not None and index.end >= 2:
            break
        time.sleep(0.01)
    after = rss_mib()
    running.close()
    index = load_index(folder, key)
    if index is None:
        raise RuntimeError(f"capture wrote no index for {key} in {folder}")
    rows = []
    for _, _, table in read_range(folder, key, index.start, index.end):
        for frames, fault in zip(
            table.column("frames").to_pylist(), table.column("fault").to_pylist()
        ):
            rows.append(fault[:120] + "..." if fault else f"{len(frames)} frames")
    spool.close()
    return {"before": before, "peak": max(peak, after), "after": after, "rows": rows}


def trial(mode: str, frames: int, results: Any) -> None:
    from spark_zmq.testing.standalone import free_port

    port = free_port()
    sender = multiprocessing.get_context("spawn").Process(target=send, args=(port, frames))
    sender.start()
    try:
        results.put(bare_zmq(port) if mode == "zmq" else capture(port, mode))
    finally:
        sender.kill()


def in_fresh_process(mode: str, frames: int) -> dict:
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    process = spawn.Process(target=trial, args=(mode, frames, results))
    process.start()
    outcome = results.get(timeout=300)
    process.join(30)
    return outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000, help="frames in the message")
    args = parser.parse_args()
    ensure_private_network(__file__)
    print(f"one message of {args.frames:,} empty frames; RSS in MiB, each trial a fresh process")
    print(f"{'receiver':>10} {'before':>7} {'peak':>7} {'after':>7} {'growth':>7}  rows written")
    for mode in ("zmq", "native", "python"):
        seen = in_fresh_process(mode, args.frames)
        growth = seen["peak"] - seen["before"]
        print(
            f"{mode:>10} {seen['before']:>7} {seen['peak']:>7} {seen['after']:>7} {growth:>7}  "
            f"{seen['rows']}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
