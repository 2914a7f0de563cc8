# cython: language_level=3
# The libzmq binding that the compiled modules share (``receive``, ``buffer``, ``send``, and the
# benchmarks' publisher), with the few C helpers they have in common.
#
# ``libzmq.pyx`` holds the one table of libzmq's functions (``szq_api_t``), filled by its
# ``bind`` from the library that pyzmq loaded; a module that cimports this file reaches the table
# through ``api()`` (a pointer: the table is filled after the module was imported) and checks
# that it was filled with ``require_bound()`` before it calls libzmq. The ABI facts (the 64-byte
# ``zmq_msg_t``, the constants) are those of libzmq >= 4.1; ``bind`` checks the constants against
# pyzmq's. ``szq_pollitem_t`` is laid out as ``zmq_pollitem_t`` but only the receive core's
# poller reads it (its items: a socket or the mailbox's fd, and what is marked for Python);
# libzmq is not given it.

from libc.stdint cimport int64_t


cdef extern from *:
    """
    #include <limits.h>
    #include <poll.h>
    #include <time.h>

    /* libzmq >= 4.1 ABI: a message is 64 bytes aligned on a pointer (zmq.h) */
    typedef struct { unsigned char _[64]; } __attribute__((aligned(sizeof(void *)))) szq_msg_t;
    typedef struct { void *socket; int fd; short events; short revents; } szq_pollitem_t;

    typedef struct {
        int (*msg_init)(szq_msg_t *);
        int (*msg_init_size)(szq_msg_t *, size_t);
        int (*msg_recv)(szq_msg_t *, void *, int);
        int (*msg_send)(szq_msg_t *, void *, int);
        int (*msg_close)(szq_msg_t *);
        void *(*msg_data)(szq_msg_t *);
        size_t (*msg_size)(const szq_msg_t *);
        int (*msg_more)(const szq_msg_t *);
        int (*errno_)(void);
        int (*getsockopt)(void *, int, void *, size_t *);
    } szq_api_t;

    #define SZQ_DONTWAIT 1
    #define SZQ_SNDMORE 2
    #define SZQ_POLLIN 1
    #define SZQ_FD 14
    #define SZQ_EVENTS 15
    #define SZQ_ETERM (156384712 + 53)
    #define SZQ_INT32_MAX INT_MAX

    static inline int64_t szq_clock_ns(clockid_t clock) {
        struct timespec ts;
        clock_gettime(clock, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    }

    static inline void szq_sleep_ns(int64_t ns) {
        struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
        nanosleep(&ts, NULL);
    }

    /* wait up to ns for fd to become readable (ppoll: Python.h defines _GNU_SOURCE) */
    static inline void szq_wait_readable_ns(int fd, int64_t ns) {
        struct pollfd item = {fd, POLLIN, 0};
        struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
        ppoll(&item, 1, &ts, NULL);
    }
    """
    ctypedef struct szq_msg_t:
        pass
    ctypedef struct szq_pollitem_t:
        void *socket
        int fd
        short events
        short revents
    ctypedef struct szq_api_t:
        int (*msg_init)(szq_msg_t *) nogil
        int (*msg_init_size)(szq_msg_t *, size_t) nogil
        int (*msg_recv)(szq_msg_t *, void *, int) nogil
        int (*msg_send)(szq_msg_t *, void *, int) nogil
        int (*msg_close)(szq_msg_t *) nogil
        void *(*msg_data)(szq_msg_t *) nogil
        size_t (*msg_size)(const szq_msg_t *) nogil
        int (*msg_more)(const szq_msg_t *) nogil
        int (*errno_)() nogil
        int (*getsockopt)(void *, int, void *, size_t *) nogil
    int SZQ_DONTWAIT, SZQ_SNDMORE, SZQ_POLLIN, SZQ_FD, SZQ_EVENTS, SZQ_ETERM, SZQ_INT32_MAX
    int CLOCK_REALTIME, CLOCK_MONOTONIC
    int64_t szq_clock_ns(int clock) nogil
    void szq_sleep_ns(int64_t ns) nogil
    void szq_wait_readable_ns(int fd, int64_t ns) nogil


cdef szq_api_t *api() noexcept nogil
cdef int require_bound() except -1
