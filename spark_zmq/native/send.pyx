# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A writer's compiled send loop (``send_rows``): the messages of a batch that the format
encoded column-wise, sent in C without the GIL (``spark_zmq.spark.sending`` drives it).

libzmq is called through the shared binding (``libzmq.pxd``), the same one as capture's
``receive``, which ``spark_zmq.native`` binds to pyzmq's libzmq before this module is used: the
sockets are pyzmq's, so only pyzmq's libzmq may touch them.
"""

from cpython.exc cimport PyErr_CheckSignals
from libc.errno cimport EINTR
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from spark_zmq.native.libzmq cimport SZQ_SNDMORE, api, require_bound, szq_api_t, szq_msg_t

#: libzmq's functions (filled by ``libzmq.bind``; ``require_bound`` checks it was called)
cdef szq_api_t *szq = api()

ctypedef struct FrameColumn:
    # one frame of every row: an Arrow ``binary`` array's buffers, taken at the array's offset
    const unsigned char *validity  # NULL when the column has no nulls
    const int32_t *offsets         # row i's bytes are data[offsets[i]:offsets[i + 1]]
    const char *data
    int64_t bit_offset             # the array's offset: row i's validity bit is bit_offset + i

ctypedef struct Outbox:
    FrameColumn *columns
    int count                      # frame columns
    Py_ssize_t row                 # the next row to send
    Py_ssize_t stop                # the end of the run
    int frame                      # the next frame of ``row`` (not 0: the row is half sent)
    int64_t sent                   # messages sent whole


cdef inline bint _present(const FrameColumn *column, Py_ssize_t row) noexcept nogil:
    cdef int64_t bit = column.bit_offset + row
    return column.validity == NULL or (column.validity[bit >> 3] >> (bit & 7)) & 1


cdef int _send_frame(const FrameColumn *column, Py_ssize_t row, void *socket,
                     int flags) noexcept nogil:
    """One frame as a new zmq message (a copy: zmq's I/O thread sends it later): 0, or errno."""
    cdef szq_msg_t message
    cdef int32_t start = column.offsets[row]
    cdef size_t size = <size_t>(column.offsets[row + 1] - start)
    if szq.msg_init_size(&message, size) != 0:
        return szq.errno_()
    if size:
        memcpy(szq.msg_data(&message), column.data + start, size)
    if szq.msg_send(&message, socket, flags) < 0:
        szq.msg_close(&message)  # not sent: still ours
        return szq.errno_()
    return 0


cdef int _send_run(Outbox *box, void *socket) noexcept nogil:
    """Send rows ``box.row`` to ``box.stop`` (each a blocking send: the socket's SNDTIMEO bounds
    a wait on back-pressure): 0 when done, else the errno of the send that failed, with
    ``box.row`` and ``box.frame`` at that frame, so that a call after EINTR goes on there.

    Row i's message is its frames in column order up to the first column where the row is
    null; a row null in the first column is not sent."""
    cdef int failed
    cdef bint last
    while box.row < box.stop:
        if not _present(&box.columns[0], box.row):
            box.row += 1
            continue
        while True:
            last = (box.frame + 1 == box.count
                    or not _present(&box.columns[box.frame + 1], box.row))
            failed = _send_frame(&box.columns[box.frame], box.row, socket,
                                 0 if last else SZQ_SNDMORE)
            if failed:
                return failed
            if last:
                break
            box.frame += 1
        box.frame = 0
        box.row += 1
        box.sent += 1
    return 0


def send_rows(size_t socket, list columns, Py_ssize_t start, Py_ssize_t stop):
    """Send the messages of rows ``start`` to ``stop`` of a batch encoded column-wise, on the
    socket at address ``socket`` (pyzmq's ``Socket.underlying``), without the GIL: (messages
    sent, 0) or, when a send failed, (messages sent before it, its errno). EAGAIN means that
    back-pressure outlasted the socket's send timeout. An interrupted send (EINTR) runs
    Python's signal handlers, as pyzmq does, and goes on where it stopped (a handler's
    exception ends the call).

    ``columns`` describe the frame columns (``spark_zmq.spark.sending.frame_column``):
    (validity address or 0, offsets address, data address, offset) of Arrow ``binary`` arrays
    of at least ``stop`` rows, which the caller keeps alive during the call."""
    require_bound()
    if not columns:
        raise ValueError("a message has at least one frame column")
    cdef Outbox box
    memset(&box, 0, sizeof(Outbox))
    box.count = len(columns)
    box.columns = <FrameColumn *>malloc(box.count * sizeof(FrameColumn))
    if box.columns == NULL:
        raise MemoryError()
    cdef int i
    cdef int failed = 0
    try:
        for i, (validity, offsets, data, offset) in enumerate(columns):
            box.columns[i].validity = <const unsigned char *><size_t>validity
            box.columns[i].offsets = (<const int32_t *><size_t>offsets) + <Py_ssize_t>offset
            box.columns[i].data = <const char *><size_t>data
            box.columns[i].bit_offset = offset
        box.row, box.stop = start, stop
        while True:
            with nogil:
                failed = _send_run(&box, <void *>socket)
            if failed != EINTR:
                break
            PyErr_CheckSignals()  # raises what a handler raised
        return box.sent, failed
    finally:
        free(box.columns)
