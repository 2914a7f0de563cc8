"""The probes' answers (``Health``), and what a readiness probe checks of a spool."""

from __future__ import annotations

import os
from typing import NamedTuple

from spark_zmq.spool.layout import os_cause, remove_quietly

#: the file a readiness probe writes and removes in the spool (a file: never a partition)
READY_PROBE = "@ready-probe"


class Health(NamedTuple):
    """A probe's answer: whether it passes, and why (one line)."""

    ok: bool
    why: str


def spool_writable(spool_path: str) -> Health:
    """Whether the spool's storage takes a write now: a small file written and removed (a full
    or read-only storage fails, saying why)."""
    probe = os.path.join(spool_path, READY_PROBE)
    try:
        with open(probe, "wb") as written:
            written.write(b"ready?\n")
        os.remove(probe)
    except OSError as exc:
        remove_quietly(probe)
        return Health(False, f"spool {spool_path} cannot be written: {os_cause(exc)}")
    return Health(True, f"spool {spool_path} writable")


def ready(live: Health, spool_path: str) -> Health:
    """The readiness of a capture whose liveness is ``live``: live, and its spool takes a write
    (``spool_writable``)."""
    if not live.ok:
        return live
    writable = spool_writable(spool_path)
    return Health(True, "capture runs, spool writable") if writable.ok else writable
