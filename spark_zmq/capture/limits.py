"""What capture needs of its process to read many endpoints: zmq sockets and file descriptors.

Each endpoint costs capture three zmq sockets (its own, and the pair of its monitor) and about
five file descriptors (each socket's mailbox, its TCP connection, and its partition's
appended-segments file, which a capture on local storage keeps open: ``spool.files.KeptOpen``).
zmq allows 1,023 sockets per context by default, which is 341 endpoints, and many systems give
a process a soft limit of 1,024 descriptors (about 200 endpoints) under a far higher hard limit,
while ``maxEndpoints`` lets a query read 1,000. So capture's context allows as many sockets as
zmq can poll, and capture raises its process's soft descriptor limit to the hard one, as the JVM
does for itself (``-XX:+MaxFDLimit``). Where the hard limit is still too low, the endpoints
beyond it are refused before zmq runs out (``no_room_for_endpoint``), each alone with a message
that names the limit and how to raise it.
"""

from __future__ import annotations

import os
import resource

import zmq

from spark_zmq.log import logger

#: zmq sockets and file descriptors capture takes per endpoint (see the module doc)
SOCKETS_PER_ENDPOINT = 3
FILES_PER_ENDPOINT = 5
#: the soft descriptor limit aimed at when the hard one is unlimited
UNLIMITED_TARGET = 1 << 20
#: descriptors an endpoint may not take: the spool's files, the spool server, discovery
RESERVED_FILES = 64


def capture_context(thread_prefix: int) -> zmq.Context:
    """A zmq context for capture's sockets: as many as zmq can poll (``ZMQ_SOCKET_LIMIT``),
    with the process's descriptor limit raised to match (``raise_open_files_limit``). Its
    threads are named ``thread_prefix``/ZMQbg/... (``stats``: capture's CPU is theirs too)."""
    raise_open_files_limit()
    context = zmq.Context()
    context.set(zmq.MAX_SOCKETS, context.get(zmq.SOCKET_LIMIT))
    try:
        context.set(zmq.THREAD_NAME_PREFIX, thread_prefix)
    except (zmq.ZMQError, AttributeError):  # a libzmq before 4.3: capture's CPU is its thread's
        pass
    return context


def raise_open_files_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit, once logged; the soft
    limit now. A limit that cannot be raised is left as it is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            logger.info("capture: the open-file limit stays %d (%s)", soft, exc)
            return soft
        logger.info("capture: open-file limit raised from %d to %d", soft, target)
        return target
    return soft


def no_room_for_endpoint() -> str | None:
    """Why this process cannot open one more endpoint's sockets without running out of file
    descriptors (then zmq fails, in places where it aborts the process), else None. Capture
    checks before it opens an endpoint, and refuses that endpoint alone with this text."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc: zmq's own error will have to do
        return None
    if used + FILES_PER_ENDPOINT + RESERVED_FILES <= soft:
        return None
    return (
        f"this process has {used} of its limit of {soft} open files in use and capture takes "
        f"about {FILES_PER_ENDPOINT} an endpoint (keeping {RESERVED_FILES} for the spool): "
        f"raise the hard limit of open files of the process that captures (ulimit -Hn, "
        f"LimitNOFILE= in a systemd unit, the container's nofile) or lower maxEndpoints"
    )
