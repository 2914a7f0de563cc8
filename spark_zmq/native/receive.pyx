# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Capture's compiled receive side: poll, receive and buffer messages in C, without the GIL.

Capture's Python loop (``capture.loop``, through ``capture.receiving.NativeCore``) asks a
``Poller`` to wait until something needs Python: a command in the mailbox, a monitor event, a
buffer that must be written, a receive queue found full, or the time the loop asked to be woken
at. Meanwhile, every message that arrives is received here with ``zmq_msg_recv`` and appended
to its connection's ``NativeBuffer`` as Arrow-ready arrays (row offsets, frame offsets, bytes,
receive times), so Python handles one segment per flush instead of one object per message.
libzmq is called through the shared binding (``libzmq.pxd``), which ``spark_zmq.native`` binds
to pyzmq's libzmq before this module is used.

Invariants of a buffer: ``row_offsets`` has ``rows + 1`` entries and ``frame_offsets`` has
``frames + 1``, both starting at 0 and never decreasing; ``times`` has ``rows`` entries, in
microseconds since the epoch as the spool stores them (so that Arrow takes them as they are); the
bytes of frame i are ``data[frame_offsets[i]:frame_offsets[i + 1]]``. Offsets are int32 (Arrow's
``binary``): a buffer never holds 2 GiB (it is written at MAX_SEGMENT_BYTES).

