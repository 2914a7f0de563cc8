"""The package's logger: one line per event that matters (endpoint joined/left, gap, reconnect).

Spark runs our code in Python worker processes whose stderr ends up in the driver's or the
executor's log; those processes configure no logging, so we attach a stderr handler once unless
the application configured the ``spark_zmq`` logger itself. ``SPARK_ZMQ_LOG_LEVEL`` sets the level.
"""

import contextlib
import logging
import os
import sys
from typing import Iterator

logger = logging.getLogger("spark_zmq")

if not logger.handlers:
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(asctime)s spark_zmq %(levelname)s %(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(os.environ.get("SPARK_ZMQ_LOG_LEVEL", "INFO").upper())
    logger.propagate = False


class _Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def logged_warnings() -> Iterator[list[str]]:
    """The warnings this logger writes while the block runs, as a list of lines: for tests and
    benchmarks that check what was logged (the logger does not propagate, so pytest's caplog does
    not see them)."""
    handler = _Collected()
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
