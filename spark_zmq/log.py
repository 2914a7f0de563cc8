"""The package's logger: one line per event that matters (endpoint joined/left, gap, reconnect).

A library configures no logging: records go to ``logging.getLogger("spark_zmq")`` (and its
children) and propagate, so an application's configuration decides where they go. Programs
configure it: the CLI, the jobs and the capture processes call ``configure_logging``.

Spark starts processes of its own that run our code and that no application configures: the
streaming source's runner on the driver host and the Python workers on executors. Their stderr
is the Spark log, so each entry point there calls ``configure_spark_worker_logging``, which
attaches a stderr handler only when the process has configured no logging at all.
``SPARK_ZMQ_LOG_LEVEL`` (default INFO) sets the level wherever we attach the handler.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

logger = logging.getLogger("spark_zmq")
logger.addHandler(logging.NullHandler())

#: how our lines look where we attach the handler (Spark's own log lines show the same fields)
FORMAT = "%(asctime)s spark_zmq %(levelname)s %(message)s"


def configure_logging(level: str | None = None, default: str = "INFO") -> None:
    """For a program that configures no other logging: the ``spark_zmq`` records at ``level``
    (else ``SPARK_ZMQ_LOG_LEVEL``, else ``default``) go to stderr. Idempotent."""
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
    logger.setLevel((level or os.environ.get("SPARK_ZMQ_LOG_LEVEL") or default).upper())


def configure_spark_worker_logging() -> None:
    """In a process that Spark started: ``configure_logging`` unless logging is configured."""
    if not logging.getLogger().handlers and not _configured(logger):
        configure_logging()


def _configured(log: logging.Logger) -> bool:
    return any(not isinstance(h, logging.NullHandler) for h in log.handlers)


class _Stderr(logging.StreamHandler):
    """The handler ``configure_logging`` attaches: writes to whatever ``sys.stderr`` is when a
    record comes (a program or a test may replace it), so a second call finds it."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass  # always sys.stderr
