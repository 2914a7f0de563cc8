"""Soak and faults: a stream held for a while at a fixed rate while its parts fail, then counted.

An EBUS broker (``python -m spark_zmq ebus broker``), publisher processes that broadcast
``{"p": publisher, "s": sequence}`` on channel ``soak/<p>`` at a fixed rate, and a query
(``format("ebus")``, ``capture=executors`` on ``local[2]``, into a Parquet table) run for
``--minutes``. Every ``--fault-every`` seconds one fault is injected, in turn:

- a publisher restarts (it goes on with its sequence numbers),
- the broker restarts on the same ports,
- the query stops (SIGTERM) and restarts from its checkpoint and spool,
- a capture process is killed (SIGKILL) and replaced through its lease.

At the end the publishers stop, the query drains its spool into the table, and the table is
checked (with Spark, which reads only committed files). It prints messages sent, captured (rows
the spool received, gap rows apart), delivered, duplicated, lost while a peer was down
(expected: ZeroMQ pub/sub keeps nothing for a reader that is not connected), lost after capture
(must be 0), peak memory and peak spool size. Exit status 1 if anything was duplicated or lost
after capture.

Run it as ``python benchmarks/soak.py [--minutes 10] [--short]``; it re-executes itself
inside ``scripts/netns.sh`` (a private network namespace holding only ``lo``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from hermetic import ensure_private_network

from spark_zmq.spark.offsets import StreamOffset
from spark_zmq.testing.processes import rss_bytes, running_holders
from spark_zmq.testing.standalone import free_port

HERE = Path(__file__).resolve()
FAULTS = ("publisher", "broker", "query", "capture")
CHANNEL = "soak/"


# -- the parts, each run as ``soak.py <part> ...`` in a process of its own --------------------


def run_publisher(args: argparse.Namespace) -> int:
    """Broadcast at ``--rate``; the next sequence number survives restarts in ``--state``."""
    import zmq

    from spark_zmq.protocols.ebus import pack

    state = Path(args.state)
    sequence = json.loads(state.read_text())["next"] if state.exists() else 0
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.connect(f"tcp://127.0.0.1:{args.pub_port}")
    channel = f"{CHANNEL}{args.index}".encode()
    start, sent = time.monotonic(), 0
    while not stopping:
        due = int((time.monotonic() - start) * args.rate)
        while sent < due:
            sock.send_multipart([channel, pack({"p": args.index, "s": sequence})])
            sequence, sent = sequence + 1, sent + 1
        state.write_text(json.dumps({"next": sequence}))
        time.sleep(0.01)
    state.write_text(json.dumps({"next": sequence}))
    sock.close()
    return 0


def run_query(args: argparse.Namespace) -> int:
    """The query under test, until SIGTERM."""
    from spark_zmq.spark.session import loopback_session

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    spark = loopback_session("soak", {"spark.sql.session.timeZone": "UTC"}, log_level="ERROR")
    query = (
        spark.readStream.format("ebus")
        .options(
            subPort=str(args.sub_port),
            channels=CHANNEL,
            capture="executors",
            spoolPath=args.spool,
            leaseTimeout="3",
            captureIdleTimeout="30",
        )
        .load()
        .select("partition", "offset", "channel", "data", "error")
        .writeStream.format("parquet")
        .option("path", args.sink)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )
    while query.isActive and not stopping:  # a py4j call would not see the signal
        time.sleep(0.2)
    failure = query.exception()
    query.stop()
    spark.stop()
    if failure is not None:
        print(f"query failed: {failure}", file=sys.stderr, flush=True)
    return 1 if failure is not None else 0


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Run:
    """The processes of one soak run and what was measured on the way."""

    folder: Path
    publishers: int
    rate: float
    pub_port: int = 0
    sub_port: int = 0
    frontend_port: int = 0
    backend_port: int = 0
    broker: subprocess.Popen | None = None
    query: subprocess.Popen | None = None
    senders: dict[int, subprocess.Popen] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAULTS, 0))
    peak_capture_rss: int = 0
    peak_query_rss: int = 0
    peak_spool: int = 0

    def part(self, *args: str) -> subprocess.Popen:
        log = open(self.folder / "parts.log", "ab")
        return subprocess.Popen(
            [sys.executable, str(HERE), *args], stdout=log, stderr=log, start_new_session=True
        )

    def start_broker(self) -> None:
        self.broker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "spark_zmq",
                "ebus",
                "broker",
                "--frontend-port",
                str(self.frontend_port),
                "--backend-port",
                str(self.backend_port),
                "--pub-port",
                str(self.pub_port),
                "--sub-port",
                str(self.sub_port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / "broker.log", "ab"),
            start_new_session=True,
        )

    def start_publisher(self, index: int) -> None:
        self.senders[index] = self.part(
            "publisher",
            "--index",
            str(index),
            "--pub-port",
            str(self.pub_port),
            "--rate",
            str(self.rate),
            "--state",
            str(self.folder / f"publisher-{index}.json"),
        )

    def start_query(self) -> None:
        self.query = self.part(
            "query",
            "--sub-port",
            str(self.sub_port),
            "--spool",
            str(self.spool),
            "--checkpoint",
            str(self.folder / "checkpoint"),
            "--sink",
            str(self.sink),
        )

    @property
    def spool(self) -> Path:
        return self.folder / "spool"

    @property
    def sink(self) -> Path:
        return self.folder / "table"

    def inject(self, fault: str, rng: random.Random) -> str:
        self.faults[fault] += 1
        if fault == "publisher":
            index = rng.randrange(self.publishers)
            stop(self.senders[index])
            self.start_publisher(index)
            return f"publisher {index} restarted"
        if fault == "broker":
            stop(self.broker)
            self.start_broker()
            return "broker restarted"
        if fault == "query":
            stop(self.query, timeout=60)
            self.start_query()
            return "query restarted from its checkpoint"
        holders = sorted(wait_for_capture(self, timeout=60) and running_holders())
        victim = rng.choice(holders)
        os.kill(victim, signal.SIGKILL)
        return f"capture process {victim} killed"

    def sample(self) -> None:
        self.peak_capture_rss = max(
            [self.peak_capture_rss] + [rss_bytes(pid) for pid in running_holders()]
        )
        if self.query is not None:
            self.peak_query_rss = max(self.peak_query_rss, tree_rss_bytes(self.query.pid))
        self.peak_spool = max(self.peak_spool, folder_bytes(self.spool))

    def stop_all(self) -> None:
        for process in [*self.senders.values(), self.query, self.broker]:
            if process is not None:
                stop(process, timeout=60)


def wait_for_capture(run: Run, timeout: float) -> float:
    """The time at which a capture process runs (after a query restart: the new one's)."""
    deadline = time.monotonic() + timeout
    while not running_holders():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no capture process within {timeout:.0f} s; see {run.folder}")
        run.sample()
        time.sleep(0.5)
    return time.monotonic()


def stop(process: subprocess.Popen, timeout: float = 20) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def tree_rss_bytes(root: int) -> int:
    """RSS of a process and its descendants (the query: its JVM and Python workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2 :].split()[1]), []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss_bytes(pid)
        todo += children.get(pid, [])
    return total


def folder_bytes(folder: Path) -> int:
    total = 0
    for base, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(base, name))
            except OSError:
                pass
    return total


def drain(run: Run, timeout: float) -> bool:
    """Until Spark has committed a batch that ends at or after every offset the spool holds, and
    the spool held the same offsets at the check before: a holder that is still starting (after
    a kill, say) writes its gap row later, and a check between two writes would miss it.
    False if that did not happen within ``timeout`` (a query that stopped committing)."""
    from spark_zmq.spool.reader import read_snapshot

    deadline = time.monotonic() + timeout
    before: dict[str, int] = {}
    while time.monotonic() < deadline:
        run.sample()
        time.sleep(2)
        ends = {k: s.end for k, s in read_snapshot(str(run.spool)).items()}
        done = committed_offsets(run.folder / "checkpoint")
        if ends and ends == before and all(done.get(k, 0) >= end for k, end in ends.items()):
            return True
        before = ends
    print(f"  the spool did not drain within {timeout:.0f} s", flush=True)
    return False


def committed_offsets(checkpoint: Path) -> dict[str, int]:
    """The source's end offsets of the last batch in the checkpoint's commit log."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")]
    if not commits:
        return {}
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
    return StreamOffset.from_json(json.loads(lines[-1])).ends


