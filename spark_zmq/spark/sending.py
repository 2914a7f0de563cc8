"""A writer task's send loop in two forms: the compiled loop and the Python path it falls back to.

The compiled loop (``send_rows`` in ``spark_zmq.native.send``, which calls the one libzmq that
pyzmq loaded through the binding it shares with capture's compiled core) sends the messages of a
batch that the format encoded column-wise (``EncodedBatch``), in C without Python's lock: per
message it copies each frame into a zmq message and sends it on the publisher's own pyzmq
socket, blocking on back-pressure for up to the socket's send timeout, as pyzmq's
``send_multipart`` does. Python still decides everything that is per batch, not per message:
``mode``, ``maxMessageBytes``, waiting for subscribers, the publisher's checks
(``SinkPublisher.sending_socket``), the counts.

The Python path (``SinkProtocol.encode`` and a ``SinkPublisher.send`` per message) is the
fallback. Which one runs is ``spark_zmq.native``'s choice (``SEND``): the writer option
``sendCore``, else ``SPARK_ZMQ_SEND_CORE`` in the executor's Python worker, else ``auto``: the
compiled loop when it loads, else the Python path, said once per process in the log. A format
without a column-wise encoding, or a publisher without a socket for it, sends through the Python
path whatever the choice.
"""

from __future__ import annotations

import errno
from types import ModuleType

import pyarrow as pa
import zmq

from spark_zmq.protocols.contract import EncodedBatch, SinkPublisher

#: most rows the compiled loop sends in one go: the publisher's checks (``sending_socket``:
#: goby's dropped Router connection, yamz's failed announcement) run again after each run
RUN_ROWS = 1024

#: (validity address or 0, offsets address, data address, offset) of one frame column
FrameColumn = tuple[int, int, int, int]


def frame_column(frame: pa.Array) -> FrameColumn:
    """What the compiled loop needs to read an Arrow ``binary`` array: its buffers' addresses
    and its offset. The array must stay alive while they are used."""
    if frame.type != pa.binary():
        raise TypeError(f"a frame column must be of type binary, not {frame.type}")
    validity, offsets, data = frame.buffers()
    return (
        validity.address if validity is not None and frame.null_count else 0,
        offsets.address,
        data.address if data is not None else 0,
        frame.offset,
    )


class ColumnSender:
    """The messages of one ``EncodedBatch`` on their way out through the compiled loop."""

    def __init__(self, native: ModuleType, encoded: EncodedBatch) -> None:
        """``native``: ``spark_zmq.native.send``, bound (``spark_zmq.native.choose(SEND)``)."""
        self._native = native
        self._encoded = encoded  # owns the memory that the descriptions point into
        self._columns = [frame_column(frame) for frame in encoded.frames]

    def send(self, publisher: SinkPublisher, start: int, stop: int) -> int:
        """Send rows ``start`` to ``stop`` (rows that are not sent are skipped) in runs of at
        most RUN_ROWS, each after the publisher's checks: the messages sent. Raises what the
        publisher's ``send`` raises: its ``timeout_error()`` when back-pressure outlasted the
        send timeout."""
        sent = 0
        for begin in range(start, stop, RUN_ROWS):
            socket = publisher.sending_socket()
            if socket is None:
                return sent + self._send_one_by_one(publisher, begin, stop)
            if socket.closed:
                raise zmq.ZMQError(errno.ENOTSOCK, f"{publisher.name}: its socket is closed")
            count, failed = self._native.send_rows(
                socket.underlying, self._columns, begin, min(stop, begin + RUN_ROWS)
            )
            sent += count
            if failed == errno.EAGAIN:
                raise publisher.timeout_error()
            if failed:
                raise zmq.ZMQError(failed)
        return sent

    def _send_one_by_one(self, publisher: SinkPublisher, start: int, stop: int) -> int:
        """A publisher that has no socket for the compiled loop: its ``send`` per message."""
        sent = 0
        for message in self._encoded.messages(start, stop):
            publisher.send(message)
            sent += 1
        return sent
