"""The driver's view of the holders: every partition's lease, as its holder renews it, timed by
the driver's own clock (no clock of another host is trusted), and the claims sent for it.

A holder is *live* while its lease is unsealed and its heartbeat moved within ``leaseTimeout``.
One log line per new holder (and a warning with the time span without one when a partition
moved), one when a holder lets go; a holder's failure fails the query, once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from spark_zmq.errors import CaptureError
from spark_zmq.log import logger
from spark_zmq.spool.layout import partition_keys
from spark_zmq.spool.leases import Lease, load_lease


@dataclass
class Watched:
    """The driver's view of one partition's lease."""

    lease: Lease | None
    changed_at: float
    requested_at: float = float("-inf")
    requests: int = 0  # claims sent since its epoch last changed
    last_holder: Lease | None = None  # the last lease seen with a holder in it

    @property
    def epoch(self) -> int:
        """The partition's highest epoch (0: never claimed): what a claim expects to follow."""
        return self.lease.epoch if self.lease else 0


class HolderWatch:
    """Reads the leases of a spool's partitions and says which have a live holder."""

    def __init__(self, name: str, spool_path: str, lease_timeout: float) -> None:
        self.name = name
        self.spool_path = spool_path
        self.lease_timeout = lease_timeout
        self._watched: dict[str, Watched] = {}

    def of(self, key: str) -> Watched:
        """What is known of ``key`` (a partition never seen: no lease, never requested)."""
        return self._watched.get(key) or Watched(None, time.monotonic())

    def requested(self, key: str) -> None:
        """A claim for ``key`` went out now."""
        now = time.monotonic()
        watched = self._watched.setdefault(key, Watched(None, now))
        watched.requested_at = now
        watched.requests += 1

    def live(self) -> set[str]:
        """Keys whose holder's heartbeat moved within leaseTimeout, by this process's clock."""
        now = time.monotonic()
        live = set()
        for key in partition_keys(self.spool_path):
            lease = load_lease(self.spool_path, key)
            watched = self._watched.get(key)
            changed = False
            if watched is None:
                watched = self._watched[key] = Watched(lease, now)
            elif _beat_of(lease) != _beat_of(watched.lease):
                changed = True
                if lease is not None and lease.epoch != _beat_of(watched.lease)[0]:
                    watched.requests = 0  # a claim went through
                watched.lease, watched.changed_at = lease, now
            if lease is not None and lease.holder:
                self._log_change(key, watched, lease)
            if changed and lease is not None and lease.failure:
                # failed during this run (a failure left by an earlier run is not raised again)
                raise CaptureError(
                    f"{self.name}: the capture of partition {key} on "
                    f"executor {lease.executor} failed: {lease.failure}"
                )
            if (
                lease is not None
                and not lease.sealed
                and now - watched.changed_at < self.lease_timeout
            ):
                live.add(key)
        return live

    def _log_change(self, key: str, watched: Watched, lease: Lease) -> None:
        """One line per new holder, and one when a holder lets go."""
        last = watched.last_holder
        watched.last_holder = lease
        name = self.name
        if last is None or lease.epoch > last.epoch:
            if last is None:
                logger.info(
                    "%s: partition %s held by executor %s (epoch %d)",
                    name,
                    key,
                    lease.executor,
                    lease.epoch,
                )
            else:
                logger.warning(
                    "%s: partition %s moved from executor %s to executor %s (epoch "
                    "%d); nothing was captured between %s and %s",
                    name,
                    key,
                    last.executor,
                    lease.executor,
                    lease.epoch,
                    _wall(last.at),
                    _wall(lease.at),
                )
        elif lease.sealed and not last.sealed:
            logger.info("%s: partition %s released by its holder %s", name, key, lease.holder)


def _beat_of(lease: Lease | None) -> tuple:
    return (None,) if lease is None else (lease.epoch, lease.beat, lease.sealed)


def _wall(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)) if at else "(never)"
