"""Leases: who holds a partition, as its holder writes it into ``lease.json`` when it claims the
partition (and with the failure that stopped it). A holder's heartbeat is its process record
(``processes``); a holder of release 0.2 renewed its lease at every heartbeat instead."""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass

from spark_zmq.spool.index import checked_version, versioned
from spark_zmq.spool.layout import LEASE_NAME, epochs, partition_dir, read_in_epoch


@dataclass(frozen=True)
class Lease:
    """Who holds a partition: what its holder writes into ``lease.json``."""

    epoch: int
    holder: str  # host/pid of the writing process
    executor: str  # host/pid of the JVM the holder serves (driver or executor)
    beat: int  # how many times its holder wrote it (release 0.2: its heartbeat counter)
    at: float  # wall-clock time it was written
    sealed: bool = False  # the holder let go (or was taken over): the partition is free
    failure: str = ""  # why the holder stopped, if capture failed

    @classmethod
    def renewed(cls, epoch: int, executor: str, beat: int, failure: str = "") -> Lease:
        """The lease this process writes now, for the ``beat``-th time in ``epoch``."""
        return cls(epoch, process_id(), executor, beat, time.time(), failure=failure)

    def to_json(self) -> str:
        return json.dumps(
            versioned(
                {
                    "holder": self.holder,
                    "executor": self.executor,
                    "beat": self.beat,
                    "at": self.at,
                    "failure": self.failure,
                }
            )
        )


def load_lease(root: str, key: str) -> Lease | None:
    """The lease of the partition's highest epoch; None if nobody ever claimed it."""
    folder = partition_dir(root, key)
    claimed = epochs(folder)
    if not claimed:
        return None
    return lease_of(folder, *claimed[-1])


def lease_of(folder: str, epoch: int, sealed: bool) -> Lease:
    found = read_in_epoch(folder, epoch, LEASE_NAME)
    if found is None:  # claimed a moment ago; its lease is being written
        return Lease(epoch, "", "", 0, 0.0, sealed)
    obj = checked_version(json.loads(found.text), found.path)
    return Lease(
        epoch,
        obj["holder"],
        obj["executor"],
        obj["beat"],
        obj["at"],
        sealed or found.sealed,
        obj.get("failure", ""),
    )


def process_id() -> str:
    """host/pid of this process: how holders name themselves in leases."""
    return f"{socket.gethostname()}/{os.getpid()}"
