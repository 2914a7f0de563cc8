"""What the package logged, for tests and benchmarks that check it."""

import contextlib
import logging
from collections.abc import Iterator

from spark_zmq.log import logger


class _Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def logged_warnings() -> Iterator[list[str]]:
    """The warnings the package logs in this process while the block runs, as a list of lines:
    for tests and benchmarks that check what was logged (whether or not logging propagates)."""
    handler = _Collected()
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
