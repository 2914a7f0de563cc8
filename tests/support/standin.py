"""Capture processes run by a stand-in driver (``spark_zmq.testing.standin``; the fixtures
``standin_driver`` and ``numbered_publishers`` make them): settings for short tests, and what
the spool holds of numbered messages."""

from __future__ import annotations

from spark_zmq.spool.layout import load_index
from spark_zmq.stream_settings import CaptureSettings
from spark_zmq.testing.standin import StandInDriver, numbers_in_spool
from support.common import wait_until

#: seconds without a heartbeat before a capture process's partitions are taken over
LEASE_TIMEOUT = 2.0
SETTINGS = CaptureSettings(
    format_name="zeroeq",
    max_spool_bytes=64 << 20,
    max_message_bytes=1 << 20,
    flush_interval=0.05,
    lease_timeout=LEASE_TIMEOUT,
    idle_timeout=120.0,
    drop_on_write_error=False,
    receive_hwm=1000,
)


def wait_for_all(driver: StandInDriver, sent: dict[str, int]) -> dict[str, list]:
    """Each partition's numbers and gap texts, once the spool holds its last message."""

    def read() -> dict[str, list] | None:
        found = {}
        for key, count in sent.items():
            index = load_index(driver.spool, key)
            found[key] = numbers_in_spool(driver.spool, key, index.end) if index else []
            if count - 1 not in found[key]:
                return None
        return found

    return wait_until(read, timeout=30, what="every message sent in the spool")


def holes(numbers: list) -> list[tuple[int, int, bool]]:
    """(after, before, with a gap row between) for each run of missing numbers; asserts that
    no number comes twice or out of order."""
    seen = [n for n in numbers if isinstance(n, int)]
    assert seen == sorted(set(seen)), f"duplicated or out of order: {seen}"
    found, last, gap = [], None, False
    for item in numbers:
        if isinstance(item, str):
            gap = gap or item.startswith("gap:")
            continue
        if last is not None and item != last + 1:
            found.append((last, item, gap))
        last, gap = item, False
    return found