A message is stored whole or not at all: one over the buffer's bounds of a message (bytes and
parts, ``maxMessageBytes`` and ``maxMessageParts``) is taken from the socket to its last frame
and recorded as a refusal (an empty row in its place, or one more on the refusal row just
before it); a receive that fails in the middle of a message takes the rest of the message from
the socket too, so that what comes next starts at a message boundary. EINTR is retried.
"""

cimport cython
from cpython.buffer cimport PyBuffer_FillInfo
from libc.errno cimport EAGAIN, EINTR
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

from spark_zmq.native.libzmq cimport (
    CLOCK_MONOTONIC,
    CLOCK_REALTIME,
    SZQ_DONTWAIT,
    SZQ_INT32_MAX,
    SZQ_POLLIN,
    api,
    require_bound,
    szq_api_t,
    szq_clock_ns,
    szq_msg_t,
    szq_pollitem_t,
    szq_wait_readable_ns,
)

#: libzmq's functions (filled by ``libzmq.bind``; ``require_bound`` checks it was called)
cdef szq_api_t *szq = api()


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


# -- a connection's buffer -------------------------------------------------------------------

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
    Pace pace               # how far apart messages arrive (``_measure_pace``)

#: what one frame and one row cost in a buffer besides the frames' bytes (their offsets and
#: receive time), counted against its bound in bytes like the bytes themselves
cdef enum:
    FRAME_OVERHEAD = 4   # sizeof(int32_t): a frame offset
    ROW_OVERHEAD = 12    # sizeof(int32_t) + sizeof(int64_t): a row offset and a receive time


cdef int _rows_init(Rows *rows) noexcept nogil:
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
        _rows_free(rows)
        return 1
    rows.row_offsets[0] = 0
    rows.frame_offsets[0] = 0
    return 0


cdef void _rows_free(Rows *rows) noexcept nogil:
    free(rows.times)
    free(rows.row_offsets)
    free(rows.frame_offsets)
    free(rows.data)
    free(rows.refusals)
    memset(rows, 0, sizeof(Rows))


cdef int _grow(void **pointer, Py_ssize_t *capacity, Py_ssize_t needed, Py_ssize_t item,
               Py_ssize_t extra) noexcept nogil:
    """Make room for ``needed`` items (plus ``extra``) by doubling: 1 if memory ran out."""
    cdef Py_ssize_t capacity_now = capacity[0]
    if needed <= capacity_now:
        return 0
    if capacity_now < 1:
        capacity_now = 1
    while capacity_now < needed:
        capacity_now *= 2
    cdef void *grown = realloc(pointer[0], (capacity_now + extra) * item)
    if grown == NULL:
        return 1
    pointer[0] = grown
    capacity[0] = capacity_now
    return 0


cdef inline int _start_row(Rows *rows, int64_t now) noexcept nogil:
    """Room for one more row, and its time (``now`` in ns; 1 if memory ran out)."""
    cdef Py_ssize_t capacity = rows.row_capacity
    cdef void *times
    cdef void *offsets
    if rows.rows + 1 > capacity:
        capacity *= 2
        times = realloc(rows.times, capacity * sizeof(int64_t))
        if times == NULL:
            return 1
        rows.times = <int64_t *>times
        offsets = realloc(rows.row_offsets, (capacity + 1) * sizeof(int32_t))
        if offsets == NULL:
            return 1
        rows.row_offsets = <int32_t *>offsets
        rows.row_capacity = capacity
    rows.times[rows.rows] = now // 1000
    return 0


cdef inline int _add_frame(Rows *rows, const char *data, size_t size) noexcept nogil:
    cdef Py_ssize_t used = rows.frame_offsets[rows.frames]
    if <Py_ssize_t>size > SZQ_INT32_MAX - used:
        return 1
    if _grow(<void **>&rows.frame_offsets, &rows.frame_capacity, rows.frames + 1,
             sizeof(int32_t), 1):
        return 1
    if _grow(<void **>&rows.data, &rows.data_capacity, used + <Py_ssize_t>size, 1, 0):
        return 1
    if size:
        memcpy(rows.data + used, data, size)
    rows.frames += 1
    rows.frame_offsets[rows.frames] = <int32_t>(used + size)
    return 0


cdef inline void _end_row(Rows *rows) noexcept nogil:
    rows.rows += 1
    rows.row_offsets[rows.rows] = <int32_t>rows.frames


cdef inline void _drop_row(Rows *rows) noexcept nogil:
    """Forget the frames of the row being filled (it is not ended)."""
    rows.frames = rows.row_offsets[rows.rows]


cdef inline bint _full(Inbox *inbox) noexcept nogil:
    return (inbox.rows.rows >= inbox.max_rows
            or _footprint(&inbox.rows) >= inbox.max_bytes)


cdef inline Py_ssize_t _data_bytes(Rows *rows) noexcept nogil:
    """The bytes of the frames."""
    return rows.frame_offsets[rows.frames]


cdef inline Py_ssize_t _footprint(Rows *rows) noexcept nogil:
    """What the rows take as arrays: the frames' bytes, their offsets and the rows' offsets and
    times (what the buffer's bound in bytes counts: a message of many empty frames costs too)."""
    return _data_bytes(rows) + FRAME_OVERHEAD * rows.frames + ROW_OVERHEAD * rows.rows


cdef int _refuse(Rows *rows, int64_t now, int64_t nbytes, int64_t parts) noexcept nogil:
    """Record a refused message in the row being started (its frames are already dropped): a
    new refusal row, or one more on the refusal row just before it. 1 if memory ran out."""
    cdef Refusal *run
    cdef Py_ssize_t last = rows.refusal_count - 1
    if last >= 0 and rows.refusals[last].row == rows.rows - 1:
        run = &rows.refusals[last]
    else:
        if _grow(<void **>&rows.refusals, &rows.refusal_capacity, rows.refusal_count + 1,
                 sizeof(Refusal), 0):
            return 1
        run = &rows.refusals[rows.refusal_count]
        rows.refusal_count += 1
        memset(run, 0, sizeof(Refusal))
        run.row = rows.rows
        run.first_ns = now
        _end_row(rows)  # empty, in the message's place
    run.count += 1
    run.last_ns = now
    if nbytes > run.largest_bytes or (nbytes == run.largest_bytes and parts > run.largest_parts):
        run.largest_bytes, run.largest_parts = nbytes, parts
    return 0


cdef inline int _next_frame(szq_msg_t *message, void *socket) noexcept nogil:
    """The next frame of a message whose first frame was received (zmq delivers a message's
    frames together, so it is there): 0, or the errno of the failure (EINTR is retried)."""
    cdef int failed
    while szq.msg_recv(message, socket, SZQ_DONTWAIT) < 0:
        failed = szq.errno_()
        if failed != EINTR:
            return failed
    return 0


cdef inline int _take_message(Inbox *inbox, szq_msg_t *message, void *socket,
                              int64_t now) noexcept nogil:
    """Store, or refuse, the message whose first frame is in ``message``, taking its other
    frames from ``socket`` to the last: 0, or the errno of a failure (-1: the buffer could not
    grow), after which nothing of the message is stored.

    A message over ``max_message_bytes`` or ``max_message_parts`` stops being copied at the
    frame that crosses the bound, so that a refused message costs at most the bound here."""
    cdef Rows *rows = &inbox.rows
    cdef int64_t parts = 0, nbytes = 0
    cdef size_t size
    cdef int failed = 0
    cdef bint copying = True
    if _start_row(rows, now):
        copying = False
    while True:
        size = szq.msg_size(message)
        parts += 1
        nbytes += <int64_t>size
        if parts > inbox.max_message_parts or nbytes > inbox.max_message_bytes:
            copying = False
        if copying and _add_frame(rows, <const char *>szq.msg_data(message), size):
            copying = False  # the buffer could not grow: the rest is only taken
        if not szq.msg_more(message):
            break
        failed = _next_frame(message, socket)
        if failed:
            break
    if copying and not failed:
        _end_row(rows)
        return 0
    _drop_row(rows)
    if failed:
        return failed
    if parts > inbox.max_message_parts or nbytes > inbox.max_message_bytes:
        if _start_row(rows, now) == 0 and _refuse(rows, now, nbytes, parts) == 0:
            return 0
    return -1


cdef enum:
    PACE_SPAN_NS = 2000000  # 2 ms


cdef inline void _measure_pace(Pace *pace, int64_t elapsed, int64_t messages) noexcept nogil:
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


cdef int _burst(Inbox *inbox, void *socket, bint *emptied, bint *queue_full) noexcept nogil:
    """Take up to ``inbox.burst`` messages waiting on ``socket`` (fewer once the buffer holds
    ``max_bytes``): how many, stored or refused (a failure stops the burst, with
    ``inbox.error`` set). Sets ``emptied`` when the queue was found empty and ``queue_full``
    when the run since it last was reached ``full_run``. A burst that empties the queue dates
    it (``emptied_at``) and measures how far apart the run's messages arrived (they came
    after the queue was last found empty: ``_measure_pace``)."""
    cdef szq_msg_t message
    cdef int count = 0
    cdef int failed = 0
    cdef int64_t now
    emptied[0] = False
    szq.msg_init(&message)
    while count < inbox.burst:
        if szq.msg_recv(&message, socket, SZQ_DONTWAIT) < 0:
            failed = szq.errno_()
            if failed == EINTR:
                failed = 0
                continue
            if failed == EAGAIN:
                emptied[0] = True
                failed = 0
            break
        count += 1
        failed = _take_message(inbox, &message, socket, szq_clock_ns(CLOCK_REALTIME))
        if failed or _footprint(&inbox.rows) >= inbox.max_bytes:
            break
    szq.msg_close(&message)
    inbox.received += count
    inbox.run += count
    queue_full[0] = inbox.run >= inbox.full_run
    if emptied[0]:
        now = szq_clock_ns(CLOCK_MONOTONIC)
        _measure_pace(&inbox.pace, now - inbox.emptied_at, inbox.run)
        inbox.run = 0
        inbox.emptied_at = now
    if failed:
        inbox.error = failed
    return count


@cython.auto_pickle(False)
cdef class NativeBuffer:
    """A connection's messages between two flushes, in C arrays (``MessageBuffer`` in
    ``buffer``), and its counters. Only the capture thread changes it; ``received`` may be read
    from any thread (a statistic).

    ``refusals`` (``refusals.Refusals``) gives the bounds of one message and turns the runs of
    refused messages into gap texts: ``faults`` holds them once the rows are taken (``take``)
    or handed to Arrow (``columns``). Never copied or pickled: its arrays are its own."""

    cdef Inbox *inbox
    cdef public dict faults  # fault row texts by row index, rare
    cdef readonly object refusals
    cdef bint taken_over     # the arrays went to Arrow: nothing more may be added
    cdef tuple handed        # the _Memory objects that own them since: reading stays valid

    def __cinit__(self, int64_t max_rows, int64_t max_bytes, int burst, int64_t full_run,
                  object refusals not None):
        self.inbox = <Inbox *>malloc(sizeof(Inbox))
        if self.inbox == NULL:
            raise MemoryError()
        memset(self.inbox, 0, sizeof(Inbox))
        self.inbox.emptied_at = szq_clock_ns(CLOCK_MONOTONIC)  # nothing waits for it before
        if _rows_init(&self.inbox.rows):
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
                _rows_free(&self.inbox.rows)
            free(self.inbox)

    def __len__(self):
        return self.inbox.rows.rows

    @property
    def full(self):
        return _full(self.inbox)

    @property
    def nbytes(self):
        """What the rows take as arrays (frames' bytes, offsets, times): what the bound counts."""
        return _footprint(&self.inbox.rows)

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

    def add_fault(self, str text not None):
        """A row with no frames that carries ``text`` (a gap capture observed)."""
        self._check_open()
        if _start_row(&self.inbox.rows, szq_clock_ns(CLOCK_REALTIME)):
            raise MemoryError()
        self.faults[self.inbox.rows.rows] = text
        _end_row(&self.inbox.rows)

    def add_message(self, list frames not None):
        """Append one message as if received now (for tests and for messages Python took)."""
        self._check_open()
        if _start_row(&self.inbox.rows, szq_clock_ns(CLOCK_REALTIME)):
            raise MemoryError()
        cdef const unsigned char[:] view
        cdef const char *start
        for frame in frames:
            view = frame
            start = <const char *>&view[0] if view.shape[0] else NULL
            if _add_frame(&self.inbox.rows, start, view.shape[0]):
                _drop_row(&self.inbox.rows)
                raise MemoryError()
        _end_row(&self.inbox.rows)
        self.inbox.received += 1

    def take(self):
        """What the buffer holds, as a new NativeBuffer whose ``faults`` are complete, leaving
        this one empty (its counters stay)."""
        self._check_open()
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
                _hand_over(rows.data, _data_bytes(rows)),
            )
            self.taken_over = True
        return (rows.rows, rows.frames) + self.handed

    cdef void _check_open(self) except *:
        if self.taken_over:
            raise RuntimeError("this buffer's arrays were handed to Arrow")


