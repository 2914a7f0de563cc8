"""``python -m spark_zmq.capture.selftest [--core native]``: does capture work on this install?

It captures messages from a PUB socket on loopback into a spool in a temporary folder, with the
receive loop asked for, and checks that every message arrived once, in order, byte for byte.
It prints the core that ran and the libzmq it calls, and exits 1 on any difference. An installed
wheel is checked this way (``scripts/check_wheel.sh``, cibuildwheel's test command): it proves
that the compiled core loads, binds to pyzmq's libzmq and captures.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import zmq

from spark_zmq.capture.loop import Capture
from spark_zmq.native import CORES, status
from spark_zmq.protocols.contract import Endpoint, StaticDiscovery
from spark_zmq.spool.layout import load_index
from spark_zmq.spool.reader import read_range
from spark_zmq.spool.writer import Spool

MESSAGES = 20_000
TIMEOUT = 60.0


def expected(count: int) -> list[list[bytes]]:
    """Two frames each, the second of a varying size (empty ones too)."""
    return [[b"selftest", b"%d;" % i + b"x" * (i % 300)] for i in range(count)]


def captured(core: str, count: int) -> tuple[str, list[list[bytes]]]:
    """Capture ``count`` messages with ``core``: (the core that ran, the frames spooled)."""
    sender: zmq.Socket = zmq.Context.instance().socket(zmq.XPUB)
    sender.setsockopt(zmq.SNDHWM, 0)
    sender.setsockopt(zmq.LINGER, 0)
    port = sender.bind_to_random_port("tcp://127.0.0.1")
    key = f"127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="spark_zmq-selftest-") as folder:
        spool = Spool(folder, 1 << 30)
        capture = Capture(
            spool, max_message_bytes=1 << 20, flush_interval=0.05, name="selftest", core=core
        )
        try:
            capture.start()
            StaticDiscovery([Endpoint(key, f"tcp://{key}")]).start(capture)
            if not (sender.poll(int(TIMEOUT * 1000)) and sender.recv() == b"\x01"):
                raise TimeoutError("capture did not subscribe")
            for message in expected(count):
                sender.send_multipart(message)
            deadline = time.monotonic() + TIMEOUT
            while capture.received().get(key, 0) < count and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            capture.close()
            sender.close()
        capture.check()
        index = load_index(spool.root, key)
        frames: list[list[bytes]] = []
        if index is not None:
            for _, _, table in read_range(spool.root, key, index.start, index.end):
                frames += table.column("frames").to_pylist()
        spool.close()
    return capture.core, frames


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--core", choices=CORES, default="auto", help="receive loop to check")
    parser.add_argument("--messages", type=int, default=MESSAGES)
    args = parser.parse_args(argv)
    print(f"compiled core: {status()}")
    ran, frames = captured(args.core, args.messages)
    wanted = expected(args.messages)
    good = frames == wanted
    print(
        f"capture ({ran} receive loop): {len(frames)} of {len(wanted)} messages spooled, "
        f"{'all as sent' if good else 'NOT as sent'}"
    )
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
