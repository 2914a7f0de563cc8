"""The bare pyzmq SUB loop: the reference the connector is measured against. It checks every
sequence number of the publisher's ``HEAD``, so it can tell a gap from a repeat."""

from __future__ import annotations

import multiprocessing.connection
import struct
import time
from dataclasses import dataclass, replace

import numpy as np
import zmq

from harness.children import report_errors
from harness.measure import cpu_seconds
from harness.publisher import HEAD
from spark_zmq.spark.session import LOOPBACK

#: a receiver that has seen messages and then nothing for this long stops waiting
IDLE_SECONDS = 3.0


@dataclass(frozen=True)
class ReceiveResult:
    """What a bare SUB loop saw: distinct sequence numbers, repeats and anything unexpected,
    and the CPU time its process used (all threads, zmq's I/O thread too)."""

    unique: int
    duplicates: int
    foreign: int
    missing: str
    cpu_seconds: float = 0.0


def bare_receiver_main(
    port: int,
    count: int,
    timeout: float,
    receive_hwm: int,
    conn: multiprocessing.connection.Connection,
) -> None:
    """A plain SUB loop that checks sequence numbers. Its receive high-water mark is capture's
    (``receive_hwm``): with none (0), zmq's I/O thread queues whatever the loop has not taken
    yet, without bound, and the loop only catches up after the publisher stops, so the trial
    measures zmq's I/O thread and memory rather than the loop."""

    def body() -> None:
        context = zmq.Context()
        sock = context.socket(zmq.SUB)
        sock.setsockopt(zmq.RCVHWM, receive_hwm)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, 500)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(f"tcp://{LOOPBACK}:{port}")
        try:
            cpu = cpu_seconds()
            result = receive_sequence(sock, count, timeout)
            conn.send(("received", replace(result, cpu_seconds=cpu_seconds() - cpu)))
        finally:
            sock.close()
            context.term()

    report_errors(conn, body)


def receive_sequence(sock: zmq.Socket, count: int, timeout: float) -> ReceiveResult:
    """Receive until sequence number ``count - 1`` arrives (zmq keeps one connection's order,
    so nothing earlier can follow it), the stream goes idle, or ``timeout``."""
    seen = bytearray(count)
    unique = duplicates = foreign = 0
    idle = 0.0
    recv, sequence_of, last = sock.recv_multipart, struct.Struct(">Q").unpack_from, count - 1
    deadline = time.monotonic() + timeout
    while True:
        try:
            frames = recv()
        except zmq.Again:
            idle += 0.5
            if time.monotonic() > deadline or (unique and idle >= IDLE_SECONDS):
                break
            continue
        idle = 0.0
        if len(frames) != 2 or len(frames[1]) < HEAD.size:
            foreign += 1
            continue
        seq = sequence_of(frames[1])[0]
        if seq > last:
            foreign += 1
        elif seen[seq]:
            duplicates += 1
        else:
            seen[seq] = 1
            unique += 1
            if seq == last:
                break
    return ReceiveResult(
        unique, duplicates, foreign, describe_missing(np.frombuffer(seen, dtype=np.uint8) > 0)
    )


def describe_missing(present: np.ndarray, shown: int = 2) -> str:
    """The first runs of missing sequence numbers, e.g. ``0-5, 28000-28008 (+3 runs)``: a loss
    at the very start (a start-up race) looks different from drops mid-stream (an overflowing
    high-water mark)."""
    missing = np.flatnonzero(~present)
    if not len(missing):
        return ""
    breaks = np.flatnonzero(np.diff(missing) > 1)
    starts = np.concatenate(([missing[0]], missing[breaks + 1]))
    ends = np.concatenate((missing[breaks], [missing[-1]]))
    pairs = zip(starts[:shown].tolist(), ends[:shown].tolist(), strict=True)
    runs = [f"{a}" if a == b else f"{a}-{b}" for a, b in pairs]
    more = f" (+{len(starts) - shown} runs)" if len(starts) > shown else ""
    return ", ".join(runs) + more
