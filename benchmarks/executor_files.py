"""Files written per second in a ``capture=executors`` spool, by kind, source trees side by side:
what the capture processes' heartbeats, leases and data cost the shared storage (an NFS server
counts each of these as a file created or replaced).

For each tree (``--variant LABEL=TREE``, default this checkout as ``current``; ``git archive
<commit> | tar -x -C /tmp/base`` for an earlier commit), a process of its own puts ``--partitions``
zmq PUB sockets on loopback, writes and renews the driver's ``assignment.json`` every second (as
the driver does), and starts capture processes as claim tasks do: ``--processes`` of them where
the tree has one capture process per executor, one per partition where it has a holder per
partition (release 0.2; mind its memory: about 75 MiB per process). Once every partition is
held it counts, for ``--seconds``, every file of the spool closed after writing (inotify
``IN_CLOSE_WRITE``: an atomic replace counts once, for its temporary file; an append once), by
kind: the capture processes' records, the partitions' leases, segment files, index writes, the
driver's documents. ``--rate`` messages per second per publisher (0: none, what the control
files alone cost).

Run it as ``python benchmarks/executor_files.py [--partitions 300] [--processes 2]
[--seconds 20] [--rate 0] [--variant base=/tmp/base --partitions 20]``; it re-executes itself
in a private network namespace, as every benchmark does.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from itertools import count

from harness.files import KINDS, WrittenFiles
from harness.hermetic import ensure_private_network
from harness.trees import add_variant_argument, run_in_tree, source_trees


def run_role(partitions: int, processes: int, seconds: float, rate: float) -> dict:
    """In a tree's process: start capture of ``partitions`` publishers, then count the files
    written for ``seconds``; files per second by kind, and the capture processes started."""
    import zmq

    from spark_zmq.spool.layout import JsonState
    from spark_zmq.spool.leases import load_lease
    from spark_zmq.stream_settings import CaptureSettings

    context = zmq.Context()
    sockets = []
    for _ in range(partitions):
        socket = context.socket(zmq.PUB)
        socket.bind("tcp://127.0.0.1:*")
        sockets.append(socket)
    addresses = [s.getsockopt_string(zmq.LAST_ENDPOINT) for s in sockets]
    endpoints = {
        a.removeprefix("tcp://"): {
            "key": a.removeprefix("tcp://"),
            "address": a,
            "metadata": {},
            "subscriptions": [""],
            "socket_type": zmq.SUB,
        }
        for a in addresses
    }
    settings = CaptureSettings("zeroeq", 1 << 30, 1 << 20, 0.1, 10.0, 60.0, False, 10000)
    with tempfile.TemporaryDirectory() as spool:
        assignment = JsonState(os.path.join(spool, "assignment.json"))
        beats, stop = count(1), threading.Event()

        def renew() -> None:
            assignment.save(
                {
                    "spool_id": "bench",
                    "beat": next(beats),
                    "format": "zeroeq",
                    "driver_host": host_identity(),
                    "endpoints": endpoints,
                }
            )

        def renew_forever() -> None:
            while not stop.wait(1.0):
                renew()

        renew()
        threading.Thread(target=renew_forever, daemon=True).start()
        pids = start_capture(spool, asdict(settings), list(endpoints), processes)
        deadline = time.monotonic() + 120
        while not all(
            (lease := load_lease(spool, key)) is not None and lease.holder and not lease.sealed
            for key in endpoints
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("not every partition was claimed within 120 s")
            time.sleep(0.5)
        time.sleep(2)  # claims settled
        files = WrittenFiles(spool)
        sender = threading.Thread(target=send, args=(sockets, rate, stop), daemon=True)
        if rate:
            sender.start()
        files.counting = True
        time.sleep(seconds)
        files.counting = False
        stop.set()
        files.close()
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        for pid in pids:
            os.waitpid(pid, 0)
    for socket in sockets:
        socket.close(0)
    context.term()
    per_second = {kind: files.counts[kind] / seconds for kind in KINDS}
    return {"per_second": per_second, "processes": len(pids)}


def host_identity() -> str:
    """This host as the current tree names it (an earlier tree ignores the field)."""
    try:
        from spark_zmq.spool.processes import host_identity as identity
    except ImportError:
        return ""
    return identity()


def start_capture(spool: str, settings: dict, keys: list[str], processes: int) -> list[int]:
    """Start capture as the tree does it; the pids started."""
    module = "spark_zmq.placement.executors.holder"
    args: list[dict[str, object]]
    if importlib.util.find_spec("spark_zmq.placement.executors.launch") is not None:
        args = [{"spool_path": spool, "settings": settings, "role": "executor"}] * processes
    else:  # release 0.2: a holder per partition, told its key and the epoch it claims
        args = [
            {"spool_path": spool, "key": key, "expect_epoch": 0, "settings": settings}
            for key in keys
        ]
    pids = []
    for given in args:
        process = subprocess.Popen(
            [sys.executable, "-m", module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=spool,  # (``-m`` puts the working folder first on the path: not a checkout)
        )
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(given).encode())
        process.stdin.close()
        answer = process.stdout.readline().decode().strip()
        if not answer.startswith("ready"):
            raise RuntimeError(f"a capture process did not start: {answer!r}")
        pids.append(process.pid)
    return pids


def send(sockets: list, rate: float, stop: threading.Event) -> None:
    """``rate`` messages per second on every socket until ``stop``."""
    number = 0
    while not stop.wait(1.0 / rate):
        for socket in sockets:
            socket.send(b"%d" % number)
        number += 1


def run(tree: str, args: argparse.Namespace) -> dict:
    arguments = ["--role", "run", "--partitions", str(args.partitions)]
    arguments += ["--processes", str(args.processes), "--seconds", str(args.seconds)]
    arguments += ["--rate", str(args.rate)]
    return run_in_tree(tree, __file__, arguments)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=300, help="publishers (partitions)")
    parser.add_argument("--processes", type=int, default=2, help="capture processes (executors)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long files are counted")
    parser.add_argument("--rate", type=float, default=0.0, help="msg/s per publisher (0: none)")
    add_variant_argument(parser, "capture")
    parser.add_argument("--role", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args(sys.argv[1:])
    if args.role:
        print(json.dumps(run_role(args.partitions, args.processes, args.seconds, args.rate)))
        return 0
    ensure_private_network(__file__)
    print(
        f"files written per second: {args.partitions} partitions, {args.rate:g} msg/s each, "
        f"counted for {args.seconds:g} s, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    results = {label: run(tree, args) for label, tree in source_trees(args.variant)}
    print(f"{'kind':<24}" + "".join(f"{label:>16}" for label in results))
    for kind in (*KINDS, "all"):
        cells = ""
        for result in results.values():
            rates = result["per_second"]
            value = sum(rates.values()) if kind == "all" else rates[kind]
            cells += f"{value:>16,.1f}"
        print(f"{kind:<24}{cells}")
    processes = "".join(f"{result['processes']:>16}" for result in results.values())
    print(f"{'capture processes':<24}{processes}")
    print(f"(load average at the end: {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
