"""The compiled modules, and the one place that loads them and chooses between them and the
Python paths.

Two extension modules (Cython) do the per-message work in C without Python's lock: ``receive``
(capture's poller and buffers, behind ``capture.receiving.NativeCore``; the buffers are the
extension module ``buffer``'s, which ``receive`` imports) and ``send`` (a writer's
``send_rows``, behind ``spark.sending.ColumnSender``). Both call libzmq through one binding, the
extension module ``libzmq`` (declared in ``libzmq.pxd``): libzmq's functions are never linked
but taken, by ``bind``, from the library that pyzmq's own extension uses, so that pyzmq's
sockets are only ever handled by pyzmq's libzmq, and the build needs neither zmq.h nor a libzmq.

Which one runs, in each direction (``RECEIVE``, ``SEND``): its option (``captureCore``,
``sendCore``), else its environment variable (``SPARK_ZMQ_CAPTURE_CORE``,
``SPARK_ZMQ_SEND_CORE``), else ``auto``: the compiled module when it loads, else the Python
path, said once per process in the log; ``native``: the compiled module or
``NativeUnavailable``, with the reason; ``python``: the Python path. A value that is none of
these is an ``OptionError`` naming the option or the variable.
"""

from __future__ import annotations

import errno
import functools
import importlib
import os
import sys
from dataclasses import dataclass
from types import ModuleType

import zmq
import zmq.backend

from spark_zmq.errors import OptionError, SparkZmqError
from spark_zmq.log import logger

CORES = ("auto", "native", "python")


@dataclass(frozen=True)
class Direction:
    """A direction the compiled modules serve (capture receiving, a writer sending): its module,
    and how its choice is named to the user."""

    module: str  # the extension module
    option: str  # the option that chooses
    variable: str  # the environment variable that chooses when the option is not set
    compiled: str  # the compiled path in messages
    fallback: str  # what runs instead, in the log line that says so


RECEIVE = Direction(
    module="spark_zmq.native.receive",
    option="captureCore",
    variable="SPARK_ZMQ_CAPTURE_CORE",
    compiled="the compiled core",
    fallback="capture runs its Python receive loop",
)
SEND = Direction(
    module="spark_zmq.native.send",
    option="sendCore",
    variable="SPARK_ZMQ_SEND_CORE",
    compiled="the compiled send loop",
    fallback="writers send through their Python path",
)
DIRECTIONS = (RECEIVE, SEND)


class NativeUnavailable(SparkZmqError, ImportError):
    """A compiled module does not load, or cannot be bound to the libzmq that pyzmq loaded."""


def choose(direction: Direction, choice: str | None = None) -> ModuleType | None:
    """The compiled module that ``choice`` (else ``direction.variable``, else ``auto``) asks for,
    bound and ready; None for the Python path."""
    source = direction.option if choice else direction.variable
    wanted = (choice or os.environ.get(direction.variable) or "auto").strip().lower()
    if wanted not in CORES:
        raise OptionError(
            f"{source}={wanted!r} is not one of {', '.join(CORES)} (auto: {direction.compiled} "
            f"when it loads, else the Python path)"
        )
    if wanted == "python":
        return None
    module, reason = _load(direction.module)
    if module is not None:
        return module
    if wanted == "native":
        raise NativeUnavailable(f"{source}=native: {direction.compiled} is not available: {reason}")
    _log_fallback(direction, reason)
    return None


def load(direction: Direction) -> ModuleType:
    """``direction``'s compiled module, bound to pyzmq's libzmq (NativeUnavailable, with the reason,
    where it cannot be): for tests and tools that need it whatever the choice."""
    module, reason = _load(direction.module)
    if module is None:
        raise NativeUnavailable(reason)
    return module


def bind() -> str:
    """Bind the compiled modules' libzmq binding to the libzmq that pyzmq loaded, once per
    process: that library's path (NativeUnavailable, with the reason, where it cannot be)."""
    library, reason = _bind()
    if library is None:
        raise NativeUnavailable(reason)
    return library


def status() -> str:
    """One line: the compiled modules and the libzmq they call, or why one is not available."""
    for direction in DIRECTIONS:
        module, reason = _load(direction.module)
        if module is None:
            return f"not available: {reason}"
    return f"available, calling {bind()}"


@functools.cache
def _load(name: str) -> tuple[ModuleType | None, str]:
    """Import the compiled module ``name`` and bind the binding, once per process: (module,
    "") or (None, why not)."""
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        return None, f"{name} does not import: {exc}"
    library, reason = _bind()
    if library is None:
        return None, reason
    return module, ""


@functools.cache
def _bind() -> tuple[str | None, str]:
    """(the path of the libzmq bound, "") or (None, why it cannot be)."""
    try:
        from spark_zmq.native import libzmq
    except ImportError as exc:
        return None, f"spark_zmq.native.libzmq does not import: {exc}"
    if zmq.zmq_version_info() < (4, 1):
        return None, f"libzmq {zmq.zmq_version()} is older than 4.1"
    backend = sys.modules.get(zmq.backend.Socket.__module__)
    extension = getattr(backend, "__file__", None) or ""
    if not extension.endswith(".so"):
        return None, f"pyzmq's backend {backend!r} is not a compiled extension"
    constants: dict[str, int] = {
        "DONTWAIT": zmq.DONTWAIT,
        "SNDMORE": zmq.SNDMORE,
        "POLLIN": zmq.POLLIN,
        "FD": zmq.FD,
        "EVENTS": zmq.EVENTS,
        "ETERM": zmq.ETERM,
        "EAGAIN": zmq.EAGAIN,
        "EINTR": errno.EINTR,
    }
    try:
        library = libzmq.bind(extension, constants)
    except ImportError as exc:
        return None, str(exc)
    logger.debug("compiled modules bound to %s (through %s)", library, extension)
    return library, ""


@functools.cache
def _log_fallback(direction: Direction, reason: str) -> None:
    logger.warning(
        "%s: %s is not available (%s). Set %s=python (or the option %s) to choose it and "
        "silence this line, or reinstall spark_zmq with a C compiler at hand",
        direction.fallback,
        direction.compiled,
        reason,
        direction.variable,
        direction.option,
    )
