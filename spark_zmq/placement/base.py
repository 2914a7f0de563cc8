"""Where capture runs, behind one interface the stream reader plans offsets with.

Three placements: ``driver.DriverCapture`` (option ``capture=driver``),
``executors.enumerator.ExecutorCapture`` (``capture=executors``) and ``service.ServiceSpool``
(``capture=service``: a capture service captures, the query only reads).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from spark_zmq.protocols.contract import StreamProtocol
from spark_zmq.spool.index import Listing, PartitionState
from spark_zmq.spool.remote import ServedSpool
from spark_zmq.stream_settings import ReaderSettings

if TYPE_CHECKING:  # (a Claim is a Spark partition: placements without claims need no pyspark)
    from spark_zmq.placement.executors.claim import Claim

#: the spool's JSON document that holds discovery's durable state
DISCOVERY = "discovery"


class Placement(ABC):
    """Runs discovery and capture for a query somewhere; tells the reader what is spooled."""

    #: where a new stream starts when option startingOffsets is not set
    default_starting_offsets = "latest"

    def __init__(
        self, protocol: StreamProtocol[Any], query: ReaderSettings[Any], spool_path: str
    ) -> None:
        self.protocol = protocol
        #: the query's settings (capture's, the format's for discovery)
        self.query = query
        self.spool_path = spool_path
        #: each partition's end when this run started (for startingOffsets=latest)
        self.ends_at_start: dict[str, int] = {}

    @abstractmethod
    def start(self) -> None:
        """Begin discovering and capturing."""

    @abstractmethod
    def snapshot(self) -> dict[str, PartitionState]:
        """Every partition's retained range, including everything captured before this call."""

    def listing(self, key: str, start: int, end: int) -> Listing | None:
        """The segments of [start, end) of ``key`` as the last ``snapshot`` saw them, for the
        read task (None: it loads the partition's index itself)."""
        return None

    def waive_downtime(self) -> set[str]:
        """A new query starts at ``ends_at_start``: the gap rows this run owes for the time
        before it started (an earlier run's downtime, ``spool.downtime``) are not its loss, so
        they are owed no more. Returns the partitions whose row this run wrote already, each
        at its ``ends_at_start``. Only capture on the driver owes them for its own query."""
        return set()

    def next_claims_round(self, last_round: int | None) -> int | None:
        """The claims round the next offset carries: a new one when capture processes need
        starting on executors now (a micro-batch with a new round runs its claim tasks,
        ``claims_of_round``), else ``last_round``. Capture on the driver never needs one."""
        return last_round

    def claims_of_round(self, claims_round: int) -> list[Claim]:
        """The claim tasks of a round that ``next_claims_round`` opened."""
        return []

    def served(self) -> ServedSpool | None:
        """Where the spool is served to read tasks whose host does not see its folder (None:
        nowhere; they must see it)."""
        return None

    @abstractmethod
    def commit(self, end: dict[str, int]) -> None:
        """Spark committed everything below ``end``: the spool may let it go."""

    @abstractmethod
    def close(self) -> None:
        """Stop discovering and, where this process captures, capturing."""