def receive(NativeBuffer buffer not None, size_t socket):
    """One burst from the socket at address ``socket`` (pyzmq's ``Socket.underlying``) into
    ``buffer``, without the GIL: (messages taken, whether the queue was found full). A failed
    receive does not raise: ``buffer.take_error()`` says it (what it took before stays)."""
    require_bound()
    buffer._check_open()
    cdef bint emptied = False, queue_full = False
    cdef int count
    cdef Inbox *inbox = buffer.inbox
    with nogil:
        count = _burst(inbox, <void *>socket, &emptied, &queue_full)
    return count, bool(queue_full)


# -- the poll loop ---------------------------------------------------------------------------

cdef enum:
    QUEUE_SHARE = 4  # a pause lets at most this share of a receive queue (``full_run``) arrive

cdef inline int64_t _time_to_fill(Inbox *inbox) noexcept nogil:
    """How long messages take to fill 1/QUEUE_SHARE of the inbox's receive queue, or a burst,
    at its pace (``_measure_pace``): ns."""
    cdef int64_t room = min(inbox.full_run // QUEUE_SHARE, inbox.burst)
    return room * inbox.pace.spacing_ns


#: the longest one ``Poller.wait`` waits, whatever it is asked
MAX_WAIT_SECONDS = 3600.0
#: what ``Poller.wait`` reports
MAILBOX, MONITOR, FULL, QUEUE_FULL, FAILED = (
    "mailbox", "monitor", "full", "queue full", "receive failed"
)
cdef enum ItemKind:
    KIND_MAILBOX, KIND_DATA, KIND_MONITOR
#: marks left in a data item's revents for ``_events``
cdef enum Mark:
    MARK_FULL = 2, MARK_QUEUE_FULL = 4, MARK_FAILED = 8


@cython.auto_pickle(False)
cdef class Poller:
    """zmq_poll over a mailbox (a file descriptor), data sockets with their buffers and monitor
    sockets, receiving from data sockets in C until something needs Python.

    ``watch`` entries are (owner, data socket address, buffer, monitor socket address); the
    owner is what ``wait`` reports events about. Entries change rarely (an endpoint joins or
    leaves); the arrays are rebuilt then. A receive that fails on one socket is reported about
    its owner (FAILED); the others go on.

    Pauses: a round that took messages and found every queue it read empty is followed by a
    pause, so that the next round takes a batch rather than the first message to arrive: each
    round costs both threads a wake-up (capture's, and zmq's I/O thread's write that signals
    it), and at moderate rates those cost more than the messages (a publisher that sends a
    burst a millisecond wakes a loop that does not pause once per burst or more). A pause lasts
    ``longest_pause_seconds``, but never past the ``wait``'s deadline, and never longer than
    it takes each socket read in the round, at the pace measured lately (``Pace``),
    to fill 1/QUEUE_SHARE of its receive queue (``full_run``) or a burst: a fast peer or a
    small ``receiveHighWaterMark`` shortens it, so that a steady peer never fills its queue
    during a pause. A command in the mailbox ends a pause at once. A round cut short (a burst
    at its limit or at the buffer's bound) is followed by the next at once.
    """

    cdef szq_pollitem_t *items
    cdef int *kinds
    cdef Inbox **inboxes
    cdef int count
    cdef list owners          # per item: the owner (None for the mailbox)
    cdef list buffers         # keeps the watched buffers alive while their Inbox is used
    cdef int mailbox
    cdef int64_t longest_pause_ns
    # statistics: poll rounds, pauses and their total length, messages received
    cdef int64_t rounds, pauses, paused_ns, messages

    def __cinit__(self, int mailbox, double longest_pause_seconds):
        self.mailbox = mailbox
        self.longest_pause_ns = <int64_t>(max(longest_pause_seconds, 0.0) * 1e9)
        self.owners = []
        self.buffers = []
        self._build([])

    def __dealloc__(self):
        free(self.items)
        free(self.kinds)
        free(self.inboxes)

    def statistics(self):
        """Poll rounds, pauses (how many, and their total in seconds) and messages received
        so far (for profiles)."""
        return {
            "rounds": self.rounds,
            "pauses": self.pauses,
            "paused_seconds": self.paused_ns / 1e9,
            "messages": self.messages,
        }

    def set_watched(self, list entries not None):
        """Poll the mailbox and these (owner, socket, buffer, monitor) entries from now on."""
        self._build(entries)

    cdef void _build(self, list entries) except *:
        cdef NativeBuffer buffer
        for _, _, buffer, _ in entries:
            if buffer is None:
                raise TypeError("a watched entry's buffer must be a NativeBuffer, not None")
            buffer._check_open()
        cdef int count = 1 + 2 * len(entries)
        cdef szq_pollitem_t *items = <szq_pollitem_t *>malloc(count * sizeof(szq_pollitem_t))
        cdef int *kinds = <int *>malloc(count * sizeof(int))
        cdef Inbox **inboxes = <Inbox **>malloc(count * sizeof(Inbox *))
        if items == NULL or kinds == NULL or inboxes == NULL:
            free(items)
            free(kinds)
            free(inboxes)
            raise MemoryError()
        memset(items, 0, count * sizeof(szq_pollitem_t))
        owners, buffers = [None], []
        items[0].fd = self.mailbox
        items[0].events = SZQ_POLLIN
        kinds[0] = KIND_MAILBOX
        inboxes[0] = NULL
        cdef int i = 1
        for owner, socket, buffer, monitor in entries:
            items[i].socket = <void *><size_t>socket
            items[i].events = SZQ_POLLIN
            kinds[i] = KIND_DATA
            inboxes[i] = buffer.inbox
            items[i + 1].socket = <void *><size_t>monitor
            items[i + 1].events = SZQ_POLLIN
            kinds[i + 1] = KIND_MONITOR
            inboxes[i + 1] = NULL
            owners += [owner, owner]
            buffers.append(buffer)
            i += 2
        free(self.items)
        free(self.kinds)
        free(self.inboxes)
        self.items, self.kinds, self.inboxes, self.count = items, kinds, inboxes, count
        self.owners, self.buffers = owners, buffers

    def wait(self, double seconds):
        """Receive whatever arrives until something needs Python or ``seconds`` pass: a list
        of (kind, owner) with kind MAILBOX (owner None), MONITOR, FULL (the owner's buffer must
        be written), QUEUE_FULL (the owner's receive queue was found full) or FAILED (a receive
        from the owner's socket failed: its buffer's ``take_error`` says how)."""
        require_bound()
        cdef NativeBuffer buffer
        for buffer in self.buffers:
            buffer._check_open()  # handed to Arrow since it was watched: not to be written
        cdef int64_t deadline = szq_clock_ns(CLOCK_MONOTONIC) + <int64_t>(
            min(max(seconds, 0.0), MAX_WAIT_SECONDS) * 1e9
        )
        cdef int ready = 0
        cdef int failed = 0
        with nogil:
            ready = self._run(deadline, &failed)
        if failed:
            import zmq
            raise zmq.ZMQError(failed)
        if ready <= 0:
            return []
        return self._events()

    cdef int _run(self, int64_t deadline, int *failed) noexcept nogil:
        """Poll and receive until an item needs Python (its revents, or the marks above, are
        left set: the number of such items), the deadline passes (0) or zmq_poll fails (-1
        with ``failed``; EINTR ends the wait with 0); pause between rounds (see the class)."""
        cdef int64_t now, timeout_ms, pause
        cdef int i, count, received, attention
        cdef bint emptied, queue_full, all_emptied
        cdef Inbox *inbox
        while True:
            now = szq_clock_ns(CLOCK_MONOTONIC)
            timeout_ms = (deadline - now + 999999) // 1000000 if deadline > now else 0
            if szq.poll(self.items, self.count, <long>timeout_ms) < 0:
                failed[0] = szq.errno_()
                if failed[0] == EINTR:
                    failed[0] = 0
                    return 0
                return -1
            received = 0
            attention = 0
            all_emptied = True
            pause = self.longest_pause_ns
            self.rounds += 1
            for i in range(self.count):
                if not self.items[i].revents:
                    continue
                if self.kinds[i] != KIND_DATA:
                    attention += 1
                    continue
                inbox = self.inboxes[i]
                count = _burst(inbox, self.items[i].socket, &emptied, &queue_full)
                received += count
                self.messages += count
                all_emptied = all_emptied and emptied
                if count:
                    pause = min(pause, _time_to_fill(inbox))
                self.items[i].revents = 0
                if inbox.error:
                    self.items[i].revents |= MARK_FAILED
                if _full(inbox):
                    self.items[i].revents |= MARK_FULL
                if queue_full:
                    self.items[i].revents |= MARK_QUEUE_FULL
                if self.items[i].revents:
                    attention += 1
            if attention:
                return attention
            now = szq_clock_ns(CLOCK_MONOTONIC)
            if now >= deadline:
                return 0
            pause = min(pause, deadline - now)
            if received and all_emptied and pause > 0:
                self.pauses += 1
                self.paused_ns += pause
                szq_wait_readable_ns(self.mailbox, pause)

    cdef list _events(self):
        events = []
        cdef int i
        cdef short revents
        for i in range(self.count):
            revents = self.items[i].revents
            if not revents:
                continue
            if self.kinds[i] == KIND_MAILBOX:
                events.append((MAILBOX, None))
            elif self.kinds[i] == KIND_MONITOR:
                events.append((MONITOR, self.owners[i]))
            else:
                if revents & MARK_FAILED:
                    events.append((FAILED, self.owners[i]))
                if revents & MARK_FULL:
                    events.append((FULL, self.owners[i]))
                if revents & MARK_QUEUE_FULL:
                    events.append((QUEUE_FULL, self.owners[i]))
        return events
