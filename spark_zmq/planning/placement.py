"""Where capture runs, behind one interface the stream reader plans offsets with.

Two placements: ``driver.DriverCapture`` (option ``capture=driver``) and
``executors.ExecutorCapture`` (``capture=executors``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from spark_zmq.options import Options
from spark_zmq.planning.assignment import Claim
from spark_zmq.protocols.base import StreamProtocol
from spark_zmq.spool.layout import PartitionState

#: the spool's JSON document that holds discovery's durable state
DISCOVERY = "discovery"


class Placement(ABC):
    """Runs discovery and capture for a query somewhere; tells the reader what is spooled."""

    def __init__(self, protocol: StreamProtocol, options: Options, spool_path: str) -> None:
        self.protocol = protocol
        self.options = options
        self.spool_path = spool_path
        #: each partition's end when this run started (for startingOffsets=latest)
        self.ends_at_start: dict[str, int] = {}

    @abstractmethod
    def start(self) -> None:
        """Begin discovering and capturing."""

    @abstractmethod
    def snapshot(self) -> dict[str, PartitionState]:
        """Every partition's retained range, including everything captured before this call."""

    def claims(self, retry_now: bool = False) -> list["Claim"]:
        """Partitions that need a holder now, as claim tasks; none when capture is local."""
        return []

    def requested(self, claims: list["Claim"]) -> None:
        """The claims went out in a micro-batch."""

    @abstractmethod
    def commit(self, end: dict[str, int]) -> None:
        """Spark committed everything below ``end``: the spool may let it go."""

    @abstractmethod
    def close(self) -> None:
        """Stop discovering and, where this process captures, capturing."""


def make_placement(protocol: StreamProtocol, options: Options, spool_path: str) -> Placement:
    """The placement option ``capture`` names."""
    from spark_zmq.planning.driver import DriverCapture
    from spark_zmq.planning.executors import ExecutorCapture

    kind = ExecutorCapture if options["capture"] == "executors" else DriverCapture
    return kind(protocol, options, spool_path)
