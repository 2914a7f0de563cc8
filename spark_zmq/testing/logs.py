"""What the package logged, for tests and benchmarks that check it."""

import contextlib
import logging
from collections.abc import Iterator

from spark_zmq.log import logger


class _Collected(logging.Handler):
    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def logged(level: int = logging.INFO) -> Iterator[list[str]]:
    """The lines the package logs at ``level`` or above in this process while the block runs,
    as a list: for tests and benchmarks that check what was logged (whether or not logging
    propagates, and whatever level the package's logger has)."""
    handler = _Collected(level)
    before = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > level:
        logger.setLevel(level)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


def logged_warnings() -> contextlib.AbstractContextManager[list[str]]:
    """The warnings the package logs in this process while the block runs (``logged``)."""
    return logged(logging.WARNING)
