# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""A connection's buffer on capture's compiled receive side (``NativeBuffer``): its messages
between two flushes in C arrays (``rows.pxd``), which Arrow takes over without a copy
(``columns``), and its counters.

``receive.pyx`` receives into it in C (``receive``, the ``Poller``), through its ``inbox``
(declared in ``buffer.pxd``); Python adds what it took itself (``add_message``, ``add_fault``)
and takes the rows out (``take``, ``table``). ``spark_zmq.native.receive`` is where Python
finds it, beside what fills it.
"""

cimport cython
from cpython.buffer cimport PyBuffer_FillInfo
from libc.stdint cimport INT64_MAX, int32_t, int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

from spark_zmq.native.libzmq cimport (
    CLOCK_MONOTONIC,
    CLOCK_REALTIME,
    SZQ_INT32_MAX,
    szq_clock_ns,
)
from spark_zmq.native.rows cimport (
    Inbox,
    Refusal,
    Rows,
    add_frame,
    data_bytes,
    drop_row,
    end_row,
    footprint,
    inbox_full,
    rows_append,
    rows_clear,
    rows_free,
    rows_init,
    start_row,
)


#: a buffer emptied by ``move_to`` keeps arrays up to these sizes (a burst grew them larger:
#: new ones, as a new buffer starts with)
cdef enum:
    KEPT_DATA_BYTES = 1 << 18
    KEPT_ROWS = 4096


# -- memory handed to Arrow ------------------------------------------------------------------

@cython.auto_pickle(False)
cdef class _Memory:
    """A block of malloc'd memory that Arrow's buffers reference through the buffer protocol;
    freed when the last of them goes. Never copied or pickled: a copy would free it twice."""

    cdef char *pointer
    cdef Py_ssize_t size

    def __getbuffer__(self, Py_buffer *view, int flags):
        PyBuffer_FillInfo(view, self, self.pointer, self.size, 1, flags)

    def __releasebuffer__(self, Py_buffer *view):
        pass

    def __dealloc__(self):
        free(self.pointer)


cdef _Memory _hand_over(void *pointer, Py_ssize_t size):
    cdef _Memory memory = _Memory.__new__(_Memory)
    memory.pointer = <char *>pointer
    memory.size = size
    return memory


@cython.auto_pickle(False)
cdef class NativeBuffer:
    """A connection's messages between two flushes, in C arrays (a
    ``capture.buffer.MessageBuffer``), and its counters. Only the capture thread changes it;
    ``received`` may be read from any thread (a statistic).

    ``refusals`` (``refusals.Refusals``) gives the bounds of one message and turns the runs of
    refused messages into gap texts: ``faults`` holds them once the rows are taken (``take``)
    or handed to Arrow (``columns``). Never copied or pickled: its arrays are its own."""

    # attributes: buffer.pxd

    def __cinit__(self, int64_t max_rows, int64_t max_bytes, int burst, int64_t full_run,
                  object refusals not None):
        self.inbox = <Inbox *>malloc(sizeof(Inbox))
        if self.inbox == NULL:
            raise MemoryError()
        memset(self.inbox, 0, sizeof(Inbox))
        self.inbox.emptied_at = szq_clock_ns(CLOCK_MONOTONIC)  # nothing waits for it before
        if rows_init(&self.inbox.rows):
            free(self.inbox)
            self.inbox = NULL
            raise MemoryError()
        self.inbox.max_rows, self.inbox.max_bytes = max_rows, max_bytes
        self.inbox.burst, self.inbox.full_run = burst, full_run
        self.inbox.max_message_bytes = refusals.max_message_bytes
        self.inbox.max_message_parts = refusals.max_message_parts
        self.refusals = refusals
        self.faults = {}

    def __dealloc__(self):
        if self.inbox != NULL:
            if self.taken_over:  # the _Memory objects in ``handed`` free the arrays
                free(self.inbox.rows.refusals)
            else:
                rows_free(&self.inbox.rows)
            free(self.inbox)

    def __len__(self):
        return self.inbox.rows.rows

    @property
    def full(self):
        return inbox_full(self.inbox)

    @property
    def nbytes(self):
        """What the rows take as arrays (frames' bytes, offsets, times): what the bound counts."""
        return footprint(&self.inbox.rows)

    @property
    def frame_bytes(self):
        """The bytes of the frames held (still read after the arrays went to Arrow)."""
        return data_bytes(&self.inbox.rows)

    @property
    def received(self):
        return self.inbox.received

    @property
    def full_run(self):
        return self.inbox.full_run

    @full_run.setter
    def full_run(self, int64_t value):
        self.inbox.full_run = value

    def take_error(self):
        """The errno of the receive that failed since the last call (-1: the buffer could not
        grow), or 0; cleared."""
        cdef int failed = self.inbox.error
        self.inbox.error = 0
        return failed

    def time_at(self, Py_ssize_t index):
        """Receive time (ns, whole microseconds: what the spool keeps) of row ``index``."""
        if not 0 <= index < self.inbox.rows.rows:
            raise IndexError(index)
        return self.inbox.rows.times[index] * 1000

    def add_fault(self, str text not None, object at=None):
        """A row with no frames that carries ``text`` (a gap capture observed), received now or
        ``at`` (ns since the epoch)."""
        self.check_open()
        cdef int64_t when = szq_clock_ns(CLOCK_REALTIME) if at is None else at
        if start_row(&self.inbox.rows, when):
            raise MemoryError()
        self.faults[self.inbox.rows.rows] = text
        end_row(&self.inbox.rows)

    def add_message(self, list frames not None):
        """Append one message as if received now (for tests and for messages Python took)."""
        self.check_open()
        if start_row(&self.inbox.rows, szq_clock_ns(CLOCK_REALTIME)):
            raise MemoryError()
        cdef const unsigned char[:] view
        cdef const char *start
        for frame in frames:
            view = frame
            start = <const char *>&view[0] if view.shape[0] else NULL
            if add_frame(&self.inbox.rows, start, view.shape[0]):
                drop_row(&self.inbox.rows)
                raise MemoryError()
        end_row(&self.inbox.rows)
        self.inbox.received += 1

    def take(self):
        """What the buffer holds, as a new NativeBuffer whose ``faults`` are complete, leaving
        this one empty (its counters stay)."""
        self.check_open()
        cdef NativeBuffer taken = NativeBuffer(
            self.inbox.max_rows, self.inbox.max_bytes, self.inbox.burst, self.inbox.full_run,
            self.refusals
        )
        cdef Rows swap = taken.inbox.rows
        taken.inbox.rows = self.inbox.rows
        self.inbox.rows = swap
        taken.faults, self.faults = self.faults, {}
        taken._settle_refusals()
        return taken

    def flush_buffer(self):
        """An empty buffer of this kind, unbounded, for the rows of a flush (``move_to``)."""
        return NativeBuffer(INT64_MAX, INT64_MAX, self.inbox.burst, self.inbox.full_run,
                            self.refusals)

    def move_to(self, NativeBuffer flush not None):
        """Append the rows (their fault texts too) to ``flush``'s, the buffer of a flush's rows
        (``capture.spooling``), and empty this one: where the flush begins them. OverflowError,
        nothing moved, if its bytes would pass Arrow's int32 offsets.

        A flush of many connections then becomes one table, without an Arrow table and new
        arrays per connection each flush; this buffer keeps its arrays, unless a burst made
        them larger than a buffer starts with."""
        self.check_open()
        flush.check_open()
        self._settle_refusals()
        cdef Py_ssize_t first = flush.inbox.rows.rows
        if data_bytes(&self.inbox.rows) > SZQ_INT32_MAX - data_bytes(&flush.inbox.rows):
            raise OverflowError("a flush's rows cannot hold more than 2 GiB of frames")
        if rows_append(&flush.inbox.rows, &self.inbox.rows):
            raise MemoryError()
        if self.faults:
            for row, text in self.faults.items():
                flush.faults[first + row] = text
            self.faults = {}
        cdef Rows *rows = &self.inbox.rows
        if rows.data_capacity > KEPT_DATA_BYTES or rows.row_capacity > KEPT_ROWS:
            rows_free(rows)
            if rows_init(rows):
                raise MemoryError()
        else:
            rows_clear(rows)
        return first

    cdef void _settle_refusals(self) except *:
        """The refusal runs become fault texts (``refusals.gap_texts``) and are forgotten."""
        cdef Rows *rows = &self.inbox.rows
        if not rows.refusal_count:
            return
        cdef Py_ssize_t i
        cdef Refusal *run
        runs = {}
        for i in range(rows.refusal_count):
            run = &rows.refusals[i]
            runs[run.row] = (run.count, run.largest_bytes, run.largest_parts, run.first_ns,
                             run.last_ns)
        free(rows.refusals)
        rows.refusals, rows.refusal_count, rows.refusal_capacity = NULL, 0, 0
        self.faults.update(self.refusals.gap_texts(runs))

    def table(self):
        """The rows in the spool's schema (``buffer.native_table``); the arrays go to Arrow."""
        from spark_zmq.capture.buffer import native_table

        return native_table(self)

    def columns(self):
        """The arrays as memory that Arrow can reference, without a copy: (rows, frames,
        times us int64, row offsets int32, frame offsets int32, data). From then on the buffer
        takes nothing more (Arrow's buffers point into its arrays), but it can still be read:
        its length, ``time_at`` and ``faults`` (a failed spool write drops what it held)."""
        cdef Rows *rows = &self.inbox.rows
        if not self.taken_over:
            self._settle_refusals()
            self.handed = (
                _hand_over(rows.times, rows.rows * sizeof(int64_t)),
                _hand_over(rows.row_offsets, (rows.rows + 1) * sizeof(int32_t)),
                _hand_over(rows.frame_offsets, (rows.frames + 1) * sizeof(int32_t)),
                _hand_over(rows.data, data_bytes(rows)),
            )
            self.taken_over = True
        return (rows.rows, rows.frames) + self.handed

    cdef void check_open(self) except *:
        """Raise unless rows may still be added (``receive.pyx`` checks before it writes)."""
        if self.taken_over:
            raise RuntimeError("this buffer's arrays were handed to Arrow")
