"""Time as options give it (seconds), as zmq takes it (whole milliseconds) and as gap rows and
logs show it (ISO 8601 UTC)."""

from __future__ import annotations

import math
import time


def milliseconds(seconds: float) -> int:
    """A wait of ``seconds`` as zmq's poll takes it: whole milliseconds, rounded up, so that a
    short positive wait does not become a poll that returns at once."""
    return max(0, math.ceil(seconds * 1000))


def utc_text(ns: int) -> str:
    """A time in ns since the epoch as ISO 8601 UTC with milliseconds, as gap rows show it."""
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns / 1e9))
        + f".{ns // 1_000_000 % 1000:03d}Z"
    )
