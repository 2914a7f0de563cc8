"""A writer task's send loop in two forms: the compiled loop and the Python path it falls back to.

The compiled loop (``send_rows`` in ``spark_zmq.capture.native``: the capture core's module, so
that both call the one libzmq that pyzmq loaded, with the same binding) sends the messages of a
batch that the format encoded column-wise (``EncodedBatch``), in C without Python's lock: per
message it copies each frame into a zmq message and sends it on the publisher's own pyzmq
socket, blocking on back-pressure for up to the socket's send timeout, as pyzmq's
``send_multipart`` does. Python still decides everything that is per batch, not per message:
``mode``, ``maxMessageBytes``, waiting for subscribers, the publisher's checks
(``SinkPublisher.sending_socket``), the counts.

The Python path (``SinkProtocol.encode`` and a ``SinkPublisher.send`` per message) is the
fallback. Which one runs: the writer option ``sendCore``, else ``SPARK_ZMQ_SEND_CORE`` in the
executor's Python worker, else ``auto``: the compiled loop when it loads, else the Python path,
said once per process in the log. A format without a column-wise encoding, or a publisher
without a socket for it, sends through the Python path whatever the choice.
"""

from __future__ import annotations

import errno
import functools
import os
from types import ModuleType

import pyarrow as pa
import zmq

from spark_zmq.capture.cores import CORES, native_module
from spark_zmq.log import logger
from spark_zmq.options import OptionError
from spark_zmq.protocols.contract import EncodedBatch, SinkPublisher

SEND_CORE_VARIABLE = "SPARK_ZMQ_SEND_CORE"
#: most rows the compiled loop sends in one go: the publisher's checks (``sending_socket``:
#: goby's dropped Router connection, yamz's failed announcement) run again after each run
RUN_ROWS = 1024

#: (validity address or 0, offsets address, data address, offset) of one frame column
FrameColumn = tuple[int, int, int, int]


def compiled_send_loop(choice: str | None = None) -> ModuleType | None:
    """The compiled send loop's module that ``choice`` (else ``SPARK_ZMQ_SEND_CORE``, else
    ``auto``) asks for; None for the Python path. ``native`` that does not load raises
    ImportError with the reason."""
    wanted = (choice or os.environ.get(SEND_CORE_VARIABLE) or "auto").strip().lower()
    if wanted not in CORES:
        raise OptionError(
            f"{SEND_CORE_VARIABLE}={wanted!r} is not one of {', '.join(CORES)} (auto: the "
            f"compiled send loop when it loads, else the Python path)"
        )
    if wanted == "python":
        return None
    try:
        return native_module()
    except ImportError as exc:
        if wanted == "native":
            raise ImportError(
                f"sendCore=native: the compiled send loop is not available: {exc}"
            ) from None
        _log_fallback(str(exc))
        return None


@functools.cache
def _log_fallback(reason: str) -> None:
    logger.warning(
        "writers send through their Python path: the compiled send loop is not available "
        "(%s). Set %s=python (or the option sendCore) to choose it and silence this line, or "
        "reinstall spark_zmq with a C compiler at hand",
        reason,
        SEND_CORE_VARIABLE,
    )


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
