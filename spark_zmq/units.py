"""Time as options give it (seconds) and as zmq takes it (whole milliseconds)."""

from __future__ import annotations

import math


def milliseconds(seconds: float) -> int:
    """A wait of ``seconds`` as zmq's poll takes it: whole milliseconds, rounded up, so that a
    short positive wait does not become a poll that returns at once."""
    return max(0, math.ceil(seconds * 1000))