def count(run: Run, sent: dict[int, int]) -> dict[str, int]:
    """The figures, from the table (read by Spark: committed files only), the spool and the
    checkpoint. A row is lost after capture when its offset is below the partition's last
    committed end and the table lacks it; a row at or above that end is still in the spool,
    which the next run of the query delivers (a holder may write one after the drain, as the
    query stops)."""
    from spark_zmq.spark.session import loopback_session
    from spark_zmq.spool.reader import read_snapshot

    spark = loopback_session("soak check", log_level="ERROR")
    try:
        rows = (
            spark.read.parquet(str(run.sink))
            .select("partition", "offset", "data", "error")
            .collect()
        )
    finally:
        spark.stop()
    states = read_snapshot(str(run.spool))
    committed = committed_offsets(run.folder / "checkpoint")
    in_table: dict[str, set[int]] = {}
    for row in rows:
        in_table.setdefault(row.partition, set()).add(row.offset)
    lost = pending = 0
    for key, state in states.items():
        # a partition left out of the last commit holds nothing that was not committed before
        # (what it held below its start was committed, then truncated)
        covered = committed.get(key, state.start)
        lost += len(set(range(covered)) - in_table.get(key, set()))
        pending += max(0, state.end - covered)
    spooled = sum(state.end for state in states.values())
    data = [json.loads(r.data) for r in rows if r.error is None]
    sequences = [(d["p"], d["s"]) for d in data]
    unique = set(sequences)
    offsets = {(r.partition, r.offset) for r in rows}
    gap_rows = sum(1 for r in rows if r.error and r.error.startswith("gap:"))
    total_sent = sum(sent.values())
    return {
        "sent": total_sent,
        "captured": spooled - pending - gap_rows,
        "delivered": len(unique),
        "duplicated": (len(sequences) - len(unique)) + (len(rows) - len(offsets)),
        "lost while a peer was down (expected)": total_sent - len(unique),
        "lost after capture": lost,
        "left in the spool (next run delivers)": pending,
        "gap rows": gap_rows,
    }


