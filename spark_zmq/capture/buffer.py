"""A partition's messages between two flushes, and the burst that fills it from a socket.

The bound that matters for memory is in bytes: a burst stops at ``MAX_SEGMENT_BYTES``, and a
buffer at that size (or at ``MAX_SEGMENT_ROWS`` messages) is written at once, so a buffer never
holds more than ``MAX_SEGMENT_BYTES`` plus one message, whatever the message size. What it
counts is what its rows take as a spool segment's arrays: the frames' bytes, and
``FRAME_OVERHEAD`` per frame and ``ROW_OVERHEAD`` per row (offsets and receive times), so that a
message of a million empty frames counts too. One message is bounded by ``maxMessageBytes`` and
``maxMessageParts``: a larger one is refused whole (``refusals``).

Two kinds of buffer behave alike (``MessageBuffer``): ``Buffer`` here, Python lists that the
Python receive loop fills, and ``native.NativeBuffer``, C arrays that the compiled core fills
without the GIL; both become the same rows of ``SPOOL_SCHEMA``, and take, refuse and fail on
the same messages.
"""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import zmq

from spark_zmq.spool.layout import FRAME_OVERHEAD, ROW_OVERHEAD, SPOOL_SCHEMA

if TYPE_CHECKING:
    from spark_zmq.capture.refusals import Refusals, Run

#: a partition's buffer is written to the spool when it holds this many messages
MAX_SEGMENT_ROWS = 65536
#: ... or this many bytes of frames (what bounds capture's memory with large messages)
MAX_SEGMENT_BYTES = 32 << 20
#: messages taken from one socket before the loop looks at the others (fewer when their bytes
#: reach MAX_SEGMENT_BYTES first: a burst of large messages is bounded by bytes, not count)
BURST = 1024


#: the spool's column of frames: a list of byte strings per message
FRAMES_TYPE = SPOOL_SCHEMA.field("frames").type
#: the spool's receive times: microseconds since the epoch, UTC
RECEIVED_TYPE = SPOOL_SCHEMA.field("received_at").type


class MessageBuffer(Protocol):
    """What capture does with a connection's buffer, whichever core fills it. ``faults`` is
    complete once the rows are taken (``take``)."""

    faults: dict[int, str]

    def __len__(self) -> int: ...
    @property
    def full(self) -> bool: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def frame_bytes(self) -> int: ...
    @property
    def received(self) -> int: ...
    def add_fault(self, text: str, at: int | None = None) -> None: ...
    def take(self) -> MessageBuffer: ...
    def move_to(self, flush: Any) -> int: ...
    def flush_buffer(self) -> MessageBuffer: ...
    def take_error(self) -> int: ...
    def table(self) -> pa.Table: ...
    def time_at(self, index: int) -> int: ...


