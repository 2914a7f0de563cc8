# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Capture's compiled receive side: poll, receive and buffer messages in C, without the GIL.

Capture's Python loop (``capture.loop``, through ``capture.receiving.NativeCore``) asks a
``Poller`` to wait until something needs Python: a command in the mailbox, a monitor event, a
buffer that must be written, a receive queue found full, or the time the loop asked to be woken
at. Meanwhile, every message that arrives is received here with ``zmq_msg_recv`` and appended
to its connection's ``NativeBuffer`` (``buffer.pyx``, which Python finds here) as Arrow-ready
arrays (``rows.pxd``: row offsets, frame offsets, bytes, receive times), so Python handles one
segment per flush instead of one object per message. libzmq is called through the shared
binding (``libzmq.pxd``), which ``spark_zmq.native`` binds to pyzmq's libzmq before this module
is used.

A message is stored whole or not at all: one over the buffer's bounds of a message (bytes and
parts, ``maxMessageBytes`` and ``maxMessageParts``) is taken from the socket to its last frame
and recorded as a refusal (an empty row in its place, or one more on the refusal row just
before it); a receive that fails in the middle of a message takes the rest of the message from
the socket too, so that what comes next starts at a message boundary. EINTR is retried.
"""

cimport cython
from libc.errno cimport EAGAIN, EEXIST, EINTR, errno
from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset
from posix.unistd cimport close

from spark_zmq.native.buffer cimport NativeBuffer as Buffer
from spark_zmq.native.libzmq cimport (
    CLOCK_MONOTONIC,
    CLOCK_REALTIME,
    SZQ_DONTWAIT,
    SZQ_EVENTS,
    SZQ_FD,
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
from spark_zmq.native.rows cimport (
    Inbox,
    Rows,
    add_frame,
    drop_row,
    end_row,
    footprint,
    inbox_full,
    measure_pace,
    refuse,
    start_row,
)

from spark_zmq.native.buffer import NativeBuffer


cdef extern from "<sys/epoll.h>" nogil:
    ctypedef union epoll_data_t:
        void *ptr
        int fd
        unsigned int u32
    struct epoll_event:
        unsigned int events
        epoll_data_t data
    int epoll_create1(int flags)
    int epoll_ctl(int epfd, int op, int fd, epoll_event *event)
    int epoll_wait(int epfd, epoll_event *events, int maxevents, int timeout)
    int EPOLL_CLOEXEC, EPOLL_CTL_ADD, EPOLLIN

#: what Python finds here: the buffers too (``buffer.pyx``), beside what fills them
__all__ = ["MAILBOX", "MONITOR", "FULL", "QUEUE_FULL", "FAILED", "MAX_WAIT_SECONDS",
           "NativeBuffer", "Poller", "receive"]

#: libzmq's functions (filled by ``libzmq.bind``; ``require_bound`` checks it was called)
cdef szq_api_t *szq = api()


# -- a burst ---------------------------------------------------------------------------------

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
    if start_row(rows, now):
        copying = False
    while True:
        size = szq.msg_size(message)
        parts += 1
        nbytes += <int64_t>size
        if parts > inbox.max_message_parts or nbytes > inbox.max_message_bytes:
            copying = False
        if copying and add_frame(rows, <const char *>szq.msg_data(message), size):
            copying = False  # the buffer could not grow: the rest is only taken
        if not szq.msg_more(message):
            break
        failed = _next_frame(message, socket)
        if failed:
            break
    if copying and not failed:
        end_row(rows)
        return 0
    drop_row(rows)
    if failed:
        return failed
    if parts > inbox.max_message_parts or nbytes > inbox.max_message_bytes:
        if start_row(rows, now) == 0 and refuse(rows, now, nbytes, parts) == 0:
            return 0
    return -1


cdef int _burst(Inbox *inbox, void *socket, bint *emptied, bint *queue_full) noexcept nogil:
    """Take up to ``inbox.burst`` messages waiting on ``socket`` (fewer once the buffer holds
    ``max_bytes``): how many, stored or refused (a failure stops the burst, with
    ``inbox.error`` set). Sets ``emptied`` when the queue was found empty and ``queue_full``
    when the run since it last was reached ``full_run``. A burst that empties the queue dates
    it (``emptied_at``) and measures how far apart the run's messages arrived (they came
    after the queue was last found empty: ``measure_pace``)."""
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
        if failed or footprint(&inbox.rows) >= inbox.max_bytes:
            break
    szq.msg_close(&message)
    inbox.received += count
    inbox.run += count
    queue_full[0] = inbox.run >= inbox.full_run
    if emptied[0]:
        now = szq_clock_ns(CLOCK_MONOTONIC)
        measure_pace(&inbox.pace, now - inbox.emptied_at, inbox.run)
        inbox.run = 0
        inbox.emptied_at = now
    if failed:
        inbox.error = failed
    return count


def receive(Buffer buffer not None, size_t socket):
    """One burst from the socket at address ``socket`` (pyzmq's ``Socket.underlying``) into
    ``buffer``, without the GIL: (messages taken, whether the queue was found full). A failed
    receive does not raise: ``buffer.take_error()`` says it (what it took before stays)."""
    require_bound()
    buffer.check_open()
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
    at its pace (``measure_pace``): ns."""
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


cdef int _epoll_set(szq_pollitem_t *items, int count) except -1:
    """A new epoll set of the mailbox (``items[0].fd``, data 0) and each socket's ``ZMQ_FD``
    (data: the item's index); OSError or ZMQError if one cannot be had."""
    cdef int epoll = epoll_create1(EPOLL_CLOEXEC)
    if epoll < 0:
        raise OSError(errno, "epoll_create1 failed")
    cdef epoll_event event
    cdef int i, fd
    cdef size_t size
    for i in range(count):
        if i == 0:
            fd = items[0].fd
        else:
            size = sizeof(int)
            if szq.getsockopt(items[i].socket, SZQ_FD, &fd, &size) < 0:
                close(epoll)
                import zmq
                raise zmq.ZMQError(szq.errno_())
        memset(&event, 0, sizeof(event))
        event.events = EPOLLIN
        event.data.u32 = i
        if epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event) < 0:
            if errno == EEXIST:  # one socket watched twice: signalled as its first item
                continue
            close(epoll)
            raise OSError(errno, f"epoll_ctl could not add descriptor {fd}")
    return epoll


