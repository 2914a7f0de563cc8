"""The messages of ``zeroeq_write_rate.py`` and the one subscriber that receives every side's:
it finds the writers' publishers over ZeroConf (or connects to the bare publisher's port),
counts every sequence number and times the first to the last message."""

from __future__ import annotations

import itertools
import multiprocessing
import multiprocessing.connection
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from harness.children import report_errors

from spark_zmq.protocols.zeroeq import MEERKAT, PUBLISHER_SERVICE, Record, event_id, make_zeroconf
from spark_zmq.spark.session import LOOPBACK

EVENT = "bench::Write"
WIRE_ID = event_id(EVENT)
PAYLOAD_BYTES = 100
#: the sequence number at the start of every payload (the shared publisher's HEAD starts so too)
SEQUENCE = struct.Struct(">Q")
INPUT_SCHEMA = "event STRING, payload BINARY"
#: a receiver that has seen messages and then nothing for this long stops waiting
IDLE_SECONDS = 10.0
POLL_MS = 100
#: messages between two looks for newly discovered publishers in the receive loop
CHECK_EVERY = 1024


# -- messages -------------------------------------------------------------------------------------


def payloads(start: int, stop: int) -> list[bytes]:
    """Payloads of sequence numbers ``start`` to ``stop - 1``: the number, then zero padding."""
    padding = bytes(PAYLOAD_BYTES - SEQUENCE.size)
    pack = SEQUENCE.pack
    return [pack(sequence) + padding for sequence in range(start, stop)]


def write_input(folder: Path, rows: int, files: int) -> Path:
    """``rows`` rows in ``files`` Parquet files of contiguous sequence numbers, one row group
    each (so one Spark partition each, with ``SPARK_CONF``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    bounds = [rows * index // files for index in range(files + 1)]
    for index, (start, stop) in enumerate(itertools.pairwise(bounds)):
        table = pa.table(
            {
                "event": pa.array([EVENT] * (stop - start), pa.string()),
                "payload": pa.array(payloads(start, stop), pa.binary()),
            }
        )
        pq.write_table(
            table, folder / f"part-{index:03d}.parquet", row_group_size=max(1, stop - start)
        )
    return folder


# -- the subscriber -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reception:
    """What the subscriber saw. ``first`` and ``last`` are ``time.monotonic()`` readings (the
    system-wide CLOCK_MONOTONIC, comparable with the parent's), 0 when nothing arrived."""

    expected: int
    unique: int
    duplicates: int
    foreign: int
    first_missing: int | None
    first: float
    last: float
    publishers: int

    @property
    def received(self) -> int:
        return self.unique + self.duplicates + self.foreign

    @property
    def seconds(self) -> float:
        return self.last - self.first

    @property
    def rate(self) -> float:
        return self.received / self.seconds if self.seconds > 0 else 0.0

    @property
    def exactly_once(self) -> bool:
        return self.unique == self.expected and not self.duplicates and not self.foreign

    def problems(self) -> str:
        if self.exactly_once:
            return ""
        missing = self.expected - self.unique
        first = f" (first: #{self.first_missing})" if self.first_missing is not None else ""
        return (
            f"{missing:,} missing{first}, {self.duplicates:,} duplicated, "
            f"{self.foreign:,} not benchmark messages"
        )


class PublisherFinder:
    """Browses ``_zeroeq_pub._tcp`` on 127.0.0.1 and collects the addresses of the publishers
    of one session, in the order found. ``found`` only grows, and only ZeroConf's one handler
    thread appends to it, so the receive loop reads it without a lock."""

    def __init__(self, session: str) -> None:
        from zeroconf import ServiceBrowser

        self.session = session
        self.found: list[str] = []
        self._zeroconf = make_zeroconf((LOOPBACK,))
        self._browser = ServiceBrowser(
            self._zeroconf, PUBLISHER_SERVICE, handlers=[self._on_change]
        )

    def _on_change(self, zeroconf: Any, service_type: str, name: str, state_change: Any) -> None:
        from zeroconf import ServiceStateChange

        if state_change is ServiceStateChange.Removed:
            return
        info = zeroconf.get_service_info(service_type, name, timeout=3000)
        if info is None:
            return
        record = Record.parse(name, info.properties)
        address = f"tcp://{record.instance_name}"
        if record.session == self.session and address not in self.found:
            self.found.append(address)

    def close(self) -> None:
        self._browser.cancel()
        self._zeroconf.close()


def subscriber_socket(context: zmq.Context) -> zmq.Socket:
    """A SUB as a ZeroEQ 0.9 subscriber: the event's 16-byte id and Meerkat; receive
    high-water mark 0, as the package's capture uses."""
    sock = context.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, POLL_MS)
    for topic in (WIRE_ID, event_id(MEERKAT)):
        sock.setsockopt(zmq.SUBSCRIBE, topic)
    return sock


def connect_new(sock: zmq.Socket, finder: PublisherFinder | None, connected: list[str]) -> None:
    if finder is not None:
        for address in finder.found[len(connected) :]:
            sock.connect(address)
            connected.append(address)