@dataclass
class Buffer:
    """Messages received since the last flush: frames, receive times (ns) and, rarely, fault
    rows that capture itself records (a gap), by their index. ``received`` counts every
    message taken from sockets into it (refused ones too), ``run`` those since the socket's
    queue was last found empty (a run of ``full_run`` means zmq's receive queue was full);
    ``take`` keeps both. ``refusals`` bounds one message (None: no bound, for buffers that
    only hold what capture wrote itself); ``runs`` are the runs of refused messages by row
    (count, largest's bytes and parts, first and last time), which ``take`` makes gap texts."""

    frames: list[list[bytes]] = field(default_factory=list)
    times: list[int] = field(default_factory=list)
    faults: dict[int, str] = field(default_factory=dict)
    nbytes: int = 0
    received: int = 0
    run: int = 0
    full_run: int = 1 << 62
    refusals: Refusals | None = None
    runs: dict[int, list[int]] = field(default_factory=dict)
    error: int = 0  # errno of the receive that failed, 0 if none (see take_error)

    def __len__(self) -> int:
        return len(self.frames)

    def time_at(self, index: int) -> int:
        return self.times[index]

    @property
    def frame_bytes(self) -> int:
        """The bytes of the frames held."""
        return sum(len(frame) for frames in self.frames for frame in frames)

    @property
    def full(self) -> bool:
        return len(self.frames) >= MAX_SEGMENT_ROWS or self.nbytes >= MAX_SEGMENT_BYTES

    def add_fault(self, text: str, at: int | None = None) -> None:
        self.faults[len(self.frames)] = text
        self._add_row([], time.time_ns() if at is None else at, 0)

    def _add_row(self, frames: list[bytes], received_at: int, nbytes: int) -> None:
        self.frames.append(frames)
        self.times.append(received_at)
        self.nbytes += nbytes + FRAME_OVERHEAD * len(frames) + ROW_OVERHEAD

    def take_error(self) -> int:
        """The errno of the receive that failed since the last call, or 0; cleared."""
        failed, self.error = self.error, 0
        return failed

    def take(self) -> Buffer:
        """What the buffer holds, with the gap texts of its refused messages in ``faults``,
        leaving it empty."""
        self._settle_refusals()
        taken = Buffer(self.frames, self.times, self.faults, self.nbytes)
        self.frames, self.times, self.faults, self.nbytes = [], [], {}, 0
        return taken

    def flush_buffer(self) -> Buffer:
        """An empty buffer of this kind for the rows of a flush (``move_to``)."""
        return Buffer()

    def move_to(self, flush: Buffer) -> int:
        """Append the rows (their fault texts too) to ``flush``'s and empty this buffer: where
        ``flush`` begins them (``native.NativeBuffer.move_to``; a list has no bound here)."""
        self._settle_refusals()
        first = len(flush.frames)
        flush.frames += self.frames
        flush.times += self.times
        flush.nbytes += self.nbytes
        for row, text in self.faults.items():
            flush.faults[first + row] = text
        self.frames, self.times, self.faults, self.nbytes = [], [], {}, 0
        return first

    def _settle_refusals(self) -> None:
        """The runs of refused messages become gap texts in ``faults``, and are forgotten."""
        if self.runs and self.refusals is not None:
            runs: dict[int, Run] = {
                row: (count, nbytes, parts, first, last)
                for row, (count, nbytes, parts, first, last) in self.runs.items()
            }
            self.faults.update(self.refusals.gap_texts(runs))
        self.runs = {}

    def table(self) -> pa.Table:
        return spool_table(self.frames, self.times, self.faults)

    def receive_burst(self, sock: zmq.Socket) -> tuple[int, bool]:
        """Take up to BURST messages (fewer at MAX_SEGMENT_BYTES) waiting on ``sock``: how
        many (stored or refused), and whether the run since its queue was last found empty
        reached ``full_run``. Per message: a receive and a RCVMORE per frame (what
        ``recv_multipart`` does), two appends. A message over the bounds is not kept past the
        frame that crosses one, and is taken to its end (``_refuse``).

        A receive that fails stops the burst with ``error`` set, and the message it was in
        is not stored (capture then opens a new socket: no tail of it is read as a message).
        EINTR never gets here: pyzmq's ``recv`` retries it (PEP 475)."""
        max_bytes, max_parts = self._bounds()
        recv, more, now = sock.recv, sock.getsockopt, time.time_ns
        frames, times, nbytes = self.frames, self.times, self.nbytes
        count, empty = 0, False
        while count < BURST:
            message: list[bytes] = []
            try:
                message.append(recv(zmq.NOBLOCK))
                received_at = now()
                size = len(message[0])
                while size <= max_bytes and len(message) <= max_parts and more(zmq.RCVMORE):
                    frame = recv(zmq.NOBLOCK)
                    message.append(frame)
                    size += len(frame)
            except zmq.ZMQError as exc:
                empty = not message and exc.errno == errno.EAGAIN
                if not empty:
                    self.error = exc.errno or errno.EIO
                    count += bool(message)
                break
            count += 1
            if size <= max_bytes and len(message) <= max_parts:
                frames.append(message)
                times.append(received_at)
                nbytes += size + FRAME_OVERHEAD * len(message) + ROW_OVERHEAD
            else:
                self.nbytes = nbytes  # a refusal row counts too
                refused = self._refuse(sock, received_at, message, size)
                nbytes = self.nbytes
                if not refused:
                    break
            if nbytes >= MAX_SEGMENT_BYTES:
                break
        self.nbytes = nbytes
        self.received += count
        self.run += count
        queue_full = self.run >= self.full_run
        if empty:
            self.run = 0
        return count, queue_full

    def _bounds(self) -> tuple[int, int]:
        if self.refusals is None:
            return 1 << 62, 1 << 62
        return self.refusals.max_message_bytes, self.refusals.max_message_parts

    def _refuse(self, sock: zmq.Socket, received_at: int, message: list[bytes], size: int) -> bool:
        """Take the rest of a refused message from ``sock`` without keeping it, and record
        it: a new refusal row, or one more on the refusal row just before it. False (with
        ``error`` set, nothing recorded) if the socket failed."""
        rest_bytes, rest_parts, failed = _drain(sock)
        if failed:
            self.error = failed
            return False
        nbytes, parts = size + rest_bytes, len(message) + rest_parts
        last = len(self.frames) - 1
        run = self.runs.get(last)
        if run is None:
            self.runs[last + 1] = run = [0, 0, 0, received_at, 0]
            self._add_row([], received_at, 0)
        run[0] += 1
        run[4] = received_at
        if (nbytes, parts) > (run[1], run[2]):
            run[1], run[2] = nbytes, parts
        return True


