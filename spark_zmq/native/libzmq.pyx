# cython: language_level=3
"""The libzmq binding of the compiled modules: one table of libzmq's functions, looked up at
run time in the library that pyzmq's own extension module uses (``bind``), shared with
``receive``, ``send`` and the benchmarks' publisher through ``libzmq.pxd`` (``api()``).

libzmq's functions are never linked. A socket handle made by one copy of libzmq must only ever
be used with that copy; pyzmq wheels bundle their own, and a system libzmq may be loaded in the
same process too. The dynamic linker bound pyzmq's extension to the first definition in the
process's global scope, else in the extension's own dependencies (``dlsym`` on its handle
searches those). So: if the global scope defines no libzmq function, or the same ones, the
extension's dependencies are the answer; if it defines others (a libzmq loaded with global
symbols), which copy pyzmq bound to depends on the order things were loaded in, and ``bind``
refuses rather than guess (``spark_zmq.native`` then takes the Python paths under ``auto``).

Invariant: the table is filled once, whole, before ``require_bound()`` lets anything call it.
"""

from libc.errno cimport EAGAIN, EINTR


cdef extern from *:
    """
    #include <dlfcn.h>

    /* the file that holds the code at address, or NULL */
    static const char *szq_file_of(void *address) {
        Dl_info info;
        if (!dladdr(address, &info)) return NULL;
        return info.dli_fname;
    }
    """
    const char *szq_file_of(void *address)
    void *RTLD_DEFAULT
    void *dlopen(const char *path, int flags)
    void *dlsym(void *handle, const char *name)
    char *dlerror()
    int RTLD_NOW, RTLD_NOLOAD

#: the libzmq functions ``bind`` looks up, in the order of ``szq_api_t``'s fields
FUNCTIONS = (
    "zmq_msg_init", "zmq_msg_init_size", "zmq_msg_recv", "zmq_msg_send", "zmq_msg_close",
    "zmq_msg_data", "zmq_msg_size", "zmq_msg_more", "zmq_errno", "zmq_getsockopt",
)

cdef szq_api_t _api
cdef bint _bound = False
cdef str _library = None


cdef szq_api_t *api() noexcept nogil:
    """The table of libzmq's functions (empty until ``bind``: see ``require_bound``)."""
    return &_api


cdef int require_bound() except -1:
    """RuntimeError unless ``bind`` filled the table: call it before calling libzmq."""
    if not _bound:
        raise RuntimeError(
            "spark_zmq.native.libzmq: bind() was not called (spark_zmq.native.load binds it)"
        )
    return 0


def bind(str extension_path, dict constants):
    """Take libzmq's functions from the library that pyzmq's extension at ``extension_path``
    uses (it must already be loaded): the path of that library. ``constants`` are pyzmq's
    values of the constants the compiled modules have built in; any difference is an
    ImportError."""
    global _api, _bound, _library
    expected = {"DONTWAIT": SZQ_DONTWAIT, "SNDMORE": SZQ_SNDMORE, "POLLIN": SZQ_POLLIN,
                "FD": SZQ_FD, "EVENTS": SZQ_EVENTS, "ETERM": SZQ_ETERM, "EAGAIN": EAGAIN,
                "EINTR": EINTR}
    differ = {k: (v, constants.get(k)) for k, v in expected.items() if constants.get(k) != v}
    if differ:
        raise ImportError(f"libzmq constants differ from the compiled core's: {differ}")
    handle = dlopen(extension_path.encode(), RTLD_NOW | RTLD_NOLOAD)
    if handle == NULL:
        raise ImportError(f"pyzmq's extension {extension_path} is not loaded: {_dl_error()}")
    cdef szq_api_t found_api
    cdef void **slots = <void **>&found_api
    cdef void *found
    cdef void *global_one
    for i, name in enumerate(FUNCTIONS):
        found = dlsym(handle, name.encode())
        if found == NULL:
            raise ImportError(f"{name} not found through {extension_path}: {_dl_error()}")
        global_one = dlsym(RTLD_DEFAULT, name.encode())
        if global_one != NULL and global_one != found:
            raise ImportError(
                f"two copies of libzmq are loaded: {_file_of(found)} (pyzmq's) and "
                f"{_file_of(global_one)}, loaded with global symbols; which one pyzmq's "
                f"sockets belong to depends on the order they were loaded in"
            )
        slots[i] = found
    _api = found_api  # whole, and only once every function was found
    _library = _file_of(<void *>_api.msg_recv)
    _bound = True
    return _library


cdef str _file_of(void *address):
    import os

    cdef const char *path = szq_file_of(address)
    return os.path.realpath(path.decode()) if path != NULL else "?"


cdef str _dl_error():
    cdef char *text = dlerror()
    return text.decode() if text != NULL else "no detail"


def library_path():
    """The file of the libzmq whose functions the compiled modules call (None before
    ``bind``)."""
    return _library