def receive(
    sock: zmq.Socket,
    count: int,
    timeout: float,
    finder: PublisherFinder | None,
    connected: list[str],
) -> Reception:
    """Receive until every sequence number below ``count`` arrived, the stream went idle for
    ``IDLE_SECONDS`` after a first message, or ``timeout``; connect to publishers as found."""
    seen = bytearray(count)
    unique = duplicates = foreign = received = 0
    first = last = 0.0
    recv, unpack, again = sock.recv_multipart, SEQUENCE.unpack_from, zmq.Again
    clock = time.monotonic
    deadline = clock() + timeout
    while unique < count:
        if not received % CHECK_EVERY:
            connect_new(sock, finder, connected)
        try:
            frames = recv()
        except again:
            now = clock()
            if now > deadline or (received and now - last > IDLE_SECONDS):
                break
            connect_new(sock, finder, connected)
            continue
        last = clock()
        first = first or last
        received += 1
        if len(frames) != 2 or len(frames[1]) < SEQUENCE.size:
            foreign += 1
            continue
        sequence = unpack(frames[1])[0]
        if sequence >= count:
            foreign += 1
        elif seen[sequence]:
            duplicates += 1
        else:
            seen[sequence] = 1
            unique += 1
    first_missing = seen.find(0) if unique < count else None
    return Reception(count, unique, duplicates, foreign, first_missing, first, last, len(connected))


def receive_native(
    sock: zmq.Socket,
    count: int,
    timeout: float,
    finder: PublisherFinder | None,
    connected: list[str],
) -> Reception:
    """``receive`` through the compiled capture core: bursts of up to 1024 messages taken in C
    into one buffer, the sequence numbers counted at the end with numpy, so that the receiver
    is not the slower side of the comparison."""
    from spark_zmq.capture.refusals import Refusals
    from spark_zmq.native import RECEIVE, load

    native = load(RECEIVE)
    unbounded = 1 << 62
    # the bounds of one message, as capture's defaults; the benchmark's messages are far below
    refusals = Refusals("write-rate subscriber", "tcp://127.0.0.1", "bench", 64 << 20, 1000)
    buffer = native.NativeBuffer(unbounded, unbounded, 1024, unbounded, refusals)
    address = sock.underlying
    first = last = 0.0
    clock = time.monotonic
    deadline = clock() + timeout
    while len(buffer) < count:
        connect_new(sock, finder, connected)
        taken, _ = native.receive(buffer, address)
        if taken:
            last = clock()
            first = first or last
            continue
        now = clock()
        if now > deadline or (first and now - last > IDLE_SECONDS):
            break
        sock.poll(POLL_MS)
    return reception_of(buffer.table(), count, first, last, len(connected))


def reception_of(table: Any, count: int, first: float, last: float, publishers: int) -> Reception:
    """The ``Reception`` of spooled rows: two frames each, the second starting with the
    sequence number."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    frames = table.column("frames").combine_chunks()
    two = np.asarray(frames.value_lengths().fill_null(0)) == 2
    starts = np.asarray(frames.offsets)[:-1]
    payload = frames.values.take(pa.array(starts[two] + 1))
    long_enough = np.asarray(pc.binary_length(payload)) >= SEQUENCE.size
    offsets = np.frombuffer(payload.buffers()[1], dtype=np.int32)[: len(payload)]
    data = np.frombuffer(payload.buffers()[2], dtype=np.uint8)
    heads = data[offsets[long_enough][:, None] + np.arange(SEQUENCE.size)]
    sequences = heads.view(">u8").ravel().astype(np.int64)
    inside = sequences < count
    foreign = int((~two).sum() + (~long_enough).sum() + (~inside).sum())
    seen = np.bincount(sequences[inside], minlength=count)
    unique = int((seen > 0).sum())
    duplicates = int(np.clip(seen - 1, 0, None).sum())
    first_missing = int(np.argmin(seen > 0)) if unique < count else None
    return Reception(count, unique, duplicates, foreign, first_missing, first, last, publishers)


def subscriber_main(
    session: str | None,
    endpoints: tuple[str, ...],
    count: int,
    timeout: float,
    native: bool,
    conn: multiprocessing.connection.Connection,
) -> None:
    """Subscribe to ``endpoints``, or to every publisher of ``session`` found over ZeroConf,
    report ``ready``, receive ``count`` messages (with the compiled core's receive loop if
    ``native``) and report the ``Reception``."""

    def body() -> None:
        context = zmq.Context()
        sock = subscriber_socket(context)
        finder = PublisherFinder(session) if session is not None else None
        connected = list(endpoints)
        try:
            for address in endpoints:
                sock.connect(address)
            conn.send(("ready", None))
            loop = receive_native if native else receive
            conn.send(("received", loop(sock, count, timeout, finder, connected)))
        finally:
            if finder is not None:
                finder.close()
            sock.close()
            context.term()

    report_errors(conn, body)