def _drain(sock: zmq.Socket) -> tuple[int, int, int]:
    """Take the rest of a message from ``sock`` without keeping it: its bytes and frames, and
    the errno of a failure (0 if none)."""
    nbytes = parts = 0
    try:
        while sock.getsockopt(zmq.RCVMORE):
            nbytes += len(sock.recv(zmq.NOBLOCK, copy=False))
            parts += 1
    except zmq.ZMQError as exc:
        return nbytes, parts, exc.errno or errno.EIO
    return nbytes, parts, 0


def spool_table(frames: list, times: list, faults: dict) -> pa.Table:
    """Rows in SPOOL_SCHEMA: each message's frames and receive time (ns), and fault texts by
    row index (a fault row has no frames)."""
    received = pa.array(np.asarray(times, dtype=np.int64) // 1000, type=RECEIVED_TYPE)
    return _rows(received, pa.array(frames, type=FRAMES_TYPE), faults)


def native_table(buffer: Any) -> pa.Table:
    """The rows of a ``native.NativeBuffer``, without copying its arrays: Arrow's buffers take
    them over (the buffer cannot be used afterwards); its receive times are in the spool's
    unit already."""
    rows, frames, times, row_offsets, frame_offsets, data = buffer.columns()
    binary = pa.Array.from_buffers(
        pa.binary(), frames, [None, pa.py_buffer(frame_offsets), pa.py_buffer(data)]
    )
    lists = pa.Array.from_buffers(
        FRAMES_TYPE, rows, [None, pa.py_buffer(row_offsets)], children=[binary]
    )
    received = pa.Array.from_buffers(RECEIVED_TYPE, rows, [None, pa.py_buffer(times)])
    return _rows(received, lists, buffer.faults)


def _rows(received: pa.Array, frames: pa.Array, faults: dict[int, str]) -> pa.Table:
    if faults:
        fault_texts: list[str | None] = [None] * len(frames)
        for index, text in faults.items():
            fault_texts[index] = text
        fault_column = pa.array(fault_texts, type=pa.string())
    else:
        fault_column = pa.nulls(len(frames), pa.string())
    return pa.Table.from_arrays([received, frames, fault_column], schema=SPOOL_SCHEMA)
