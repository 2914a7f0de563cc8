# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The benchmarks' paced publisher (``send_sequence``): a send loop in C without the GIL, so
that the publisher is not the first to give out. A development tool, not part of the wheel:
``scripts/setup.sh`` compiles it in place (benchmarks/native_publisher*.so) against the
package's libzmq binding (``spark_zmq/native/libzmq.pxd``), which importing this module binds
to pyzmq's libzmq (``spark_zmq.native.bind``: NativeUnavailable where it cannot be).
"""

from libc.errno cimport EAGAIN
from libc.stdint cimport int64_t
from libc.string cimport memcpy

from spark_zmq.native.libzmq cimport (
    CLOCK_MONOTONIC,
    CLOCK_REALTIME,
    SZQ_DONTWAIT,
    SZQ_SNDMORE,
    api,
    require_bound,
    szq_api_t,
    szq_clock_ns,
    szq_msg_t,
    szq_sleep_ns,
)

from spark_zmq.native import bind

bind()

#: libzmq's functions (filled by ``bind`` above)
cdef szq_api_t *szq = api()


cdef inline void _put_big_endian(unsigned char *at, int64_t value) noexcept nogil:
    cdef int i
    for i in range(8):
        at[i] = <unsigned char>((<unsigned long long>value) >> (56 - 8 * i))


def send_sequence(size_t socket, bytes topic, bytes body, int64_t first, int64_t count,
                  double patience=0.0):
    """Send ``count`` two-frame messages (``topic``, ``body``) on the socket at address
    ``socket`` without the GIL, each body starting with its sequence number (``first`` on)
    and its send time (ns since the epoch), both 8-byte big-endian. A message that zmq cannot
    queue (EAGAIN: the high-water mark, with XPUB_NODROP) is tried again for up to
    ``patience`` seconds (the publisher's own I/O thread may simply not have run yet), then
    dropped and counted: the number dropped. The benchmarks' publisher, so that it is not the
    first to give out."""
    require_bound()
    if len(body) < 16:
        raise ValueError("body must have room for the 16-byte head")
    cdef const char *topic_data = topic
    cdef const char *body_data = body
    cdef size_t topic_size = len(topic), body_size = len(body)
    cdef int64_t i, dropped = 0
    cdef int64_t patience_ns = <int64_t>(patience * 1e9), give_up
    cdef int failed = 0
    cdef szq_msg_t message
    cdef unsigned char *head
    with nogil:
        for i in range(count):
            szq.msg_init_size(&message, topic_size)
            memcpy(szq.msg_data(&message), topic_data, topic_size)
            give_up = szq_clock_ns(CLOCK_MONOTONIC) + patience_ns
            while szq.msg_send(&message, <void *>socket, SZQ_SNDMORE | SZQ_DONTWAIT) < 0:
                failed = szq.errno_()
                if failed != EAGAIN or szq_clock_ns(CLOCK_MONOTONIC) >= give_up:
                    break
                failed = 0
                szq_sleep_ns(50000)
            if failed:
                szq.msg_close(&message)
                if failed != EAGAIN:
                    break
                failed = 0
                dropped += 1
                continue
            szq.msg_init_size(&message, body_size)
            head = <unsigned char *>szq.msg_data(&message)
            memcpy(head, body_data, body_size)
            _put_big_endian(head, first + i)
            _put_big_endian(head + 8, szq_clock_ns(CLOCK_REALTIME))
            if szq.msg_send(&message, <void *>socket, SZQ_DONTWAIT) < 0:
                failed = szq.errno_()
                szq.msg_close(&message)
                break
    if failed:
        import zmq
        raise zmq.ZMQError(failed)
    return dropped
