"""A read task's rows from the spool's files against the same rows from the spool's server.

With capture on the driver (or in a capture service), read tasks on hosts that do not see the
spool's folder get their ranges from the capturing process over Arrow Flight
(``spark_zmq.spool.serving``). This measures what that costs a read task, side by side in one
run: a spool of ``--messages`` 100-byte ZeroEQ events (one segment per ``--flush`` messages, as
capture's flushes make them) is read range by range (``--range`` messages each, a micro-batch's
partition) in four ways, taking turns, ``--repeats`` times:

- ``files``: ``spool.reader.read_range``, as a task on the spool's host reads;
- ``flight``: ``spool.remote.read_served_range`` from a server in another process, over
  loopback;
- ``flight+tls``: the same with the server's certificate (openssl-made, self-signed);
- ``rows (files)`` / ``rows (flight)``: the whole read task, ``spark.rows.read_rows`` (decode
  into the ZeroEQ schema, Arrow batches for Spark), from the files and from the server.

For each it prints messages per second (wall), the reading process's CPU per message, and the
server's CPU per message (from its ``/proc`` times); the last column is each way's rate against
the files'. Loopback hides a network's bandwidth: on a real network, add the bytes' transfer
time (about 124 bytes a message on the wire).

Run it as ``python benchmarks/spool_transport.py [--messages 1000000] [--range 100000]
[--flush 5000] [--repeats 3]``; it re-executes itself in a private network namespace.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

from harness.hermetic import ensure_private_network
from harness.report import commit

PAYLOAD_BYTES = 100
EVENT = "zeroeq::test::Echo"


def fill(root: str, messages: int, flush: int) -> None:
    """A spool of ``messages`` events of partition ``k``, one segment per ``flush``."""
    from spark_zmq.capture.buffer import spool_table
    from spark_zmq.protocols.zeroeq.wire import event_id
    from spark_zmq.spool.index import Source
    from spark_zmq.spool.writer import Spool

    frames = [event_id(EVENT), b"." * PAYLOAD_BYTES]
    segment = spool_table([frames] * flush, list(range(flush)), {})
    spool = Spool(root, max_bytes=1 << 40)
    source = Source("tcp://127.0.0.1:1", {"instance": "bench"})
    for _ in range(messages // flush):
        spool.append("k", source, segment)
    spool.close()


def serve(root: str, tls: str) -> None:
    """In the server's process: serve ``root`` until stdin closes; print where, then ready."""
    from spark_zmq.spool.identity import spool_identity
    from spark_zmq.spool.remote import ServerSettings
    from spark_zmq.spool.serving import SpoolServer

    certificate, key = tls.split(",") if tls else (None, None)
    server = SpoolServer(
        root, spool_identity(root), ServerSettings("127.0.0.1", 0, certificate, key)
    )
    server.start()
    print("ready", flush=True)
    sys.stdin.read()
    server.close()


def self_signed(folder: str) -> str:
    """``certificate,key`` files for 127.0.0.1, made by openssl."""
    certificate, key = os.path.join(folder, "server.pem"), os.path.join(folder, "server.key")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
        + ["-nodes", "-days", "1", "-subj", "/CN=bench", "-addext", "subjectAltName=IP:127.0.0.1"]
        + ["-keyout", key, "-out", certificate],
        check=True,
        capture_output=True,
    )
    return f"{certificate},{key}"


class Server:
    """A spool server in a process of its own, as the driver's is to a read task."""

    def __init__(self, root: str, tls: str = "") -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--role", "serve", "--root", root, "--tls", tls],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the spool server did not start")

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(30)


def timed(read: Callable[[], int], server: Server | None) -> tuple[float, float, float, int]:
    """(wall s, this process's CPU s, the server's CPU s, messages) of one ``read``."""
    served = server.cpu_seconds() if server else 0.0
    cpu, wall = time.process_time(), time.perf_counter()
    count = read()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return wall, cpu, (server.cpu_seconds() - served) if server else 0.0, count


def ranges(messages: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, messages, size):
        yield start, min(messages, start + size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--range", type=int, default=100_000, help="messages a read task reads")
    parser.add_argument("--flush", type=int, default=5_000, help="messages a segment holds")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--role", default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--tls", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "serve":
        serve(args.root, args.tls)
        return
    ensure_private_network(__file__)
    from spark_zmq.protocols.zeroeq import ZeroEQ
    from spark_zmq.spark.rows import SpoolRange, read_rows
    from spark_zmq.spool.identity import spool_identity
    from spark_zmq.spool.reader import read_range
    from spark_zmq.spool.remote import load_served, read_served_range
    from spark_zmq.stream_settings import ReaderSettings

    protocol = ZeroEQ()
    options = protocol.parse_reader_options({})
    query = ReaderSettings.of(options, protocol.read_settings(options))
    with tempfile.TemporaryDirectory() as folder:
        root = os.path.join(folder, "spool")
        fill(root, args.messages, args.flush)
        spool_id = spool_identity(root)
        tls = self_signed(folder)
        print(
            f"spool_transport: {args.messages} messages of {PAYLOAD_BYTES} bytes, read in "
            f"ranges of {args.range}, {args.flush} a segment, {args.repeats} repeats; "
            f"commit {commit()}"
        )

        def slices(read: Callable[[str, int, int], Iterator]) -> Callable[[], int]:
            def run() -> int:
                return sum(
                    t.num_rows
                    for s, e in ranges(args.messages, args.range)
                    for *_, t in read("k", s, e)
                )

            return run

        def task_rows(served: bool) -> Callable[[], int]:
            path = root if not served else os.path.join(folder, "not-here")
            served_spool = load_served(root) if served else None

            def run() -> int:
                return sum(
                    batch.num_rows
                    for s, e in ranges(args.messages, args.range)
                    for batch in read_rows(
                        protocol,
                        query.decoding,
                        query.rows,
                        SpoolRange(path, "k", s, e, spool_id, served_spool),
                    )
                )

            return run

        results: dict[str, list[tuple[float, float, float, int]]] = {}
        for _ in range(args.repeats):
            results.setdefault("files", []).append(
                timed(slices(lambda *r: read_range(root, *r)), None)
            )
            for label, server_tls in (("flight", ""), ("flight+tls", tls)):
                server = Server(root, server_tls)
                served = load_served(root)
                assert served is not None
                reader = slices(lambda *r, s=served: read_served_range(s, *r))
                results.setdefault(label, []).append(timed(reader, server))
                if label == "flight":
                    results.setdefault("rows (files)", []).append(timed(task_rows(False), None))
                    results.setdefault("rows (flight)", []).append(timed(task_rows(True), server))
                server.close()
        report(results)


def report(results: dict[str, list[tuple[float, float, float, int]]]) -> None:
    """Median of the repeats per way: rate, CPU per message here and in the server, ratio."""
    print(
        f"{'way':16} {'msg/s':>12} {'reader µs/msg':>14} {'server µs/msg':>14} {'rate/files':>11}"
    )
    medians = {}
    for label, trials in results.items():
        wall = statistics.median(t[0] for t in trials)
        count = trials[0][3]
        medians[label] = count / wall
        cpu = statistics.median(t[1] for t in trials) / count * 1e6
        server = statistics.median(t[2] for t in trials) / count * 1e6
        base = medians["files"] if not label.startswith("rows") else medians.get("rows (files)")
        ratio = medians[label] / base if base else float("nan")
        print(f"{label:16} {medians[label]:>12,.0f} {cpu:>14.2f} {server:>14.2f} {ratio:>11.2f}")


if __name__ == "__main__":
    main()
