# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
# A connection's messages in C: the structs of capture's compiled receive side (``Rows``, the
# ``Inbox`` that holds them with what receiving needs, ``Pace``) and the per-message helpers that
# store rows, shared by ``buffer.pyx`` (``NativeBuffer``, what Python sees) and ``receive.pyx``
# (the burst and the poll loop). They are ``cdef inline`` in this file so that each module that
# cimports it compiles them in, where the C compiler can inline them into the per-message loop:
# no call crosses a module for a message.
#
# Invariants of the rows: ``row_offsets`` has ``rows + 1`` entries and ``frame_offsets`` has
# ``frames + 1``, both starting at 0 and never decreasing; ``times`` has ``rows`` entries, in
# microseconds since the epoch as the spool stores them (so that Arrow takes them as they are);
# the bytes of frame i are ``data[frame_offsets[i]:frame_offsets[i + 1]]``. Offsets are int32
# (Arrow's ``binary``): a buffer never holds 2 GiB (it is written at MAX_SEGMENT_BYTES).

from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

from spark_zmq.native.libzmq cimport SZQ_INT32_MAX


ctypedef struct Refusal:
    # a run of consecutive messages refused for their size, shown by one empty row
    Py_ssize_t row          # the row's index
    int64_t count           # messages refused in the run
    int64_t largest_bytes   # the largest of them (by bytes, then parts): its bytes and parts
    int64_t largest_parts
    int64_t first_ns        # receive times of the first and the last (ns since the epoch)
    int64_t last_ns

ctypedef struct Rows:
    int64_t *times          # receive time (us since the epoch: the spool's unit) per row
    int32_t *row_offsets    # rows + 1: row i's frames are frame_offsets[row_offsets[i]..]
    int32_t *frame_offsets  # frames + 1: byte offsets into data
    char *data
    Py_ssize_t rows, row_capacity, frames, frame_capacity, data_capacity
    Refusal *refusals       # by row, rare (NULL until the first)
    Py_ssize_t refusal_count, refusal_capacity

ctypedef struct Pace:
    # how far apart messages arrive: mean spacings measured over spans of PACE_SPAN_NS or more
    int64_t spacing_ns      # the shorter of the last two measured (0 until one is)
    int64_t last_ns         # the last one measured
    int64_t span_ns, span_messages  # the span being measured: its time and messages so far

ctypedef struct Inbox:
    Rows rows
    int64_t received        # messages taken from sockets since the buffer was made
    int64_t run             # messages taken since the socket's queue was last found empty
    int64_t full_run        # a run this long means the queue was full
    int64_t max_rows, max_bytes, burst
    int64_t max_message_bytes, max_message_parts  # a larger message is refused
    int error               # errno of a failed receive (-1: the buffer could not grow), 0 if none
    int64_t emptied_at      # CLOCK_MONOTONIC ns when the queue was last found empty
    Pace pace               # how far apart messages arrive (``measure_pace``)

#: what one frame and one row cost in a buffer besides the frames' bytes (their offsets and
#: receive time), counted against its bound in bytes like the bytes themselves
cdef enum:
    FRAME_OVERHEAD = 4   # sizeof(int32_t): a frame offset
    ROW_OVERHEAD = 12    # sizeof(int32_t) + sizeof(int64_t): a row offset and a receive time


cdef inline int rows_init(Rows *rows) noexcept nogil:
    """Empty arrays with room to grow (1 on allocation failure, all freed)."""
    memset(rows, 0, sizeof(Rows))
    rows.row_capacity = 1024
    rows.frame_capacity = 2048
    rows.data_capacity = 65536
    rows.times = <int64_t *>malloc(rows.row_capacity * sizeof(int64_t))
    rows.row_offsets = <int32_t *>malloc((rows.row_capacity + 1) * sizeof(int32_t))
    rows.frame_offsets = <int32_t *>malloc((rows.frame_capacity + 1) * sizeof(int32_t))
    rows.data = <char *>malloc(rows.data_capacity)
    if not (rows.times and rows.row_offsets and rows.frame_offsets and rows.data):
        rows_free(rows)
        return 1
    rows.row_offsets[0] = 0
    rows.frame_offsets[0] = 0
    return 0