@cython.auto_pickle(False)
cdef class Poller:
    """Waits on a mailbox (a file descriptor), data sockets with their buffers and monitor
    sockets, receiving from data sockets in C until something needs Python.

    ``watch`` entries are (owner, data socket address, buffer, monitor socket address); the
    owner is what ``wait`` reports events about. Entries change rarely (an endpoint joins or
    leaves); the arrays and the epoll set are rebuilt then. A receive that fails on one socket
    is reported about its owner (FAILED); the others go on.

    Rounds cost what is ready, not what is watched. ``zmq_poll`` asks every socket for its
    events each round (a system call for each idle one), so with 1,000 endpoints a round cost
    2,000 calls. Here an epoll set holds each socket's ``ZMQ_FD``, which libzmq signals when
    the socket has commands to process (a message arrived on an empty queue, say), and a round
    asks ``ZMQ_EVENTS`` only of the sockets whose descriptor was signalled or that were left
    with messages (a burst cut short). Invariant: a socket holding a message it was not asked
    about is signalled or due. ``ZMQ_FD`` is signalled again only after the socket's commands
    were processed, which any call on the socket does. So a socket is due at the next wait
    once Python may have called it: the items reported to Python (it reads a monitor's event,
    writes a full buffer, reopens a failed socket), and an owner's two sockets once Python
    says it ``touch``-ed them (took a burst itself, changed subscriptions). The first wait
    after ``set_watched``, and one after a failed wait, ask every socket. A wait with nothing
    signalled and nothing due costs one ``epoll_wait``, whatever the endpoints.

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

    cdef szq_pollitem_t *items  # per item: the socket (the mailbox: its fd) and revents
    cdef int *kinds
    cdef Inbox **inboxes
    cdef int count
    cdef list owners          # per item: the owner (None for the mailbox)
    cdef list buffers         # keeps the watched buffers alive while their Inbox is used
    cdef int mailbox
    cdef int64_t longest_pause_ns
    cdef int epoll            # the epoll set: the mailbox (data 0) and each socket's ZMQ_FD
    cdef epoll_event *signalled
    cdef int *due             # the items a round asks ZMQ_EVENTS of
    cdef char *queued         # per item: in ``due`` already
    cdef int pending          # the first ``pending`` of ``due`` were left with messages
    cdef bint fresh           # every socket is due at the next wait (new entries, a failure)
    cdef dict data_items      # the index of each owner's data item, by id (its monitor's + 1)
    # statistics: poll rounds, pauses and their total length, messages received
    cdef int64_t rounds, pauses, paused_ns, messages

    def __cinit__(self, int mailbox, double longest_pause_seconds):
        self.mailbox = mailbox
        self.epoll = -1
        self.longest_pause_ns = <int64_t>(max(longest_pause_seconds, 0.0) * 1e9)
        self.owners = []
        self.buffers = []
        self._build([])

    def __dealloc__(self):
        self._release()

    cdef void _release(self) noexcept:
        free(self.items)
        free(self.kinds)
        free(self.inboxes)
        free(self.signalled)
        free(self.due)
        free(self.queued)
        if self.epoll >= 0:
            close(self.epoll)

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
        require_bound()
        self._build(entries)

    def set_longest_pause(self, double seconds):
        """The longest pause after a round from now on (see the class): a round costs more
        the more sockets it polls, so capture lengthens it with the endpoints it watches."""
        self.longest_pause_ns = <int64_t>(max(seconds, 0.0) * 1e9)

    cdef void _build(self, list entries) except *:
        cdef Buffer buffer
        for _, _, buffer, _ in entries:
            if buffer is None:
                raise TypeError("a watched entry's buffer must be a NativeBuffer, not None")
            buffer.check_open()
        cdef int count = 1 + 2 * len(entries)
        cdef szq_pollitem_t *items = <szq_pollitem_t *>malloc(count * sizeof(szq_pollitem_t))
        cdef int *kinds = <int *>malloc(count * sizeof(int))
        cdef Inbox **inboxes = <Inbox **>malloc(count * sizeof(Inbox *))
        cdef epoll_event *signalled = <epoll_event *>malloc(count * sizeof(epoll_event))
        cdef int *due = <int *>malloc(count * sizeof(int))
        cdef char *queued = <char *>malloc(count)
        cdef int i = 1
        cdef int epoll = -1
        try:
            if (items == NULL or kinds == NULL or inboxes == NULL or signalled == NULL
                    or due == NULL or queued == NULL):
                raise MemoryError()
            memset(items, 0, count * sizeof(szq_pollitem_t))
            memset(queued, 0, count)
            owners, buffers = [None], []
            items[0].fd = self.mailbox
            kinds[0] = KIND_MAILBOX
            inboxes[0] = NULL
            for owner, socket, buffer, monitor in entries:
                items[i].socket = <void *><size_t>socket
                kinds[i] = KIND_DATA
                inboxes[i] = buffer.inbox
                items[i + 1].socket = <void *><size_t>monitor
                kinds[i + 1] = KIND_MONITOR
                inboxes[i + 1] = NULL
                owners += [owner, owner]
                buffers.append(buffer)
                i += 2
            epoll = _epoll_set(items, count)
        except BaseException:
            free(items)
            free(kinds)
            free(inboxes)
            free(signalled)
            free(due)
            free(queued)
            raise
        self._release()
        self.items, self.kinds, self.inboxes, self.count = items, kinds, inboxes, count
        self.signalled, self.due, self.queued, self.pending = signalled, due, queued, 0
        self.fresh = True
        self.data_items = {id(owners[i]): i for i in range(1, count, 2)}
        self.epoll = epoll
        self.owners, self.buffers = owners, buffers

    def wait(self, double seconds):
        """Receive whatever arrives until something needs Python or ``seconds`` pass: a list
        of (kind, owner) with kind MAILBOX (owner None), MONITOR, FULL (the owner's buffer must
        be written), QUEUE_FULL (the owner's receive queue was found full) or FAILED (a receive
        from the owner's socket failed: its buffer's ``take_error`` says how)."""
        require_bound()
        cdef Buffer buffer
        for buffer in self.buffers:
            buffer.check_open()  # handed to Arrow since it was watched: not to be written
        cdef int64_t deadline = szq_clock_ns(CLOCK_MONOTONIC) + <int64_t>(
            min(max(seconds, 0.0), MAX_WAIT_SECONDS) * 1e9
        )
        cdef int ready = 0
        cdef int failed = 0
        with nogil:
            ready = self._run(deadline, &failed)
        if failed:
            self.fresh = True  # the round's items not walked are no longer due: ask all
            import zmq
            raise zmq.ZMQError(failed)
        if ready <= 0:
            return []
        return self._events()

    cdef int _run(self, int64_t deadline, int *failed) noexcept nogil:
        """Receive until an item needs Python (its revents, or the marks above, are left set:
        the number of such items), the deadline passes (0) or a call fails (-1 with
        ``failed``; EINTR ends the wait with 0); pause between rounds (see the class)."""
        cdef int64_t now, pause
        cdef int timeout_ms, signalled, i, k, due, count, received, attention, events
        cdef bint emptied, queue_full, all_emptied, mailbox
        cdef size_t size
        cdef Inbox *inbox
        if self.fresh:  # (see the class)
            self._due_all()
            self.fresh = False
        while True:
            now = szq_clock_ns(CLOCK_MONOTONIC)
            timeout_ms = <int>min((deadline - now + 999999) // 1000000, SZQ_INT32_MAX) if (
                deadline > now and not self.pending) else 0
            signalled = epoll_wait(self.epoll, self.signalled, self.count, timeout_ms)
            if signalled < 0:
                failed[0] = errno
                if failed[0] == EINTR:
                    failed[0] = 0
                    return 0
                return -1
            mailbox = False
            due = self.pending
            for k in range(signalled):
                i = self.signalled[k].data.u32
                if i == 0:
                    mailbox = True
                elif not self.queued[i]:
                    self.queued[i] = 1
                    self.due[due] = i
                    due += 1
            received = 0
            attention = 0
            all_emptied = True
            pause = self.longest_pause_ns
            self.rounds += 1
            self.pending = 0
            for k in range(due):
                i = self.due[k]
                self.queued[i] = 0
                events = 0
                size = sizeof(int)
                if szq.getsockopt(self.items[i].socket, SZQ_EVENTS, &events, &size) < 0:
                    failed[0] = szq.errno_()
                    if failed[0] == EINTR:  # asked again in the next round
                        failed[0] = 0
                        self._keep(i)
                        all_emptied = False
                        continue
                    return -1
                if not events & SZQ_POLLIN:
                    continue
                if self.kinds[i] == KIND_MONITOR:
                    self.items[i].revents = SZQ_POLLIN
                    attention += 1
                    continue
                inbox = self.inboxes[i]
                count = _burst(inbox, self.items[i].socket, &emptied, &queue_full)
                received += count
                self.messages += count
                all_emptied = all_emptied and emptied
                if count:
                    pause = min(pause, _time_to_fill(inbox))
                if inbox.error:
                    self.items[i].revents |= MARK_FAILED
                if inbox_full(inbox):
                    self.items[i].revents |= MARK_FULL
                if queue_full:
                    self.items[i].revents |= MARK_QUEUE_FULL
                if self.items[i].revents:
                    attention += 1
                elif not emptied:
                    self._keep(i)
            if mailbox:
                self.items[0].revents = SZQ_POLLIN
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

    def touch(self, owner):
        """Python called ``owner``'s sockets (a receive, a subscription): both are asked at
        the next wait, whether their descriptor is signalled or not (see the class). An owner
        not watched is ignored."""
        cdef int i = self.data_items.get(id(owner), 0)
        if i and self.owners[i] is owner:
            self._due(i)
            self._due(i + 1)

    cdef inline void _due(self, int i) noexcept nogil:
        """Item ``i`` is asked at the next round, if it is not due already."""
        if not self.queued[i]:
            self._keep(i)

    cdef inline void _keep(self, int i) noexcept nogil:
        """Item ``i`` is asked again next round, without waiting for its descriptor. Within a
        round walking ``due``, at most one keeps an item per item walked, so the kept ones
        overwrite only entries already walked; between waits ``_due`` adds each item once."""
        self.queued[i] = 1
        self.due[self.pending] = i
        self.pending += 1

    cdef void _due_all(self) noexcept nogil:
        """Every socket is due, and no item is marked for Python."""
        cdef int i
        self.pending = 0
        self.items[0].revents = 0
        for i in range(1, self.count):
            self.items[i].revents = 0
            self._keep(i)

    cdef list _events(self):
        """What the last round left marked for Python, cleared as it is read."""
        events = []
        cdef int i
        cdef short revents
        for i in range(self.count):
            revents = self.items[i].revents
            if not revents:
                continue
            self.items[i].revents = 0
            if self.kinds[i] == KIND_MAILBOX:
                events.append((MAILBOX, None))
                continue
            self._due(i)  # Python acts on it (see the class)
            if self.kinds[i] == KIND_MONITOR:
                events.append((MONITOR, self.owners[i]))
            else:
                if revents & MARK_FAILED:
                    events.append((FAILED, self.owners[i]))
                if revents & MARK_FULL:
                    events.append((FULL, self.owners[i]))
                if revents & MARK_QUEUE_FULL:
                    events.append((QUEUE_FULL, self.owners[i]))
        return events