def soak(args: argparse.Namespace) -> dict:
    """Run the soak; its result: the figures (counts), the faults injected, peaks, wall time."""
    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="soak-"))
    run = Run(folder, args.publishers, args.rate, *(free_port() for _ in range(4)))
    print(
        f"soak: {args.minutes:g} min, {args.publishers} publishers x {args.rate:g} msg/s, a "
        f"fault every {args.fault_every:g} s (seed {args.seed}); logs in {folder}",
        flush=True,
    )
    started = time.monotonic()
    try:
        run.start_broker()
        run.start_query()
        for index in range(args.publishers):
            run.start_publisher(index)
        ready = wait_for_capture(run, timeout=180)
        print(f"  {ready - started:6.1f} s  capture running; faults begin", flush=True)
        end = ready + args.minutes * 60
        next_fault, turn = ready + args.fault_every, 0
        while time.monotonic() < end:
            run.sample()
            if time.monotonic() >= next_fault:
                what = run.inject(FAULTS[turn % len(FAULTS)], rng)
                print(f"  {time.monotonic() - started:6.1f} s  {what}", flush=True)
                turn += 1
                next_fault += args.fault_every
            time.sleep(0.5)
        for process in run.senders.values():
            stop(process)
        sent = {
            i: json.loads((folder / f"publisher-{i}.json").read_text())["next"]
            for i in range(args.publishers)
        }
        print("  publishers stopped; draining the spool into the table", flush=True)
        drained = drain(run, timeout=180)
        run.sample()
    finally:
        run.stop_all()
    return {
        "figures": count(run, sent),
        "faults": dict(run.faults),
        "peak_capture_rss": run.peak_capture_rss,
        "peak_query_rss": run.peak_query_rss,
        "peak_spool": run.peak_spool,
        "seconds": time.monotonic() - started,
        "drained": drained,
    }


def report(result: dict) -> bool:
    """Print the result; True if nothing was duplicated, nothing lost after capture, and the
    query committed everything the spool held before it was stopped."""
    figures = result["figures"]
    mib = 2**20
    lines = [(name, f"{value:>10,}") for name, value in figures.items()]
    lines += [
        ("faults injected", ", ".join(f"{k} {v}" for k, v in result["faults"].items())),
        ("peak RSS of a capture process", f"{result['peak_capture_rss'] / mib:>10.0f} MiB"),
        ("peak RSS of the query (JVM + Python)", f"{result['peak_query_rss'] / mib:>10.0f} MiB"),
        ("peak spool size", f"{result['peak_spool'] / mib:>10.1f} MiB"),
        ("wall time", f"{result['seconds']:>10.0f} s"),
    ]
    print("\n== soak result ==")
    for name, value in lines:
        print(f"  {name:<40} {value}")
    ok = figures["duplicated"] == 0 and figures["lost after capture"] == 0
    if not result["drained"]:
        print("FAIL: the query did not commit what the spool held within the drain's bound")
        return False
    print("PASS: nothing duplicated, nothing lost after capture" if ok else "FAIL")
    return ok


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parts = parser.add_subparsers(dest="part")
    publisher = parts.add_parser("publisher")
    publisher.add_argument("--index", type=int, required=True)
    publisher.add_argument("--pub-port", type=int, required=True)
    publisher.add_argument("--rate", type=float, required=True)
    publisher.add_argument("--state", required=True)
    query = parts.add_parser("query")
    for name in ("--spool", "--checkpoint", "--sink"):
        query.add_argument(name, required=True)
    query.add_argument("--sub-port", type=int, required=True)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long (default 10)")
    parser.add_argument(
        "--short", action="store_true", help="the CI version: 1 minute, a fault every 8 s"
    )
    parser.add_argument(
        "--rate", type=float, default=200.0, help="messages per second per publisher (default 200)"
    )
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--fault-every", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--result", metavar="PATH", help="also write the result as JSON there")
    args = parser.parse_args(argv)
    if args.short:
        args.minutes, args.fault_every = 1.0, 8.0
    return args


def main() -> int:
    args = parse_args(sys.argv[1:])
    if args.part == "publisher":
        return run_publisher(args)
    if args.part == "query":
        return run_query(args)
    ensure_private_network(__file__)
    result = soak(args)
    if args.result:
        Path(args.result).write_text(json.dumps(result, indent=1))
    return 0 if report(result) else 1


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