cdef inline void rows_free(Rows *rows) noexcept nogil:
    free(rows.times)
    free(rows.row_offsets)
    free(rows.frame_offsets)
    free(rows.data)
    free(rows.refusals)
    memset(rows, 0, sizeof(Rows))


cdef inline Py_ssize_t doubled(Py_ssize_t capacity, Py_ssize_t needed) noexcept nogil:
    """``capacity`` (at least 1) doubled until it holds ``needed``."""
    if capacity < 1:
        capacity = 1
    while capacity < needed:
        capacity *= 2
    return capacity


cdef inline int grow_array(void **pointer, Py_ssize_t *capacity, Py_ssize_t needed,
                           Py_ssize_t item, Py_ssize_t extra) noexcept nogil:
    """Make room for ``needed`` items (plus ``extra``) by doubling: 1 if memory ran out."""
    if needed <= capacity[0]:
        return 0
    cdef Py_ssize_t capacity_now = doubled(capacity[0], needed)
    cdef void *grown = realloc(pointer[0], (capacity_now + extra) * item)
    if grown == NULL:
        return 1
    pointer[0] = grown
    capacity[0] = capacity_now
    return 0


cdef inline int grow_rows(Rows *rows, Py_ssize_t needed) noexcept nogil:
    """Room for ``needed`` rows in ``times`` and ``row_offsets`` (by doubling): 1 if memory ran
    out (the capacity stays what both arrays have)."""
    if needed <= rows.row_capacity:
        return 0
    cdef Py_ssize_t capacity = doubled(rows.row_capacity, needed)
    cdef void *times = realloc(rows.times, capacity * sizeof(int64_t))
    if times == NULL:
        return 1
    rows.times = <int64_t *>times
    cdef void *offsets = realloc(rows.row_offsets, (capacity + 1) * sizeof(int32_t))
    if offsets == NULL:
        return 1
    rows.row_offsets = <int32_t *>offsets
    rows.row_capacity = capacity
    return 0


cdef inline int start_row(Rows *rows, int64_t now) noexcept nogil:
    """Room for one more row, and its time (``now`` in ns; 1 if memory ran out)."""
    if grow_rows(rows, rows.rows + 1):
        return 1
    rows.times[rows.rows] = now // 1000
    return 0


cdef inline int add_frame(Rows *rows, const char *data, size_t size) noexcept nogil:
    """Append a frame to the row being filled: 1 if memory ran out or the rows' bytes would
    pass Arrow's int32 offsets."""
    cdef Py_ssize_t used = rows.frame_offsets[rows.frames]
    if <Py_ssize_t>size > SZQ_INT32_MAX - used:
        return 1
    if grow_array(<void **>&rows.frame_offsets, &rows.frame_capacity, rows.frames + 1,
                  sizeof(int32_t), 1):
        return 1
    if grow_array(<void **>&rows.data, &rows.data_capacity, used + <Py_ssize_t>size, 1, 0):
        return 1
    if size:
        memcpy(rows.data + used, data, size)
    rows.frames += 1
    rows.frame_offsets[rows.frames] = <int32_t>(used + size)
    return 0


cdef inline void end_row(Rows *rows) noexcept nogil:
    rows.rows += 1
    rows.row_offsets[rows.rows] = <int32_t>rows.frames


cdef inline void drop_row(Rows *rows) noexcept nogil:
    """Forget the frames of the row being filled (it is not ended)."""
    rows.frames = rows.row_offsets[rows.rows]


cdef inline bint inbox_full(Inbox *inbox) noexcept nogil:
    return (inbox.rows.rows >= inbox.max_rows
            or footprint(&inbox.rows) >= inbox.max_bytes)


cdef inline Py_ssize_t data_bytes(Rows *rows) noexcept nogil:
    """The bytes of the frames."""
    return rows.frame_offsets[rows.frames]


