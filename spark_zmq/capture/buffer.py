"""A partition's messages between two flushes, and the burst that fills it from a socket.

The bound that matters for memory is in bytes: a burst stops at ``MAX_SEGMENT_BYTES``, and a
buffer at that size (or at ``MAX_SEGMENT_ROWS`` messages) is written at once, so a buffer never
holds more than ``MAX_SEGMENT_BYTES`` plus one message, whatever the message size.

Two kinds of buffer behave alike (``MessageBuffer``): ``Buffer`` here, Python lists that the
Python receive loop fills, and ``native.NativeBuffer``, C arrays that the compiled core fills
without the GIL; both become the same rows of ``SPOOL_SCHEMA``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import zmq

from spark_zmq.spool.layout import SPOOL_SCHEMA

#: a partition's buffer is written to the spool when it holds this many messages
MAX_SEGMENT_ROWS = 65536
#: ... or this many bytes of frames (what bounds capture's memory with large messages)
MAX_SEGMENT_BYTES = 32 << 20
#: messages taken from one socket before the loop looks at the others (fewer when their bytes
#: reach MAX_SEGMENT_BYTES first: a burst of large messages is bounded by bytes, not count)
BURST = 1024


#: the spool's column of frames: a list of byte strings per message
FRAMES_TYPE = SPOOL_SCHEMA.field("frames").type


class MessageBuffer(Protocol):
    """What capture does with a connection's buffer, whichever core fills it."""

    faults: dict[int, str]

    def __len__(self) -> int: ...
    @property
    def full(self) -> bool: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def received(self) -> int: ...
    def add_fault(self, text: str) -> None: ...
    def take(self) -> MessageBuffer: ...
    def table(self) -> pa.Table: ...
    def time_at(self, index: int) -> int: ...


@dataclass
class Buffer:
    """Messages received since the last flush: frames, receive times (ns) and, rarely, fault
    rows that capture itself records (a gap), by their index. ``received`` counts every
    message taken from sockets into it, ``run`` those since the socket's queue was last found
    empty (a run of ``full_run`` means zmq's receive queue was full); ``take`` keeps both."""

    frames: list[list[bytes]] = field(default_factory=list)
    times: list[int] = field(default_factory=list)
    faults: dict[int, str] = field(default_factory=dict)
    nbytes: int = 0
    received: int = 0
    run: int = 0
    full_run: int = 1 << 62

    def __len__(self) -> int:
        return len(self.frames)

    def time_at(self, index: int) -> int:
        return self.times[index]

    @property
    def full(self) -> bool:
        return len(self.frames) >= MAX_SEGMENT_ROWS or self.nbytes >= MAX_SEGMENT_BYTES

    def add_fault(self, text: str) -> None:
        self.faults[len(self.frames)] = text
        self.frames.append([])
        self.times.append(time.time_ns())

    def take(self) -> Buffer:
        """What the buffer holds, leaving it empty."""
        taken = Buffer(self.frames, self.times, self.faults, self.nbytes)
        self.frames, self.times, self.faults, self.nbytes = [], [], {}, 0
        return taken

    def table(self) -> pa.Table:
        return spool_table(self.frames, self.times, self.faults)

    def receive_burst(self, sock: zmq.Socket) -> tuple[int, bool]:
        """Take up to BURST messages (fewer at MAX_SEGMENT_BYTES) waiting on ``sock``: how
        many, and whether the run since its queue was last found empty reached ``full_run``.
        Per message: one receive, two appends."""
        recv = sock.recv_multipart
        frames, times, now = self.frames, self.times, time.time_ns
        before, empty, nbytes = len(frames), False, self.nbytes
        try:
            for _ in range(BURST):
                message = recv(zmq.NOBLOCK)
                frames.append(message)
                times.append(now())
                nbytes += sum(map(len, message))
                if nbytes >= MAX_SEGMENT_BYTES:
                    break
        except zmq.Again:
            empty = True
        self.nbytes = nbytes
        count = len(frames) - before
        self.received += count
        self.run += count
        queue_full = self.run >= self.full_run
        if empty:
            self.run = 0
        return count, queue_full


def spool_table(frames: list, times: list, faults: dict) -> pa.Table:
    """Rows in SPOOL_SCHEMA: each message's frames and receive time (ns), and fault texts by
    row index (a fault row has no frames)."""
    return _rows(np.asarray(times, dtype=np.int64), pa.array(frames, type=FRAMES_TYPE), faults)


def native_table(buffer: Any) -> pa.Table:
    """The rows of a ``native.NativeBuffer``, without copying its arrays: Arrow's buffers take
    them over (the buffer cannot be used afterwards)."""
    rows, frames, times, row_offsets, frame_offsets, data = buffer.columns()
    binary = pa.Array.from_buffers(
        pa.binary(), frames, [None, pa.py_buffer(frame_offsets), pa.py_buffer(data)]
    )
    lists = pa.Array.from_buffers(
        FRAMES_TYPE, rows, [None, pa.py_buffer(row_offsets)], children=[binary]
    )
    return _rows(np.frombuffer(times, dtype=np.int64, count=rows), lists, buffer.faults)


def _rows(times_ns: np.ndarray, frames: pa.Array, faults: dict[int, str]) -> pa.Table:
    received = pa.array(times_ns // 1000, type=pa.int64())
    if faults:
        fault_texts: list[str | None] = [None] * len(frames)
        for index, text in faults.items():
            fault_texts[index] = text
        fault_column = pa.array(fault_texts, type=pa.string())
    else:
        fault_column = pa.nulls(len(frames), pa.string())
    return pa.Table.from_arrays(
        [received.cast(SPOOL_SCHEMA.field("received_at").type), frames, fault_column],
        schema=SPOOL_SCHEMA,
    )


def utc_text(ns: int) -> str:
    """A time in ns since the epoch as ISO 8601 UTC with milliseconds, as gap rows show it."""
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns / 1e9))
        + f".{ns // 1_000_000 % 1000:03d}Z"
    )
