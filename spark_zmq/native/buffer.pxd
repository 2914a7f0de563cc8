# cython: language_level=3
# ``NativeBuffer`` as the modules that reach into it see it (``receive.pyx``: ``receive`` and
# the ``Poller`` receive into its ``inbox``); defined in ``buffer.pyx``.

from spark_zmq.native.rows cimport Inbox


cdef class NativeBuffer:
    cdef Inbox *inbox
    cdef public dict faults  # fault row texts by row index, rare
    cdef readonly object refusals
    cdef bint taken_over     # the arrays went to Arrow: nothing more may be added
    cdef tuple handed        # the _Memory objects that own them since: reading stays valid

    cdef void _settle_refusals(self) except *
    cdef void check_open(self) except *