cdef inline Py_ssize_t footprint(Rows *rows) noexcept nogil:
    """What the rows take as arrays: the frames' bytes, their offsets and the rows' offsets and
    times (what the buffer's bound in bytes counts: a message of many empty frames costs too)."""
    return data_bytes(rows) + FRAME_OVERHEAD * rows.frames + ROW_OVERHEAD * rows.rows


cdef inline int refuse(Rows *rows, int64_t now, int64_t nbytes, int64_t parts) noexcept nogil:
    """Record a refused message in the row being started (its frames are already dropped): a
    new refusal row, or one more on the refusal row just before it. 1 if memory ran out."""
    cdef Refusal *run
    cdef Py_ssize_t last = rows.refusal_count - 1
    if last >= 0 and rows.refusals[last].row == rows.rows - 1:
        run = &rows.refusals[last]
    else:
        if grow_array(<void **>&rows.refusals, &rows.refusal_capacity,
                      rows.refusal_count + 1, sizeof(Refusal), 0):
            return 1
        run = &rows.refusals[rows.refusal_count]
        rows.refusal_count += 1
        memset(run, 0, sizeof(Refusal))
        run.row = rows.rows
        run.first_ns = now
        end_row(rows)  # empty, in the message's place
    run.count += 1
    run.last_ns = now
    if nbytes > run.largest_bytes or (nbytes == run.largest_bytes and parts > run.largest_parts):
        run.largest_bytes, run.largest_parts = nbytes, parts
    return 0


#: the shortest span over which ``measure_pace`` measures a spacing
cdef enum:
    PACE_SPAN_NS = 2000000  # 2 ms


cdef inline void measure_pace(Pace *pace, int64_t elapsed, int64_t messages) noexcept nogil:
    """Add ``messages`` that arrived in ``elapsed`` ns (a run, from one time its queue was found
    empty to the next). Spacings are measured over PACE_SPAN_NS or more: messages come in
    bursts (a publisher's tick, zmq's I/O thread handing over a read), and a run taken while a
    burst was still arriving is no measure of the pace; the shorter of the last two is kept."""
    pace.span_ns += elapsed
    pace.span_messages += messages
    if pace.span_ns < PACE_SPAN_NS or not pace.span_messages:
        return
    cdef int64_t measured = pace.span_ns // pace.span_messages
    pace.spacing_ns = min(measured, pace.last_ns) if pace.last_ns else measured
    pace.last_ns = measured
    pace.span_ns = pace.span_messages = 0


cdef inline int rows_append(Rows *into, Rows *rows) noexcept nogil:
    """Append ``rows`` (refusals settled: none left) to ``into``: 1, nothing changed, if memory
    ran out or ``into``'s bytes would pass Arrow's int32 offsets."""
    cdef Py_ssize_t base_bytes = data_bytes(into), nbytes = data_bytes(rows)
    cdef Py_ssize_t i, base_frames = into.frames
    if nbytes > SZQ_INT32_MAX - base_bytes:
        return 1
    if (grow_rows(into, into.rows + rows.rows)
            or grow_array(<void **>&into.frame_offsets, &into.frame_capacity,
                          into.frames + rows.frames, sizeof(int32_t), 1)
            or grow_array(<void **>&into.data, &into.data_capacity, base_bytes + nbytes, 1, 0)):
        return 1
    memcpy(into.times + into.rows, rows.times, rows.rows * sizeof(int64_t))
    for i in range(1, rows.rows + 1):
        into.row_offsets[into.rows + i] = <int32_t>(base_frames + rows.row_offsets[i])
    for i in range(1, rows.frames + 1):
        into.frame_offsets[base_frames + i] = <int32_t>(base_bytes + rows.frame_offsets[i])
    if nbytes:
        memcpy(into.data + base_bytes, rows.data, nbytes)
    into.rows += rows.rows
    into.frames += rows.frames
    return 0


cdef inline void rows_clear(Rows *rows) noexcept nogil:
    """No rows, the arrays kept (refusals settled: none left)."""
    rows.rows = 0
    rows.frames = 0
